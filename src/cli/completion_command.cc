// gpupool completion SHELL: prints the completion script for bash, zsh or fish, rendered from
// the command line's own definitions (docgen/docgen.h).
#include <fmt/format.h>

#include "cli/app.h"
#include "cli/commands.h"
#include "docgen/docgen.h"

namespace gpupool::cli {

void add_completion_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("completion", "Print the shell completion script for bash, zsh or fish");
  auto shell = std::make_shared<std::string>();
  cmd->add_option("shell", *shell, "The shell")->required()->check(CLI::IsMember({"bash", "zsh", "fish"}));
  cmd->footer(
      "Load it for this shell with `source <(gpupool completion bash)` (zsh: the same with zsh;\n"
      "fish: `gpupool completion fish | source`), or put it in ~/.bashrc, ~/.zshrc or\n"
      "~/.config/fish/config.fish. Packages install the scripts where each shell finds them.");
  CLI::App* root = &app;
  cmd->callback([&exit_code, shell, root] {
    run_command(exit_code, [&]() -> Result<int> {
      TRY_ASSIGN(std::string script, completion_script(*root, *shell));
      fmt::print("{}", script);
      return kExitOk;
    });
  });
}

}  // namespace gpupool::cli
