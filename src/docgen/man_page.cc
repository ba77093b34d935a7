#include "docgen/man_page.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpupool {
namespace {

// Appends the character that starts at text[i] (UTF-8) as \[uXXXX]; returns the bytes it took.
size_t append_unicode(std::string_view text, size_t i, std::string& out) {
  unsigned char lead = static_cast<unsigned char>(text[i]);
  size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  if (length == 1 || i + length > text.size()) {
    out += "\\[uFFFD]";  // not UTF-8: the replacement character
    return 1;
  }
  unsigned code = lead & (0xFFu >> (length + 1));
  for (size_t k = 1; k < length; ++k) code = (code << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3Fu);
  out += fmt::format("\\[u{:04X}]", code);
  return length;
}

// Names and option words: every hyphen is a real minus, so they can be searched for and copied.
std::string roff_literal(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      i += append_unicode(text, i, out);
      continue;
    }
    if (c == '-') out += "\\-";
    else if (c == '\\') out += "\\e";
    else out += c;
    ++i;
  }
  return out;
}

// A macro argument in double quotes.
std::string roff_argument(std::string_view text) {
  std::string out;
  for (char c : roff_literal(text)) out += c == '"' ? std::string("\\(dq") : std::string(1, c);
  return "\"" + out + "\"";
}

std::string bold(std::string_view text) { return "\\fB" + roff_literal(text) + "\\fR"; }
std::string italic(std::string_view text) { return "\\fI" + roff_literal(text) + "\\fR"; }

std::string page_reference(std::string_view page) {
  size_t open = page.rfind('(');
  if (open == std::string_view::npos) return bold(page);
  return bold(page.substr(0, open)) + std::string(page.substr(open));
}

// Paragraphs: an empty line separates them; single newlines are only the source's wrapping.
std::vector<std::string> paragraphs(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    if (end == std::string_view::npos) end = text.size();
    std::string paragraph(text.substr(start, end - start));
    while (!paragraph.empty() && (paragraph.back() == '\n' || paragraph.back() == ' ')) paragraph.pop_back();
    size_t first = paragraph.find_first_not_of(" \n");
    if (first != std::string::npos) out.push_back(paragraph.substr(first));
    start = end + 2;
  }
  return out;
}

void append_paragraphs(std::string& out, std::string_view text) {
  for (const std::string& paragraph : paragraphs(text)) out += ".PP\n" + roff_text(paragraph) + "\n";
}

std::string value_usage(const OptionDoc& option) {
  std::string value = italic(option.value_name);
  return option.value_optional ? "[" + value + "]" : value;
}

std::string option_term(const OptionDoc& option) {
  if (option.is_positional()) {
    if (option.kind == ValueKind::Command) return "[" + bold("--") + "] " + italic(option.positional) + " ...";
    return italic(option.positional) + (option.repeatable ? " ..." : "");
  }
  std::vector<std::string> names;
  for (const std::string& name : option.short_names) names.push_back(bold("-" + name));
  for (const std::string& name : option.long_names) names.push_back(bold("--" + name));
  std::string term = fmt::format("{}", fmt::join(names, ", "));
  if (option.takes_value()) term += " " + value_usage(option);
  return term;
}

std::string option_text(const OptionDoc& option) {
  std::string text = roff_text(option.description);
  if (!text.empty() && text.back() != '.' && text.back() != ')') text += '.';
  if (!option.choices.empty()) {
    std::vector<std::string> choices;
    for (const std::string& choice : option.choices) choices.push_back(bold(choice));
    text += fmt::format(" One of {}.", fmt::join(choices, ", "));
  }
  if (!option.default_value.empty() && option.description.find("default") == std::string::npos) {
    text += " Default: " + bold(option.default_value) + ".";
  }
  if (option.required && !option.is_positional()) text += " Required.";
  return text;
}

void append_options(std::string& out, const std::vector<OptionDoc>& options, bool positionals) {
  for (const OptionDoc& option : options) {
    if (option.is_positional() != positionals) continue;
    out += ".TP\n" + option_term(option) + "\n" + option_text(option) + "\n";
  }
}

bool has_positionals(const CommandDoc& command) {
  return std::any_of(command.options.begin(), command.options.end(),
                     [](const OptionDoc& option) { return option.is_positional(); });
}

