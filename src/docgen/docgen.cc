#include "docgen/docgen.h"

#include <fmt/format.h>

#include "docgen/completion_script.h"
#include "docgen/describe_app.h"
#include "docgen/man_page.h"

namespace gpupool::cli {
namespace {

// The ids of the queue's jobs from `gpupool jobs --json` (an array printed with an indent of 2:
// each job's own keys stand 4 spaces in), gpupoold's (42) and Slurm's ("slurm:42"). Valid in
// bash, zsh and fish alike.
constexpr const char* kJobIdsCommand =
    R"(command gpupool jobs --json 2>/dev/null | )"
    R"sed(sed -n 's/^    "id": "\{0,1\}\(\(slurm:\)\{0,1\}[0-9][0-9]*\)"\{0,1\},\{0,1\}$/\1/p')sed";

const std::string kSource = std::string("gpupool ") + GPUPOOL_VERSION;

ManSection gpupool_environment() {
  return {"ENVIRONMENT",
          "",
          {{"GPUPOOL_SIM", "Use a simulated machine instead of the real GPUs: a fixture's name (see `gpupool sim list`) "
                           "or the path of a fixture file."},
           {"GPUPOOL_FIXTURE_DIR", "A directory searched for fixtures before the ones installed with gpupool."},
           {"GPUPOOL_RUNTIME_DIR", "The lease directory, where GPUs are held and gpupoold's socket is "
                                   "(default: /run/gpupool when it exists, else /tmp/gpupool)."},
           {"GPUPOOL_NVML_LIBRARY", "Load this NVML library instead of libnvidia-ml.so.1."},
           {"GPUPOOL_BUSY_MEMORY_MIB", "A GPU counts as busy when more of its memory is in use than its listed "
                                       "processes explain by over this many MiB (default 1024)."},
           {"GPUPOOL_HOST_ROOT", "Read /proc, /sys and /dev under this directory (`gpupool doctor --root` sets it)."},
           {"GPUPOOL_HOST_INVENTORY", "Inside a container: a file holding the host's `gpupool list --json`, from "
                                      "which `gpupool map` takes the host's GPU indices."},
           {"XDG_STATE_HOME", "`gpupool submit --slurm` records the jobs it hands to Slurm in "
                              "$XDG_STATE_HOME/gpupool/slurm-jobs.jsonl (else ~/.local/state/gpupool/)."},
           {"SLURM_CONF, SBATCH_*", "Read by Slurm's commands, which gpupool runs from PATH for `submit --slurm` "
                                    "and the commands on slurm:ID."},
           {"CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER",
            "Read by `gpupool resolve`, `gpupool map` and `gpupool doctor`; set for every command gpupool starts, "
            "which sees exactly its GPUs."},
           {"GPUPOOL_JOB, GPUPOOL_GPUS, GPUPOOL_GPU_UUIDS, GPUPOOL_MEM_MIB",
            "Set for every command gpupool starts: the job's name, its GPUs' nvidia-smi indices and UUIDs, and the "
            "memory slice of a shared lease."},
           {"OMP_NUM_THREADS", "Set to 1 for the processes of `gpupool launch` when there are several and it is "
                               "not set already."},
           {"COLUMNS, LINES", "The size of the frame `gpupool top --once` prints (default 80x24)."}}};
}

ManSection gpupool_exit_status() {
  return {"EXIT STATUS",
          "`gpupool run`, `launch` and `wait` exit with the code of what they ran or waited for, and "
          "`gpupool doctor` with 1 for warnings and 2 for problems. Otherwise:",
          {{"0", "Success."},
           {"1", "The command failed; one line on standard error says why."},
           {"2", "The command line is wrong."}}};
}

ManSection gpupool_files() {
  return {"FILES",
          "",
          {{"/run/gpupool", "The lease directory (/tmp/gpupool when /run/gpupool does not exist): one lock file per "
                            "GPU, the holders' records and gpupoold's socket, gpupoold.sock."},
           {"/etc/gpupool/gpupool.toml", "gpupoold's configuration."},
           {"/usr/share/gpupool/fixtures", "The simulated machines GPUPOOL_SIM names (share/gpupool/fixtures beside "
                                           "the directory of the gpupool program)."}}};
}

ManPageSpec gpupoold_spec() {
  ManPageSpec spec{"gpupoold", 8, kSource, "System Administration", {"gpupoold"}, false, {}, {"gpupool(1)"}};
  spec.sections.push_back(
      {"ENVIRONMENT",
       "",
       {{"GPUPOOL_CONFIG", "The configuration file when --config is not given."},
        {"GPUPOOL_STATE_DIR", "The state directory when --state-dir is not given."},
        {"XDG_STATE_HOME", "For a daemon not run by root: the state directory is $XDG_STATE_HOME/gpupool "
                           "(else ~/.local/state/gpupool)."},
        {"GPUPOOL_RUNTIME_DIR", "The lease directory when --runtime-dir is not given."},
        {"GPUPOOL_SIM", "Serve a simulated machine: a fixture's name or the path of a fixture file."},
        {"GPUPOOL_BUSY_MEMORY_MIB", "Unexplained memory in use, in MiB, above which a GPU counts as used from "
                                    "outside (default 1024)."},
        {"NOTIFY_SOCKET, WATCHDOG_USEC", "Set by systemd: gpupoold reports when it is ready and keeps its "
                                         "watchdog fed."}}});
  spec.sections.push_back(
      {"SIGNALS",
       "",
       {{"SIGTERM, SIGINT", "Stop serving and exit. Running jobs keep running under their supervisors; the next "
                            "gpupoold adopts them."}}});
  spec.sections.push_back({"EXIT STATUS",
                           "",
                           {{"0", "Stopped by SIGTERM or SIGINT."},
                            {"1", "It could not start (configuration, state directory, socket, GPUs) or failed "
                                  "while serving; one line on standard error says why."},
                            {"2", "The command line is wrong (CLI11's own codes for some mistakes)."}}});
  spec.sections.push_back(
      {"FILES",
       "The configuration's settings are described in docs/configuration.md of the gpupool documentation.",
       {{"/etc/gpupool/gpupool.toml", "The configuration file (TOML); none is needed."},
        {"/var/lib/gpupool/gpupool.db", "The jobs database (SQLite), in the state directory."},
        {"/var/lib/gpupool/logs/", "The jobs' standard output and error."},
        {"/var/lib/gpupool/attempts/", "One record per job attempt, written by its supervisor."},
        {"/run/gpupool/gpupoold.sock", "The socket gpupool talks to, in the lease directory."}}});
  return spec;
}

}  // namespace

Result<std::string> completion_script(const CLI::App& program, std::string_view shell) {
  CommandDoc doc = describe_app(program);
  CompletionSettings settings{kJobIdsCommand};
  if (shell == "bash") return bash_completion(doc, settings);
  if (shell == "zsh") return zsh_completion(doc, settings);
  if (shell == "fish") return fish_completion(doc, settings);
  return fail("unknown shell '{}': expected bash, zsh or fish", shell);
}

std::vector<GeneratedFile> generated_files(const CLI::App& gpupool, const CLI::App& gpupoold) {
  std::vector<GeneratedFile> files;
  for (const CLI::App* program : {&gpupool, &gpupoold}) {
    const std::string& name = program->get_name();
    files.push_back({"bash-completion/completions/" + name, *completion_script(*program, "bash")});
    files.push_back({"zsh/vendor-completions/_" + name, *completion_script(*program, "zsh")});
    files.push_back({"fish/vendor_completions.d/" + name + ".fish", *completion_script(*program, "fish")});
  }

  CommandDoc doc = describe_app(gpupool);
  ManPageSpec overview{doc.name, 1, kSource, "User Commands", {doc.name}, true, {}, {}};
  overview.sections = {gpupool_environment(), gpupool_exit_status(), gpupool_files()};
  for (const CommandDoc& command : doc.commands) {
    std::string page = doc.name + "-" + command.name;
    overview.see_also.push_back(page + "(1)");
    ManPageSpec spec{page, 1, kSource, "User Commands", {doc.name, command.name}, false, {}, {doc.name + "(1)"}};
    files.push_back({"man/man1/" + page + ".1", man_page(command, spec)});
  }
  overview.see_also.push_back(gpupoold.get_name() + "(8)");
  files.push_back({"man/man1/" + doc.name + ".1", man_page(doc, overview)});
  ManPageSpec daemon = gpupoold_spec();
  files.push_back({"man/man8/" + daemon.name + ".8", man_page(describe_app(gpupoold), daemon)});
  return files;
}

}  // namespace gpupool::cli
