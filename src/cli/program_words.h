// Where gpupool's options end and a program's words begin, for the commands that run one
// (`submit`, `run`, `launch`). As with sbatch, ts and pueue, gpupool's options stop at the
// program's first word or at `--`; everything after belongs to the program, byte for byte,
// even words that look like gpupool's options. CLI11 is given only gpupool's part.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool::cli {

// The commands whose last operand is a program to run.
inline const std::set<std::string, std::less<>> kCommandsThatRunAProgram = {"submit", "run", "launch"};

// What an option word of such a command is.
enum class OptionKind {
  Unknown,        // left to CLI11, which refuses it
  Flag,           // takes no value
  Value,          // takes the next word (or its =VALUE)
  OptionalValue,  // takes the next word unless it is `--` or starts with '-'
};

struct SplitWords {
  std::vector<std::string> options;  // gpupool's: handed to CLI11
  std::vector<std::string> program;  // the program and its arguments, as typed
};

// Splits the words after the command's name. `kind_of` names an option word ("-g", "--wait").
SplitWords split_program_words(const std::vector<std::string>& words,
                               const std::function<OptionKind(std::string_view)>& kind_of);

}  // namespace gpupool::cli