std::string synopsis(const CommandDoc& command, const std::vector<std::string>& path) {
  std::string out = bold(fmt::format("{}", fmt::join(path, " ")));
  bool other_options = false;
  for (const OptionDoc& option : command.options) {
    if (option.is_positional()) continue;
    if (option.required) {
      out += " " + bold(option.long_names.empty() ? "-" + option.short_names.front() : "--" + option.long_names.front()) +
             " " + value_usage(option);
    } else {
      other_options = true;
    }
  }
  if (other_options) out += " [" + italic("OPTIONS") + "]";
  if (!command.commands.empty()) out += " " + italic("COMMAND") + " [" + italic("ARGS") + "]";
  for (const OptionDoc& option : command.options) {
    if (!option.is_positional()) continue;
    std::string term = option_term(option);
    out += " " + (option.required || option.kind == ValueKind::Command ? term : "[" + term + "]");
  }
  return out;
}

// A subcommand described within its parent's page, and its own subcommands after it.
void append_subsections(std::string& out, const CommandDoc& command, std::vector<std::string> path) {
  path.push_back(command.name);
  out += ".SS " + roff_argument(fmt::format("{}", fmt::join(path, " "))) + "\n";
  out += synopsis(command, path) + "\n";
  append_paragraphs(out, command.description);
  append_paragraphs(out, command.footer);
  append_options(out, command.options, true);
  append_options(out, command.options, false);
  for (const CommandDoc& sub : command.commands) append_subsections(out, sub, path);
}

}  // namespace

std::string roff_text(std::string_view text) {
  const bool code_spans = std::count(text.begin(), text.end(), '`') % 2 == 0;
  bool in_code = false;
  bool line_start = true;
  bool token_start = true;
  bool option_token = false;
  std::string out;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    line_start = c == '\n';
    if (c == ' ' || c == '\n' || c == '\t') {
      out += c;
      token_start = true;
      option_token = false;
      ++i;
      continue;
    }
    // A word that starts with a hyphen (after an opening bracket or quote) is an option.
    bool opening = c == '(' || c == '[' || c == '"' || c == '\'' || c == '`';
    if (token_start && !opening) {
      option_token = c == '-';
      token_start = false;
    }
    if (static_cast<unsigned char>(c) >= 0x80) {
      i += append_unicode(text, i, out);
      continue;
    }
    if (c == '`') {
      out += code_spans ? (in_code ? "\\fR" : "\\fB") : "\\(ga";
      in_code = code_spans && !in_code;
    } else if (c == '\\') {
      out += "\\e";
    } else if (c == '-' && option_token) {
      out += "\\-";
    } else {
      out += c;
    }
    ++i;
  }
  return out;
}

std::string summary_of(const CommandDoc& command) {
  std::string prefix = command.name + ": ";
  if (command.description.rfind(prefix, 0) == 0) return command.description.substr(prefix.size());
  return command.description;
}

std::string man_page(const CommandDoc& command, const ManPageSpec& spec) {
  std::string upper = spec.name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; });
  std::string out = fmt::format(".\\\" Generated from the command-line definitions of {}.\n", spec.command_path.front());
  out += fmt::format(".TH {} {} \"\" {} {}\n", roff_argument(upper), spec.section, roff_argument(spec.source),
                     roff_argument(spec.manual));
  out += ".SH NAME\n" + roff_literal(spec.name) + " \\- " + roff_text(summary_of(command)) + "\n";
  out += ".SH SYNOPSIS\n" + synopsis(command, spec.command_path) + "\n";
  out += ".SH DESCRIPTION\n";
  append_paragraphs(out, summary_of(command));
  append_paragraphs(out, command.footer);
  if (!command.commands.empty()) {
    out += ".SH COMMANDS\n";
    for (const CommandDoc& sub : command.commands) {
      if (spec.subcommand_pages) {
        out += ".TP\n" + page_reference(fmt::format("{}-{}({})", spec.name, sub.name, spec.section)) + "\n" +
               roff_text(sub.description) + "\n";
      } else {
        append_subsections(out, sub, spec.command_path);
      }
    }
  }
  if (has_positionals(command)) {
    out += ".SH ARGUMENTS\n";
    append_options(out, command.options, true);
  }
  out += ".SH OPTIONS\n";
  append_options(out, command.options, false);
  for (const ManSection& section : spec.sections) {
    out += ".SH " + roff_argument(section.title) + "\n";
    append_paragraphs(out, section.text);
    for (const ManEntry& entry : section.entries) out += ".TP\n" + bold(entry.term) + "\n" + roff_text(entry.text) + "\n";
  }
  if (!spec.see_also.empty()) {
    std::vector<std::string> references;
    for (const std::string& page : spec.see_also) references.push_back(page_reference(page));
    out += ".SH \"SEE ALSO\"\n" + fmt::format("{}", fmt::join(references, ",\n")) + "\n";
  }
  return out;
}

}  // namespace gpupool
