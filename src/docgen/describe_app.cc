#include "docgen/describe_app.h"

#include "base/text.h"

namespace gpupool::cli {
namespace {

// The entries of the first {a,b,c} in `text`; a map's entries ("a->1") by their keys.
std::vector<std::string> braced_list(std::string_view text) {
  size_t open = text.find('{');
  size_t close = text.find('}', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return {};
  std::vector<std::string> entries;
  for (std::string entry : split(std::string(text.substr(open + 1, close - open - 1)), ',')) {
    if (size_t arrow = entry.find("->"); arrow != std::string::npos) entry.resize(arrow);
    if (!entry.empty()) entries.push_back(entry);
  }
  return entries;
}

// CLI11 describes an option's type as "TYPE:VALIDATOR:VALIDATOR...", each validator by its
// description: IsMember as "{a,b}", CheckedTransformer as "value in {a->1,b->2} OR {1,2}",
// ExistingFile as "FILE", ExistingDirectory as "DIR".
void read_type(const CLI::Option& option, OptionDoc& doc) {
  std::vector<std::string> parts = split(option.get_type_name(), ':');
  doc.value_name = parts.empty() ? "" : parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    bool member = part.rfind('{', 0) == 0 && part.find("->") == std::string::npos;
    if (doc.choices.empty() && (member || part.rfind("value in {", 0) == 0)) doc.choices = braced_list(part);
    if ((part == "FILE" || part == "DIR") && doc.value_name == "TEXT") doc.value_name = part;
  }
  const std::string& type = doc.value_name;
  if (type == "FILE" || type == "PATH") doc.kind = ValueKind::File;
  if (type == "DIR" || type == "DIRECTORY") doc.kind = ValueKind::Directory;
  if (type == "JOB_ID") doc.kind = ValueKind::Job;
  if (type == "COMMAND") doc.kind = ValueKind::Command;
}

OptionDoc describe_option(const CLI::Option& option) {
  OptionDoc doc;
  for (const std::string& name : option.get_lnames()) doc.long_names.push_back(name);
  for (const std::string& name : option.get_snames()) doc.short_names.push_back(name);
  if (!option.nonpositional()) doc.positional = option.get_name();
  doc.description = option.get_description();
  doc.required = option.get_required();
  doc.default_value = option.get_default_str();
  auto policy = option.get_multi_option_policy();
  doc.repeatable = option.get_items_expected_max() > 1 || policy == CLI::MultiOptionPolicy::TakeAll ||
                   policy == CLI::MultiOptionPolicy::Join;
  if (option.get_items_expected_max() > 0) {
    read_type(option, doc);
    if (doc.value_name.empty()) doc.value_name = "VALUE";
    doc.value_optional = option.get_expected_min() == 0 && !doc.is_positional();
  }
  return doc;
}

}  // namespace

CommandDoc describe_app(const CLI::App& app) {
  CommandDoc doc;
  doc.name = app.get_name();
  doc.description = app.get_description();
  doc.footer = app.get_footer();
  // Options first and positionals after them, each in the order they were added; an empty
  // group hides an option or subcommand from --help, and so from here.
  std::vector<OptionDoc> positionals;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_group().empty()) continue;
    OptionDoc described = describe_option(*option);
    (described.is_positional() ? positionals : doc.options).push_back(std::move(described));
  }
  doc.options.insert(doc.options.end(), positionals.begin(), positionals.end());
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) {
         return !s->get_name().empty() && !s->get_group().empty();
       })) {
    doc.commands.push_back(describe_app(*sub));
  }
  return doc;
}

}  // namespace gpupool::cli
