#include "cli/batch_script.h"

#include <algorithm>
#include <array>
#include <optional>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"

namespace gpupool::cli {
namespace {

constexpr std::string_view kDirective = "#GPUPOOL";

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// A line's words, split as a shell splits plain words and quotes; nullopt when a quote is not closed.
std::optional<std::vector<std::string>> shell_words(std::string_view line) {
  std::vector<std::string> words;
  std::optional<std::string> word;  // the word being read, if one has begun
  char quote_char = 0;
  for (char c : line) {
    if (quote_char != 0) {
      if (c == quote_char) {
        quote_char = 0;
      } else {
        word->push_back(c);
      }
    } else if (is_blank(c)) {
      if (word) words.push_back(std::move(*word));
      word.reset();
    } else {
      if (!word) word.emplace();
      if (c == '\'' || c == '"') {
        quote_char = c;
      } else {
        word->push_back(c);
      }
    }
  }
  if (quote_char != 0) return std::nullopt;
  if (word) words.push_back(std::move(*word));
  return words;
}

// The base name of a path: "bash" of "/usr/bin/bash".
std::string_view base_name(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool is_script(std::string_view text) { return text.starts_with("#!"); }

Result<std::vector<ScriptDirective>> script_directives(std::string_view script, std::string_view source) {
  std::vector<ScriptDirective> directives;
  size_t number = 0;
  for (const std::string& line : split(script, '\n')) {
    ++number;
    std::string_view text = line;
    while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
    if (text.empty()) continue;
    if (!text.starts_with('#')) break;  // the script's first command ends the block
    if (!text.starts_with(kDirective)) continue;
    std::string_view rest = text.substr(kDirective.size());
    if (!rest.empty() && !is_blank(rest.front())) continue;  // "#GPUPOOLX": another comment
    std::optional<std::vector<std::string>> words = shell_words(rest);
    if (!words) return fail("{}:{}: a quote is not closed", source, number);
    if (!words->empty()) directives.push_back(ScriptDirective{number, std::move(*words)});
  }
  return directives;
}

Result<std::vector<std::string>> standard_input_command(std::string_view script) {
  if (!is_script(script)) return std::vector<std::string>{"/bin/sh", "-c", std::string(script), "gpupool-script"};
  size_t end = script.find('\n');
  std::string_view first_line = script.substr(0, end);
  std::vector<std::string> interpreter = shell_words(first_line.substr(2)).value_or(std::vector<std::string>());
  // "#!/usr/bin/env bash" names its shell in its second word.
  size_t shell = !interpreter.empty() && base_name(interpreter.front()) == "env" ? 1 : 0;
  static constexpr std::array<std::string_view, 7> kShells = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"};
  if (interpreter.size() <= shell ||
      std::find(kShells.begin(), kShells.end(), base_name(interpreter[shell])) == kShells.end()) {
    return fail("a script on standard input runs with a shell, and {} is not one: save it to a file and submit "
                "the file",
                quote(first_line));
  }
  interpreter.insert(interpreter.end(), {"-c", std::string(script), "gpupool-script"});
  return interpreter;
}

}  // namespace gpupool::cli
