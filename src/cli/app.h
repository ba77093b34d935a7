// The gpupool command line: parses arguments, runs one command, and turns
// any error into one line on stderr and a non-zero exit code.
#pragma once

namespace gpupool::cli {

// Exit codes shared by every command.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;  // the command failed (no driver, bad input, ...)
constexpr int kExitUsage = 2;  // the command line itself is wrong

int run(int argc, char** argv);

}  // namespace gpupool::cli
