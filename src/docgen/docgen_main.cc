// gpupool-docgen DATADIR: writes the completion scripts and man pages of gpupool and gpupoold
// under DATADIR (the build tree's share/), laid out like the install tree (man/man1,
// bash-completion/completions, ...).
// Run by the build; not installed.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "daemon/daemon_options.h"
#include "docgen/docgen.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: gpupool-docgen DATADIR\n");
    return 2;
  }
  int exit_code = 0;
  std::vector<std::string> program;
  auto gpupool = gpupool::cli::make_app(exit_code, program);
  gpupool::DaemonOptions options;
  auto gpupoold = gpupool::make_daemon_app(options);
  for (const auto& file : gpupool::cli::generated_files(*gpupool, *gpupoold)) {
    std::filesystem::path path = std::filesystem::path(argv[1]) / file.path;
    std::error_code error;
    std::filesystem::create_directories(path.parent_path(), error);
    std::ofstream out(path, std::ios::binary);
    out << file.text;
    out.close();
    if (error || !out) {
      fmt::print(stderr, "gpupool-docgen: cannot write {}: {}\n", path.string(),
                 error ? error.message() : std::strerror(errno));
      return 1;
    }
  }
  return 0;
}
