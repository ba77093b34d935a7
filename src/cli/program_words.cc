#include "cli/program_words.h"

namespace gpupool::cli {
namespace {

bool looks_like_option(const std::string& word) { return word.size() > 1 && word[0] == '-'; }

}  // namespace

SplitWords split_program_words(const std::vector<std::string>& words,
                               const std::function<OptionKind(std::string_view)>& kind_of) {
  SplitWords split;
  size_t i = 0;
  for (; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word == "--") {
      ++i;
      break;
    }
    if (!looks_like_option(word)) break;  // the program's first word
    split.options.push_back(word);
    if (word.find('=') != std::string::npos) continue;  // --wait=10m
    std::string_view name = word;
    // A short option with its value attached ("-g2") takes no further word.
    if (word[1] != '-' && word.size() > 2) continue;
    OptionKind kind = kind_of(name);
    bool next_is_value = i + 1 < words.size() &&
                         (kind == OptionKind::Value ||
                          (kind == OptionKind::OptionalValue && words[i + 1] != "--" && !looks_like_option(words[i + 1])));
    if (next_is_value) split.options.push_back(words[++i]);
  }
  split.program.assign(words.begin() + static_cast<std::ptrdiff_t>(i), words.end());
  return split;
}

}  // namespace gpupool::cli
