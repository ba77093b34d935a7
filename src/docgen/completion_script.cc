#include "docgen/completion_script.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace gpupool {
namespace {

// A command and the names that lead to it from the program ("gpupool sim replay").
struct Visited {
  std::vector<std::string> path;
  const CommandDoc* command;
};

void visit(const CommandDoc& command, std::vector<std::string> path, std::vector<Visited>& out) {
  path.push_back(command.name);
  out.push_back({path, &command});
  for (const CommandDoc& sub : command.commands) visit(sub, path, out);
}

std::vector<Visited> all_commands(const CommandDoc& program) {
  std::vector<Visited> out;
  visit(program, {}, out);
  return out;
}

std::string joined(const std::vector<std::string>& words, std::string_view separator = " ") {
  return fmt::format("{}", fmt::join(words, separator));
}

// Single-quoted for bash and zsh.
std::string sh_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Single-quoted for fish, where a backslash escapes inside single quotes too.
std::string fish_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string identifier(std::string_view text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// Descriptions are one line in a completion menu.
std::string one_line(std::string_view text) {
  std::string out(text);
  std::replace(out.begin(), out.end(), '\n', ' ');
  return out;
}

std::vector<std::string> option_words(const OptionDoc& option) {
  std::vector<std::string> words;
  for (const std::string& name : option.long_names) words.push_back("--" + name);
  for (const std::string& name : option.short_names) words.push_back("-" + name);
  return words;
}

// An option whose value is the next word (one that may stand alone reads the next word as
// something else).
bool value_follows(const OptionDoc& option) {
  return !option.is_positional() && option.takes_value() && !option.value_optional;
}

// The operand a command completes: its first positional with choices or a kind to complete.
const OptionDoc* completed_operand(const CommandDoc& command) {
  for (const OptionDoc& option : command.options) {
    if (option.is_positional() && (option.kind != ValueKind::Text || !option.choices.empty())) return &option;
  }
  return nullptr;
}

bool uses_job_ids(const CommandDoc& program) {
  for (const Visited& v : all_commands(program)) {
    for (const OptionDoc& option : v.command->options) {
      if (option.kind == ValueKind::Job) return true;
    }
  }
  return false;
}

// The name a value is shown under: the option's own where CLI11's type says little.
std::string value_label(const OptionDoc& option) {
  static const std::vector<std::string> generic = {"TEXT", "INT", "UINT", "FLOAT", "NUMBER", "BOOLEAN"};
  std::string label = option.value_name;
  if (label.empty() || std::find(generic.begin(), generic.end(), label) != generic.end()) {
    label = option.is_positional() ? option.positional : option.long_names.empty() ? option.short_names.front()
                                                                                     : option.long_names.front();
  }
  std::transform(label.begin(), label.end(), label.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  return label;
}

// --- bash ---

// `COMPREPLY=...` completing `$cur` with a value of this kind, or empty when there is nothing to offer.
std::string bash_value_completion(const OptionDoc& option, const std::string& prefix) {
  if (!option.choices.empty()) return fmt::format("COMPREPLY=($(compgen -W {} -- \"$cur\"))", sh_quote(joined(option.choices)));
  switch (option.kind) {
    case ValueKind::File: return "compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- \"$cur\")";
    case ValueKind::Directory: return "compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -d -- \"$cur\")";
    case ValueKind::Job: return fmt::format("COMPREPLY=($(compgen -W \"$({}_job_ids)\" -- \"$cur\"))", prefix);
    case ValueKind::Command: return "COMPREPLY=($(compgen -c -- \"$cur\"))";
    case ValueKind::Text: break;
  }
  return "";
}

}  // namespace

std::string bash_completion(const CommandDoc& program, const CompletionSettings& settings) {
  const std::string p = "_" + identifier(program.name);
  const std::vector<Visited> commands = all_commands(program);
  std::string out = fmt::format(
      "# bash completion for {0}, generated from its command-line definitions.\n\n",
      program.name);

  out += fmt::format("# The subcommands of command $1.\n{}_commands() {{\n  case $1 in\n", p);
  for (const Visited& v : commands) {
    std::vector<std::string> names;
    for (const CommandDoc& sub : v.command->commands) names.push_back(sub.name);
    if (!names.empty()) out += fmt::format("    {}) echo {} ;;\n", sh_quote(joined(v.path)), sh_quote(joined(names)));
  }
  out += "  esac\n}\n\n";

  out += fmt::format("# The options of command $1.\n{}_options() {{\n  case $1 in\n", p);
  for (const Visited& v : commands) {
    std::vector<std::string> words;
    for (const OptionDoc& option : v.command->options) {
      for (const std::string& word : option_words(option)) words.push_back(word);
    }
    if (!words.empty()) out += fmt::format("    {}) echo {} ;;\n", sh_quote(joined(v.path)), sh_quote(joined(words)));
  }
  out += "  esac\n}\n\n";

  std::vector<std::string> value_keys;
  std::string value_cases;
  for (const Visited& v : commands) {
    for (const OptionDoc& option : v.command->options) {
      if (!value_follows(option)) continue;
      std::vector<std::string> keys;
      for (const std::string& word : option_words(option)) keys.push_back(sh_quote(joined(v.path) + " " + word));
      value_keys.insert(value_keys.end(), keys.begin(), keys.end());
      if (std::string action = bash_value_completion(option, p); !action.empty()) {
        value_cases += fmt::format("    {}) {} ;;\n", joined(keys, "|"), action);
      }
    }
  }
  out += fmt::format("# Succeeds when option $2 of command $1 takes the next word as its value.\n"
                     "{}_takes_value() {{\n  case \"$1 $2\" in\n",
                     p);
  if (!value_keys.empty()) out += fmt::format("    {}) return 0 ;;\n", joined(value_keys, "|"));
  out += "  esac\n  return 1\n}\n\n";
  out += fmt::format("# Completes $3 as the value of option $2 of command $1.\n{}_value() {{\n  local cur=$3\n"
                     "  case \"$1 $2\" in\n{}  esac\n}}\n\n",
                     p, value_cases);

  out += fmt::format("# Completes $2 as an operand of command $1; fails when the command has nothing to offer.\n"
                     "{}_operand() {{\n  local cur=$2\n  case $1 in\n",
                     p);
  for (const Visited& v : commands) {
    const OptionDoc* operand = completed_operand(*v.command);
    if (operand == nullptr || operand->kind == ValueKind::Command) continue;  // offered after `--` only
    if (std::string action = bash_value_completion(*operand, p); !action.empty()) {
      out += fmt::format("    {}) {}; return 0 ;;\n", sh_quote(joined(v.path)), action);
    }
  }
  out += "    *) return 1 ;;\n  esac\n}\n\n";

  if (uses_job_ids(program)) {
    out += fmt::format("# The ids of the daemon's jobs; nothing when no daemon answers.\n{}_job_ids() {{\n  {}\n}}\n\n", p,
                       settings.job_ids_command);
  }

  out += fmt::format(R"sh(# Completes $1, the word under the cursor, which is COMP_WORDS[$2]; fails when the user's own
# command (after --) was completed instead.
{0}_words() {{
  local cur=$1 cword=$2 prev=${{COMP_WORDS[$2-1]}} path={1} word i skip=0
  # The words before the cursor: subcommands lead deeper, option values are passed over.
  for ((i = 1; i < cword; i++)); do
    word=${{COMP_WORDS[i]}}
    if [[ $word == = ]]; then skip=1; continue; fi  # --option=value, split at the '='
    if ((skip)); then skip=0; continue; fi
    if [[ $word == -- ]]; then
      # The rest is the user's own command: complete it as a command line of its own.
      if declare -F _command_offset >/dev/null; then
        _command_offset $((i + 1))
      elif ((i + 1 == cword)); then
        COMPREPLY=($(compgen -c -- "$cur"))
      else
        compopt -o default 2>/dev/null
      fi
      return 1
    fi
    if [[ $word == -* ]]; then
      {0}_takes_value "$path" "$word" && skip=1
    elif [[ " $({0}_commands "$path") " == *" $word "* ]]; then
      path+=" $word"
    fi
  done
  if [[ $prev == = ]]; then
    prev=${{COMP_WORDS[cword-2]}}
  fi
  if [[ $prev == -* ]] && {0}_takes_value "$path" "$prev"; then
    {0}_value "$path" "$prev" "$cur"
    return 0
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$({0}_options "$path")" -- "$cur"))
    return 0
  fi
  local commands
  commands=$({0}_commands "$path")
  if [[ -n $commands ]]; then
    COMPREPLY=($(compgen -W "$commands" -- "$cur"))
  elif ! {0}_operand "$path" "$cur" && [[ -z $cur ]]; then
    COMPREPLY=($(compgen -W "$({0}_options "$path")" -- "$cur"))
  fi
  return 0
}}

# bash splits words at ':' and '=' (COMP_WORDBREAKS): "slurm:42" arrives as slurm, :, 42 and
# "--trace=:x" as --trace, =:, x. The pieces of the word under the cursor are joined back, an '='
# that ends an option taken off, and each reply cut to what follows the word's last ':', the only
# part bash replaces.
{0}() {{
  local line=${{COMP_LINE:0:COMP_POINT}} cur=${{COMP_WORDS[COMP_CWORD]}} cword=$COMP_CWORD
  while ((cword > 1)) && [[ ${{COMP_WORDS[cword-1]}} == *: || $cur == :* ]] &&
    [[ $line == *"${{COMP_WORDS[cword-1]}}$cur" ]]; do
    cur=${{COMP_WORDS[cword-1]}}$cur
    ((cword--))
  done
  cur=${{cur#=}}
  COMPREPLY=()
  if {0}_words "$cur" "$cword" && [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
    # Cut, a lone directory's name no longer shows bash that it is one: its '/' is added here.
    if ((${{#COMPREPLY[@]}} == 1)) && [[ -d ${{COMPREPLY[0]}} ]]; then
      COMPREPLY[0]+=/
      compopt -o nospace 2>/dev/null
    fi
    COMPREPLY=("${{COMPREPLY[@]#"${{cur%"${{cur##*:}}"}}"}}")
  fi
  return 0
}}

complete -F {0} {1}
)sh",
                     p, program.name);
  return out;
}

// --- zsh ---

namespace {

// The text between the brackets of an _arguments spec.
std::string zsh_bracketed(std::string_view text) {
  std::string out;
  for (char c : one_line(text)) {
    if (c == '\\' || c == '[' || c == ']') out += '\\';
    out += c;
  }
  return out;
}

// A message or a name in a colon-separated _arguments or _describe field.
std::string zsh_field(std::string_view text) {
  std::string out;
  for (char c : one_line(text)) {
    if (c == '\\' || c == ':') out += '\\';
    out += c;
  }
  return out;
}

std::string zsh_action(const OptionDoc& option, const std::string& prefix) {
  if (!option.choices.empty()) {
    std::vector<std::string> choices;
    for (const std::string& choice : option.choices) {
      std::string escaped;
      for (char c : choice) {
        if (c == ' ' || c == '(' || c == ')' || c == '\\' || c == ':') escaped += '\\';
        escaped += c;
      }
      choices.push_back(escaped);
    }
    return "(" + joined(choices) + ")";
  }
  switch (option.kind) {
    case ValueKind::File: return "_files";
    case ValueKind::Directory: return "_files -/";
    case ValueKind::Job: return prefix + "_job_ids";
    case ValueKind::Command: return "_command_names -e";
    case ValueKind::Text: break;
  }
  return " ";
}

// One option or positional as the words of an _arguments spec.
std::string zsh_spec(const OptionDoc& option, const std::string& prefix) {
  std::string label = zsh_field(value_label(option));
  if (option.is_positional()) {
    if (option.kind == ValueKind::Command) return sh_quote("*::" + label + ":_normal");
    std::string head = option.repeatable ? "*:" : option.required ? ":" : "::";
    return sh_quote(head + label + ":" + zsh_action(option, prefix));
  }
  std::string value;
  if (option.takes_value()) value = (option.value_optional ? "::" : ":") + label + ":" + zsh_action(option, prefix);
  std::string tail = "[" + zsh_bracketed(option.description) + "]" + value;
  std::vector<std::string> names;
  for (const std::string& name : option.long_names) {
    names.push_back("--" + name + (!option.takes_value() ? "" : option.value_optional ? "=-" : "="));
  }
  for (const std::string& name : option.short_names) names.push_back("-" + name + (option.takes_value() ? "+" : ""));
  std::string repeat = option.repeatable ? "*" : "";
  if (names.size() == 1) return sh_quote(repeat + names.front() + tail);
  std::string exclusive = repeat.empty() ? "(" + joined(option_words(option)) + ")" : repeat;
  return sh_quote(exclusive) + "{" + joined(names, ",") + "}" + sh_quote(tail);
}

}  // namespace

std::string zsh_completion(const CommandDoc& program, const CompletionSettings& settings) {
  const std::string p = "_" + identifier(program.name);
  std::string out = fmt::format(
      "#compdef {0}\n"
      "# zsh completion for {0}, generated from its command-line definitions.\n\n",
      program.name);
  if (uses_job_ids(program)) {
    out += fmt::format(
        "# The ids of the daemon's jobs; nothing when no daemon answers.\n"
        "{}_job_ids() {{\n  local -a ids expl\n  ids=(${{(f)\"$({})\"}})\n  _wanted job-ids expl 'job id' compadd -a ids\n}}\n\n",
        p, settings.job_ids_command);
  }
  for (const Visited& v : all_commands(program)) {
    const CommandDoc& command = *v.command;
    std::string function = "_" + identifier(joined(v.path, "_"));
    std::vector<std::string> specs;
    for (const OptionDoc& option : command.options) specs.push_back(zsh_spec(option, p));
    if (command.commands.empty()) {
      out += fmt::format("{}() {{\n  _arguments -s -S", function);
      for (const std::string& spec : specs) out += " \\\n    " + spec;
      out += "\n}\n\n";
      continue;
    }
    out += fmt::format("{}() {{\n  local curcontext=$curcontext context state state_descr line\n"
                       "  local -A opt_args\n  local -a commands\n  _arguments -C -s -S",
                       function);
    for (const std::string& spec : specs) out += " \\\n    " + spec;
    out += " \\\n    ': :->command' \\\n    '*:: :->argument'\n  case $state in\n    command)\n      commands=(\n";
    for (const CommandDoc& sub : command.commands) {
      out += "        " + sh_quote(zsh_field(sub.name) + ":" + one_line(sub.description)) + "\n";
    }
    out += fmt::format("      )\n      _describe -t commands {} commands\n      ;;\n    argument)\n"
                       "      curcontext=${{curcontext%:*:*}}:{}-$words[1]:\n      case $words[1] in\n",
                       sh_quote(joined(v.path) + " command"), joined(v.path, "-"));
    for (const CommandDoc& sub : command.commands) {
      out += fmt::format("        {}) {}_{} ;;\n", sub.name, function, identifier(sub.name));
    }
    out += "      esac\n      ;;\n  esac\n}\n\n";
  }
  out += fmt::format(
      "# Autoloaded from $fpath, the file is the function's body; sourced, it registers itself.\n"
      "if [[ $funcstack[1] == {0} ]]; then\n  {0} \"$@\"\nelse\n  compdef {0} {1}\nfi\n",
      p, program.name);
  return out;
}

// --- fish ---

std::string fish_completion(const CommandDoc& program, const CompletionSettings& settings) {
  const std::string p = "__" + identifier(program.name);
  const std::string c = "complete -c " + program.name;
  std::string out = fmt::format(
      "# fish completion for {0}, generated from its command-line definitions.\n\n",
      program.name);
  if (uses_job_ids(program)) {
    out += fmt::format("# The ids of the daemon's jobs; nothing when no daemon answers.\nfunction {}_job_ids\n    {}\nend\n\n",
                       p, settings.job_ids_command);
  }
  out += fmt::format(
      "# After `--` the rest is the user's own command, completed as a command line of its own.\n"
      "function {}_user_command\n"
      "    set -l tokens (commandline -opc)\n"
      "    set -l at (contains -i -- -- $tokens); or return\n"
      "    set -e tokens[1..$at]\n"
      "    complete -C (string join ' ' -- (string escape -- $tokens) (commandline -ct))\n"
      "end\n\n"
      "{} -f\n",
      p, c);

  // The top-level commands that have subcommands of their own: a command at the top whose name
  // one of them also uses is told apart by that group not having been typed.
  std::vector<const CommandDoc*> groups;
  for (const CommandDoc& top : program.commands) {
    if (!top.commands.empty()) groups.push_back(&top);
  }
  auto seen = [](const std::vector<std::string>& names) {
    return "__fish_seen_subcommand_from " + joined(names);
  };
  for (const Visited& v : all_commands(program)) {
    const CommandDoc& command = *v.command;
    const std::vector<std::string> path(v.path.begin() + 1, v.path.end());
    std::vector<std::string> conditions;
    for (const std::string& name : path) conditions.push_back(seen({name}));
    if (path.size() == 1) {
      std::vector<std::string> others;
      for (const CommandDoc* group : groups) {
        bool shares = std::any_of(group->commands.begin(), group->commands.end(),
                                  [&](const CommandDoc& sub) { return sub.name == path.front(); });
        if (group->name != path.front() && shares) others.push_back(group->name);
      }
      if (!others.empty()) conditions.push_back("not " + seen(others));
    }
    std::string here = joined(conditions, "; and ");
    std::vector<std::string> subs;
    for (const CommandDoc& sub : command.commands) subs.push_back(sub.name);
    // The command's own options, until one of its subcommands is typed.
    std::string own = here;
    if (!subs.empty()) own = path.empty() ? "__fish_use_subcommand" : here + "; and not " + seen(subs);
    std::string condition = own.empty() ? "" : " -n " + fish_quote(own);

    out += fmt::format("\n# {}\n", joined(v.path));
    for (const CommandDoc& sub : command.commands) {
      out += fmt::format("{}{} -a {} -d {}\n", c, condition, fish_quote(sub.name), fish_quote(one_line(sub.description)));
    }
    for (const OptionDoc& option : command.options) {
      std::string line = c + condition;
      if (option.is_positional()) {
        if (!option.choices.empty()) line += " -a " + fish_quote(joined(option.choices));
        else if (option.kind == ValueKind::Job) line += fmt::format(" -a '({}_job_ids)'", p);
        else if (option.kind == ValueKind::File) line += " -F";
        else if (option.kind == ValueKind::Directory) line += " -a '(__fish_complete_directories)'";
        else if (option.kind == ValueKind::Command) {
          line = fmt::format("{} -n {} -a '({}_user_command)'", c,
                             fish_quote((here.empty() ? "" : here + "; and ") + "contains -- -- (commandline -opc)"), p);
        } else {
          continue;
        }
        out += line + " -d " + fish_quote(one_line(option.description)) + "\n";
        continue;
      }
      for (const std::string& name : option.short_names) line += " -s " + name;
      for (const std::string& name : option.long_names) line += " -l " + name;
      if (value_follows(option)) {
        if (!option.choices.empty()) {
          line += " -x -a " + fish_quote(joined(option.choices));
        } else if (option.kind == ValueKind::File) {
          line += " -r -F";
        } else if (option.kind == ValueKind::Directory) {
          line += " -x -a '(__fish_complete_directories)'";
        } else if (option.kind == ValueKind::Job) {
          line += fmt::format(" -x -a '({}_job_ids)'", p);
        } else {
          line += " -x";
        }
      }
      out += line + " -d " + fish_quote(one_line(option.description)) + "\n";
    }
  }
  return out;
}

}  // namespace gpupool
