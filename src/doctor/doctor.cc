#include "doctor/doctor.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <set>
#include <sstream>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "health/quarantine.h"
#include "jobs/job_text.h"
#include "machine/cuda_visible_devices.h"

namespace gpupool {
namespace {

Finding finding(std::string check, CheckStatus status, std::string summary, std::vector<std::string> evidence = {},
                std::string fix = "") {
  return {std::move(check), status, std::move(summary), std::move(evidence), std::move(fix)};
}

// Checks that need the GPU list report this instead when NVML did not give one.
Finding not_checked(std::string check) {
  return finding(std::move(check), CheckStatus::Warning, "not checked: NVML did not list the GPUs", {},
                 "Fix the nvml check first.");
}

std::optional<std::string> variable(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it != env.end() ? std::optional<std::string>(it->second) : std::nullopt;
}

std::string shown(const std::optional<std::string>& value) {
  return value ? nlohmann::json(*value).dump() : "unset";
}

std::string octal(unsigned mode) { return fmt::format("{:04o}", mode); }

bool is_gpu_node(const std::string& name) {
  return name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
         std::all_of(name.begin() + 6, name.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

// "12.4.1" -> {12, 4}; nullopt when it does not start with MAJOR.MINOR.
std::optional<std::pair<int, int>> major_minor(const std::string& version) {
  int major = 0;
  int minor = 0;
  char dot = 0;
  std::istringstream in(version);
  if (!(in >> major >> dot >> minor) || dot != '.') return std::nullopt;
  return std::pair{major, minor};
}

std::string list_indices(const std::set<unsigned>& indices) {
  return fmt::format("{}", fmt::join(indices, ", "));
}

Finding check_kernel_module(const DoctorFacts& f) {
  const std::string id = "kernel-module";
  if (!f.module_version_text) {
    return finding(id, CheckStatus::Problem, "the NVIDIA kernel module is not loaded",
                   {"/proc/driver/nvidia/version does not exist"},
                   "Load it with `sudo modprobe nvidia` (install the NVIDIA driver if modprobe cannot find it); "
                   "in a container, the host must have it loaded.");
  }
  std::string first_line = split(*f.module_version_text, '\n').front();
  auto version = parse_kernel_module_version(*f.module_version_text);
  if (!version) {
    return finding(id, CheckStatus::Warning, "the NVIDIA kernel module is loaded, but its version cannot be read",
                   {"/proc/driver/nvidia/version: " + first_line}, "");
  }
  std::optional<std::string> library;
  if (f.machine) library = f.machine->driver.driver_version;
  if (library && *library != *version) {
    return finding(id, CheckStatus::Problem,
                   fmt::format("kernel module {} but NVML library {}: the driver was upgraded without reloading "
                               "the module",
                               *version, *library),
                   {"/proc/driver/nvidia/version: " + first_line, "NVML driver version: " + *library},
                   "Reboot, or stop everything that uses the GPUs and reload the nvidia modules.");
  }
  return finding(id, CheckStatus::Ok, fmt::format("NVIDIA kernel module {} is loaded", *version),
                 {"/proc/driver/nvidia/version: " + first_line});
}

Finding check_device_nodes(const DoctorFacts& f) {
  const std::string id = "device-nodes";
  std::map<std::string, unsigned> present;
  for (const DeviceNode& node : f.device_nodes) present[node.name] = node.permissions;
  std::vector<std::string> required = {"nvidiactl", "nvidia-uvm"};
  if (f.machine) {
    for (const Gpu& gpu : f.machine->gpus) required.push_back(fmt::format("nvidia{}", gpu.minor_number.value_or(gpu.index)));
  }
  std::vector<std::string> evidence;
  std::vector<std::string> missing;
  std::vector<std::string> group_only;
  std::vector<std::string> closed;
  for (const std::string& name : required) {
    auto it = present.find(name);
    if (it == present.end()) {
      missing.push_back("/dev/" + name);
      evidence.push_back(fmt::format("/dev/{} is missing", name));
      continue;
    }
    evidence.push_back(fmt::format("/dev/{} mode {}", name, octal(it->second)));
    if ((it->second & 0006) == 0006) continue;
    ((it->second & 0060) == 0060 ? group_only : closed).push_back("/dev/" + name);
  }
  if (!f.machine && std::none_of(present.begin(), present.end(), [](const auto& p) { return is_gpu_node(p.first); })) {
    missing.push_back("/dev/nvidiaN");
    evidence.push_back("no /dev/nvidiaN exists");
  }
  const std::string mode_fix =
      "`sudo chmod 0666 /dev/nvidia*`, and for good the module option NVreg_DeviceFileMode=0666 "
      "(options nvidia ... in /etc/modprobe.d/), or add the users to the nodes' group.";
  if (!missing.empty()) {
    return finding(id, CheckStatus::Problem, fmt::format("missing: {}", fmt::join(missing, ", ")), evidence,
                   "Create them with `sudo nvidia-modprobe -c 0 -u` (or `sudo modprobe nvidia-uvm`); in a container, "
                   "start it with the GPUs (--gpus, --runtime=nvidia or CDI).");
  }
  if (!closed.empty()) {
    return finding(id, CheckStatus::Problem, fmt::format("users cannot open {}", fmt::join(closed, ", ")), evidence,
                   mode_fix);
  }
  if (!group_only.empty()) {
    return finding(id, CheckStatus::Warning,
                   fmt::format("only the owning group can open {}", fmt::join(group_only, ", ")), evidence, mode_fix);
  }
  return finding(id, CheckStatus::Ok, "every device node is present and open to users", evidence);
}

Finding check_nvml(const DoctorFacts& f) {
  const std::string id = "nvml";
  if (f.nvml_error) {
    const std::string& error = *f.nvml_error;
    // The CUDA toolkit's stub (lib64/stubs) links but answers NVML_ERROR_LIBRARY_NOT_FOUND (12).
    bool stub = f.nvml_library.find("/stubs/") != std::string::npos ||
                error.find("/stubs/") != std::string::npos || error.find("(NVML error 12)") != std::string::npos;
    if (stub) {
      return finding(id, CheckStatus::Problem, "NVML is the CUDA toolkit's stub, not the driver's library",
                     {"library: " + f.nvml_library, error},
                     "Take the toolkit's stubs directory out of LD_LIBRARY_PATH and /etc/ld.so.conf.d; the real "
                     "libnvidia-ml.so.1 comes with the driver.");
    }
    std::string fix = error.find("mismatch") != std::string::npos
                          ? "The driver was upgraded without reloading its module: reboot."
                          : "Install the NVIDIA driver (it brings libnvidia-ml.so.1); in a container, start it with "
                            "the GPUs so that the runtime mounts the driver's libraries.";
    return finding(id, CheckStatus::Problem, "NVML does not load", {"library: " + f.nvml_library, error}, fix);
  }
  std::vector<std::string> evidence = {"library: " + f.nvml_library};
  if (f.machine) {
    const DriverInfo& d = f.machine->driver;
    evidence.push_back(fmt::format("driver {}, NVML {}", d.driver_version.value_or("n/a"),
                                   d.nvml_version.value_or("n/a")));
  }
  return finding(id, CheckStatus::Ok, "NVML loads and answers", evidence);
}

Finding check_gpus(const DoctorFacts& f) {
  const std::string id = "gpus";
  if (!f.machine) {
    return finding(id, CheckStatus::Problem, "no GPU can be listed: NVML did not load", {}, "Fix the nvml check first.");
  }
  if (f.machine->gpus.empty()) {
    return finding(id, CheckStatus::Problem, "NVML sees no GPU", {},
                   "Check that the machine has one (`lspci | grep -i nvidia`); in a container, pass the GPUs in.");
  }
  std::vector<std::string> evidence;
  std::vector<std::string> faults;
  for (const Gpu& gpu : f.machine->gpus) {
    evidence.push_back(fmt::format("GPU {}: {} {} {}{}", gpu.index, gpu.name, gpu.pci_bus_id, gpu.uuid,
                                   gpu.fault ? " — " + *gpu.fault : ""));
    if (gpu.fault) faults.push_back(fmt::format("GPU {}", gpu.index));
  }
  if (!faults.empty()) {
    return finding(id, CheckStatus::Problem, fmt::format("{} answer(s) only partly: {}", fmt::join(faults, ", "),
                                                         "fallen off the bus or faulted"),
                   evidence,
                   "Look for Xid errors in `sudo dmesg`; reset the GPU (`sudo nvidia-smi -r -i N`) once nothing "
                   "uses it, or reboot.");
  }
  return finding(id, CheckStatus::Ok, fmt::format("{} GPU(s) visible", f.machine->gpus.size()), evidence);
}

Finding check_cuda_version(const DoctorFacts& f) {
  const std::string id = "cuda-version";
  std::optional<int> driver_cuda;
  if (f.machine) driver_cuda = f.machine->driver.cuda_driver_version;
  if (f.installed_cuda.empty()) {
    return finding(id, CheckStatus::Ok, "no PyTorch or CUDA toolkit found in the usual places to compare with",
                   {driver_cuda ? fmt::format("the driver supports CUDA {}.{}", *driver_cuda / 1000,
                                              *driver_cuda % 1000 / 10)
                                : "the driver's CUDA version is unknown"});
  }
  std::vector<std::string> evidence;
  for (const InstalledCuda& c : f.installed_cuda) evidence.push_back(fmt::format("{}: CUDA {}", c.what, c.version));
  if (!driver_cuda) {
    return finding(id, CheckStatus::Warning, "the driver's CUDA version is unknown: nothing to compare with", evidence,
                   "Fix the nvml check first.");
  }
  const int driver_major = *driver_cuda / 1000;
  const int driver_minor = *driver_cuda % 1000 / 10;
  evidence.insert(evidence.begin(), fmt::format("the driver supports CUDA {}.{}", driver_major, driver_minor));
  CheckStatus status = CheckStatus::Ok;
  std::vector<std::string> newer;
  for (const InstalledCuda& c : f.installed_cuda) {
    auto v = major_minor(c.version);
    if (!v) continue;
    if (v->first > driver_major) {
      status = CheckStatus::Problem;
      newer.push_back(fmt::format("{} (CUDA {})", c.what, c.version));
    } else if (v->first == driver_major && v->second > driver_minor) {
      status = std::max(status, CheckStatus::Warning);
      newer.push_back(fmt::format("{} (CUDA {})", c.what, c.version));
    }
  }
  if (status == CheckStatus::Ok) {
    return finding(id, status, fmt::format("the driver supports CUDA {}.{}, enough for what is installed",
                                           driver_major, driver_minor),
                   evidence);
  }
  std::string fix = fmt::format(
      "Upgrade the NVIDIA driver to one for that CUDA version, or install builds made for CUDA {}.{} or older.",
      driver_major, driver_minor);
  if (status == CheckStatus::Problem) {
    return finding(id, status, fmt::format("built for a newer CUDA than the driver's {}.{}: {}", driver_major,
                                           driver_minor, fmt::join(newer, ", ")),
                   evidence, fix);
  }
  return finding(id, status,
                 fmt::format("built for a newer CUDA minor version than the driver's {}.{} (runs through minor version "
                             "compatibility, without PTX JIT): {}",
                             driver_major, driver_minor, fmt::join(newer, ", ")),
                 evidence, fix);
}

Finding check_container(const DoctorFacts& f) {
  const std::string id = "container";
  if (!f.in_container) {
    return finding(id, CheckStatus::Ok, "not in a container",
                   {"no /.dockerenv, /run/.containerenv, container= in PID 1's environment or container runtime in "
                    "/proc/1/cgroup (a cgroup v2 container may leave no trace)"});
  }
  auto requested = variable(f.environment, "NVIDIA_VISIBLE_DEVICES");
  std::vector<std::string> nodes;
  for (const DeviceNode& node : f.device_nodes) {
    if (is_gpu_node(node.name)) nodes.push_back("/dev/" + node.name);
  }
  std::vector<std::string> evidence = {
      "detected: " + f.container_evidence.value_or("?"), "NVIDIA_VISIBLE_DEVICES=" + shown(requested),
      nodes.empty() ? "no /dev/nvidiaN injected" : fmt::format("injected: {}", fmt::join(nodes, ", "))};
  const std::string fix =
      "Start the container with the GPUs: `docker run --gpus all` (or --runtime=nvidia with "
      "NVIDIA_VISIBLE_DEVICES=all, or CDI: --device nvidia.com/gpu=all).";
  if (nodes.empty()) {
    return finding(id, CheckStatus::Problem, "inside a container that was given no GPU", evidence, fix);
  }
  if (requested && *requested != "all") {
    size_t named = split(*requested, ',').size();
    if (*requested == "none" || *requested == "void" || requested->empty()) named = 0;
    if (named != nodes.size()) {
      return finding(id, CheckStatus::Warning,
                     fmt::format("NVIDIA_VISIBLE_DEVICES names {} GPU(s) but {} device node(s) were injected", named,
                                 nodes.size()),
                     evidence,
                     "The devices come from the runtime's options (--gpus, --device), not from the variable set "
                     "afterwards: start the container with the GPUs wanted.");
    }
  }
  return finding(id, CheckStatus::Ok, fmt::format("inside a container with {} GPU device node(s)", nodes.size()),
                 evidence);
}

Finding check_cuda_visible_devices(const DoctorFacts& f) {
  const std::string id = "cuda-visible-devices";
  if (!f.machine) return not_checked(id);
  auto value = variable(f.environment, "CUDA_VISIBLE_DEVICES");
  auto order = variable(f.environment, "CUDA_DEVICE_ORDER");
  VisibleDevicesResolution r = resolve_visible_devices(f.machine->gpus, value, order);
  std::vector<std::string> evidence = {"CUDA_VISIBLE_DEVICES=" + shown(value), "CUDA_DEVICE_ORDER=" + shown(order)};
  for (const VisibleDevicesEntry& e : r.entries) {
    evidence.push_back(fmt::format("entry {}: {}", nlohmann::json(e.text).dump(), e.explanation));
  }
  for (const VisibleDevice& d : r.devices) evidence.push_back(fmt::format("cuda:{} = GPU {}", d.cuda_index, d.nvml_index));
  const std::string fix = "Correct the variables; `gpupool resolve` shows how the driver reads each entry.";
  if (r.error) {
    return finding(id, CheckStatus::Problem, "CUDA initialisation would fail: " + *r.error, evidence, fix);
  }
  for (const std::string& w : r.warnings) evidence.push_back("warning: " + w);
  if (r.devices.empty()) {
    return finding(id, CheckStatus::Warning, "CUDA programs would see no GPU", evidence, fix);
  }
  if (!r.warnings.empty()) {
    return finding(id, CheckStatus::Warning, r.warnings.front(), evidence, fix);
  }
  return finding(id, CheckStatus::Ok,
                 fmt::format("CUDA programs see {} GPU(s){}", r.devices.size(), value ? "" : " (variable unset)"),
                 evidence);
}

Finding check_persistence(const DoctorFacts& f) {
  const std::string id = "persistence-mode";
  if (!f.machine) return not_checked(id);
  std::vector<std::string> evidence;
  std::set<unsigned> off;
  for (const Gpu& gpu : f.machine->gpus) {
    const auto& mode = gpu.persistence_mode;
    evidence.push_back(fmt::format("GPU {}: {}", gpu.index, mode ? (*mode ? "on" : "off") : "n/a"));
    if (mode && !*mode) off.insert(gpu.index);
  }
  if (!off.empty()) {
    return finding(id, CheckStatus::Warning, fmt::format("persistence mode is off on GPU {}", list_indices(off)),
                   evidence,
                   "Run the persistence daemon (`sudo systemctl enable --now nvidia-persistenced`) or "
                   "`sudo nvidia-smi -pm 1`: without it the driver sets each idle GPU up again for every program, "
                   "which costs seconds per start.");
  }
  return finding(id, CheckStatus::Ok, "persistence mode is on (or n/a) everywhere", evidence);
}

template <typename T>
std::string or_na(const std::optional<T>& value) {
  if (!value) return "n/a";
  if constexpr (std::is_same_v<T, bool>) {
    return *value ? "yes" : "no";
  } else {
    return std::to_string(*value);
  }
}

Finding check_ecc(const DoctorFacts& f) {
  const std::string id = "ecc";
  if (!f.machine) return not_checked(id);
  std::vector<std::string> evidence;
  std::set<unsigned> uncorrected, corrected, pending, failed;
  for (const Gpu& gpu : f.machine->gpus) {
    evidence.push_back(fmt::format("GPU {}: volatile ECC errors corrected {}, uncorrected {}; retired pages {} "
                                   "(pending {}); remapped rows {} (pending {}, failed {})",
                                   gpu.index, or_na(gpu.ecc_corrected_volatile), or_na(gpu.ecc_uncorrected_volatile),
                                   or_na(gpu.retired_pages), or_na(gpu.retired_pages_pending),
                                   or_na(gpu.remapped_rows), or_na(gpu.row_remapping_pending),
                                   or_na(gpu.row_remapping_failed)));
    if (gpu.ecc_uncorrected_volatile.value_or(0) > 0) uncorrected.insert(gpu.index);
    if (gpu.ecc_corrected_volatile.value_or(0) > 0) corrected.insert(gpu.index);
    if (gpu.retired_pages_pending.value_or(false) || gpu.row_remapping_pending.value_or(false)) {
      pending.insert(gpu.index);
    }
    if (gpu.row_remapping_failed.value_or(false)) failed.insert(gpu.index);
  }
  const std::string watch = "`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER -i N`";
  if (!failed.empty()) {
    return finding(id, CheckStatus::Problem, fmt::format("row remapping failed on GPU {}", list_indices(failed)),
                   evidence, "The GPU has no spare rows left where it needs one: it needs service (RMA).");
  }
  if (!uncorrected.empty()) {
    return finding(id, CheckStatus::Problem,
                   fmt::format("uncorrected ECC errors on GPU {}", list_indices(uncorrected)), evidence,
                   fmt::format("Stop the jobs on it and reset it (`sudo nvidia-smi -r -i N`) or reboot; watch {}; if "
                               "they come back, the GPU needs service.",
                               watch));
  }
  if (!pending.empty()) {
    return finding(id, CheckStatus::Warning,
                   fmt::format("a memory repair waits for a reset on GPU {}", list_indices(pending)), evidence,
                   "Reset the GPU once nothing uses it (`sudo nvidia-smi -r -i N`) or reboot: the retired page or "
                   "remapped row takes effect only then.");
  }
  if (!corrected.empty()) {
    return finding(id, CheckStatus::Warning, fmt::format("corrected ECC errors on GPU {}", list_indices(corrected)),
                   evidence, fmt::format("Nothing is lost yet; watch {} for a rising count.", watch));
  }
  return finding(id, CheckStatus::Ok, "no ECC errors or pending memory repairs (or n/a)", evidence);
}

// Link errors the driver counts since it loaded: PCIe replays and the NVLink error totals. None
// loses data (the link retransmits), but a rising count is a failing link, riser or cable.
Finding check_link_errors(const DoctorFacts& f) {
  const std::string id = "link-errors";
  if (!f.machine) return not_checked(id);
  std::vector<std::string> evidence;
  std::set<unsigned> nvlink, pcie;
  for (const Gpu& gpu : f.machine->gpus) {
    evidence.push_back(fmt::format("GPU {}: PCIe replays {}; NVLink CRC errors {} (flow control), {} (data), "
                                   "replays {}, recoveries {}",
                                   gpu.index, or_na(gpu.pcie_replay_count), or_na(gpu.nvlink_crc_flit_errors),
                                   or_na(gpu.nvlink_crc_data_errors), or_na(gpu.nvlink_replay_errors),
                                   or_na(gpu.nvlink_recovery_errors)));
    if (gpu.nvlink_crc_flit_errors.value_or(0) + gpu.nvlink_crc_data_errors.value_or(0) +
            gpu.nvlink_replay_errors.value_or(0) + gpu.nvlink_recovery_errors.value_or(0) > 0) {
      nvlink.insert(gpu.index);
    }
    if (gpu.pcie_replay_count.value_or(0) > 0) pcie.insert(gpu.index);
  }
  if (!nvlink.empty()) {
    return finding(id, CheckStatus::Warning, fmt::format("NVLink errors on GPU {}", list_indices(nvlink)), evidence,
                   "The link retransmitted (CRC errors, replays) or retrained (recoveries): nothing is lost, but "
                   "collectives slow down, and a link that keeps failing ends in XID 74. Watch `nvidia-smi nvlink "
                   "-e -i N` (and DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL); if the count rises, have the GPU "
                   "baseboard or NVLink cabling serviced.");
  }
  if (!pcie.empty()) {
    return finding(id, CheckStatus::Warning, fmt::format("PCIe replays on GPU {}", list_indices(pcie)), evidence,
                   "The PCIe link retransmitted: nothing is lost, but transfers slow down. Watch `nvidia-smi -q -d "
                   "PCIE -i N` (Replays) or DCGM_FI_DEV_PCIE_REPLAY_COUNTER; if the count rises, reseat the GPU or "
                   "its riser, or try another slot.");
  }
  return finding(id, CheckStatus::Ok, "no PCIe replays or NVLink errors (or n/a)", evidence);
}

// Memory in use that no listed process holds (health/quarantine.h): what ended processes left
// behind, which no job can use until the GPU is reset.
Finding check_unattributed_memory(const DoctorFacts& f) {
  const std::string id = "stray-memory";
  if (!f.machine) return not_checked(id);
  std::vector<std::string> evidence;
  std::set<unsigned> stray;
  for (const Gpu& gpu : f.machine->gpus) {
    std::optional<uint64_t> unattributed = unattributed_memory_mib(gpu);
    evidence.push_back(fmt::format("GPU {}: {} MiB in use, {} MiB of it by no listed process ({} processes)",
                                   gpu.index, or_na(gpu.memory_used_mib), or_na(unattributed), gpu.processes.size()));
    if (unattributed.value_or(0) > kUnattributedMemoryToleranceMib) stray.insert(gpu.index);
  }
  if (stray.empty()) return finding(id, CheckStatus::Ok, "every GPU's memory in use belongs to a process (or n/a)", evidence);
  std::string advice =
      "A process that ended left its memory behind (a context the driver never released): check `nvidia-smi "
      "--query-compute-apps=pid,used_memory --format=csv -i N`, and when it lists nothing, reset the GPU once no job "
      "uses it (`sudo nvidia-smi -r -i N`) or reboot.";
  if (f.in_container) advice += " In a container, other containers' processes are not listed: look from the host first.";
  return finding(id, CheckStatus::Warning, fmt::format("GPU {} holds memory no process uses", list_indices(stray)),
                 evidence, advice);
}

std::string program_name(const std::string& command) {
  std::string first = command.substr(0, command.find(' '));
  auto slash = first.rfind('/');
  return slash == std::string::npos ? first : first.substr(slash + 1);
}

Finding check_display_servers(const DoctorFacts& f) {
  const std::string id = "display-server";
  if (!f.machine) return not_checked(id);
  static const std::set<std::string> kDisplayPrograms = {
      "Xorg", "X", "Xwayland", "gnome-shell", "kwin_x11", "kwin_wayland", "plasmashell",
      "mutter", "sway", "weston", "gdm", "gdm3", "sddm", "lightdm", "cinnamon", "xfwm4"};
  std::vector<std::string> evidence;
  std::set<unsigned> gpus;
  for (const Gpu& gpu : f.machine->gpus) {
    for (const GpuProcess& p : gpu.processes) {
      bool display = p.command && kDisplayPrograms.count(program_name(*p.command)) > 0;
      if (!display && p.kind == ProcessKind::Compute) continue;
      gpus.insert(gpu.index);
      evidence.push_back(fmt::format("GPU {}: pid {} {} ({})", gpu.index, p.pid,
                                     p.command.value_or("(command not visible)"), to_string(p.kind)));
    }
  }
  if (gpus.empty()) return finding(id, CheckStatus::Ok, "no display server or graphics program runs on a GPU");
  return finding(id, CheckStatus::Warning, fmt::format("a display runs on GPU {}", list_indices(gpus)), evidence,
                 "Drive the display from another GPU or the onboard graphics (or keep this GPU out of compute "
                 "jobs): it takes memory, time slices, and its watchdog can end long kernels.");
}

Finding check_outside_processes(const DoctorFacts& f) {
  const std::string id = "outside-processes";
  if (f.pool_error) {
    return finding(id, CheckStatus::Warning, "could not survey the pool", {*f.pool_error},
                   "Check the lease directory (leases check) and NVML.");
  }
  if (!f.machine || !f.pool) return not_checked(id);
  std::vector<std::string> evidence;
  std::set<unsigned> busy;
  for (size_t i = 0; i < f.pool->size() && i < f.machine->gpus.size(); ++i) {
    const GpuAvailability& a = (*f.pool)[i];
    if (!a.external_busy) continue;
    busy.insert(f.machine->gpus[i].index);
    evidence.push_back(fmt::format("GPU {}: {} ({} MiB)", f.machine->gpus[i].index, a.holders, a.external_mib));
  }
  if (busy.empty()) return finding(id, CheckStatus::Ok, "no process outside gpupool uses a GPU");
  return finding(id, CheckStatus::Warning,
                 fmt::format("processes gpupool did not start use GPU {}", list_indices(busy)), evidence,
                 "gpupool counts these GPUs as busy: ask their owners to stop, or to run through `gpupool run` / "
                 "`gpupool submit`.");
}

Finding check_leases(const DoctorFacts& f) {
  const std::string id = "leases";
  if (f.lease_error) {
    return finding(id, CheckStatus::Warning, "could not read the leases", {*f.lease_error},
                   "See docs/leases.md for the runtime directory's owner and modes.");
  }
  if (!f.leases) return finding(id, CheckStatus::Warning, "the leases were not read");
  std::vector<std::string> evidence;
  std::vector<std::string> dead;
  for (const LeaseFact& l : *f.leases) {
    evidence.push_back(fmt::format("GPU {} ({}): {}, pid {}{}", l.index, l.uuid, lease_holder_text(l.job, l.user), l.pid,
                                   l.holder_alive ? "" : " — not running"));
    if (!l.holder_alive) dead.push_back(fmt::format("GPU {} (pid {})", l.index, l.pid));
  }
  if (!dead.empty()) {
    return finding(id, CheckStatus::Problem,
                   fmt::format("leases held for processes that no longer run: {}", fmt::join(dead, ", ")), evidence,
                   fmt::format("A process the job left behind still holds the lock: find it with `fuser -v "
                               "{}/locks/UUID.lock` and stop it; the lease ends with it.",
                               f.daemon.runtime_dir));
  }
  if (f.leases->empty()) return finding(id, CheckStatus::Ok, "no GPU is leased");
  return finding(id, CheckStatus::Ok, fmt::format("{} lease(s), every holder runs", f.leases->size()), evidence);
}

Finding check_daemon(const DoctorFacts& f) {
  const std::string id = "daemon";
  std::string socket = f.daemon.runtime_dir + "/gpupoold.sock";
  if (f.daemon.error) {
    return finding(id, CheckStatus::Problem, "gpupoold cannot be reached", {socket + ": " + *f.daemon.error},
                   "Restart it (`sudo systemctl restart gpupoold`) and read `journalctl -u gpupoold`.");
  }
  if (f.daemon.running) return finding(id, CheckStatus::Ok, "gpupoold answers", {"socket: " + socket});
  return finding(id, CheckStatus::Ok, "no gpupoold runs (run and launch work without it; the queue needs it)",
                 {"nothing listens on " + socket});
}

// The daemon's quarantine (health/quarantine.h): which GPUs take no new jobs, why, what to do.
Finding check_quarantine(const DoctorFacts& f) {
  const std::string id = "quarantine";
  if (!f.daemon.running) return finding(id, CheckStatus::Ok, "not checked: no gpupoold answers");
  if (f.daemon.quarantined.empty()) return finding(id, CheckStatus::Ok, "no GPU is quarantined");
  std::vector<std::string> evidence;
  std::set<unsigned> indices;
  std::string advice;
  for (const QuarantinedGpuFact& gpu : f.daemon.quarantined) {
    indices.insert(gpu.index);
    std::string steps = quarantine_advice(gpu.reason);
    evidence.push_back(fmt::format("GPU {}: {}{}", gpu.index, gpu.reason, steps.empty() ? "" : "; to do: " + steps));
  }
  return finding(id, CheckStatus::Problem,
                 fmt::format("GPU {} quarantined: no new job starts there", list_indices(indices)), evidence,
                 "Do what each GPU's line says, then `gpupool resume --gpu N` returns it at once; without a fault "
                 "for quarantine_clean_window it returns by itself (docs/monitoring.md, \"Health and quarantine\").");
}

// The job logs share the database's file system: a full one stops job output first (the reserve)
// and then the database itself, whose refused saves the daemon retries.
Finding check_state_space(const DoctorFacts& f) {
  const std::string id = "state-space";
  if (!f.daemon.state_space) return finding(id, CheckStatus::Ok, "not checked: no gpupoold answers");
  const StateSpaceFact& space = *f.daemon.state_space;
  std::vector<std::string> evidence = {
      fmt::format("free: {} MiB; kept for the job database (state_reserve_mb): {} MiB",
                  space.free_bytes >> 20, space.reserve_bytes >> 20)};
  const std::string fix =
      "Free space on the state directory's file system (old logs in its logs/ folder are the usual bulk), or give "
      "jobs a smaller output limit (max_log_mb, docs/configuration.md).";
  if (space.unsaved_jobs > 0) {
    evidence.push_back(fmt::format("jobs the database refused to save: {}", space.unsaved_jobs));
    return finding(id, CheckStatus::Problem,
                   fmt::format("{} job(s) could not be saved to the job database; gpupoold keeps trying",
                               space.unsaved_jobs),
                   evidence, fix);
  }
  if (space.free_bytes < space.reserve_bytes) {
    return finding(id, CheckStatus::Problem,
                   "the state filesystem is short of space: job output is not being saved", evidence, fix);
  }
  if (space.free_bytes < 2 * space.reserve_bytes) {
    return finding(id, CheckStatus::Warning, "the state filesystem is nearly at its reserve", evidence, fix);
  }
  return finding(id, CheckStatus::Ok, "room on the state filesystem", evidence);
}

// What holds memory slices here: MPS where it is installed (slice_enforcement = "auto"), and
// what an administrator's host-wide settings would add. gpupool never changes them itself.
Finding check_mps(const DoctorFacts& f) {
  const std::string id = "mps";
  std::vector<std::string> evidence;
  if (f.machine) {
    for (const Gpu& gpu : f.machine->gpus) {
      std::string mode = gpu.compute_mode ? to_string(*gpu.compute_mode) : "n/a";
      std::string meaning =
          gpu.mig_enabled.value_or(false) ? "MIG on: its instances are hard slices already; no MPS here"
          : gpu.compute_mode == ComputeMode::ExclusiveProcess
              ? "only one process (the MPS server) may use it: a program outside MPS fails there, whole-GPU jobs too"
          : gpu.compute_mode == ComputeMode::Prohibited ? "no CUDA program may use it"
                                                        : "MPS clients and other programs share it";
      evidence.push_back(fmt::format("GPU {}: compute mode {}: {}", gpu.index, mode, meaning));
    }
  }
  evidence.push_back(
      "compute mode EXCLUSIVE_PROCESS (`sudo nvidia-smi -i N -c EXCLUSIVE_PROCESS`) would keep programs that leave "
      "MPS (unsetting CUDA_MPS_PIPE_DIRECTORY) off a GPU kept for slices, and whole-GPU jobs with them; MIG "
      "(`nvidia-smi -mig 1`) gives hardware-isolated instances (docs/mig.md). Both are host-wide: gpupool changes "
      "neither");
  // Per-cgroup GPU memory limits (MPS of drivers r615 on, the kernel's dmem controller):
  // docs/leases.md, "Newer drivers".
  std::optional<std::string> driver =
      f.module_version_text ? parse_kernel_module_version(*f.module_version_text) : std::nullopt;
  bool new_driver = driver && std::atoi(driver->c_str()) >= 615;
  evidence.push_back(fmt::format(
      "per-cgroup GPU memory limits need a driver from r615 (here {}) and the kernel's cgroup dmem controller "
      "(here {}): {}",
      driver.value_or("unknown"), f.dmem_controller ? "present" : "absent, it came with 6.14",
      new_driver && f.dmem_controller ? "available, though gpupool does not use them yet" : "not available"));
  // The running daemon says what it does; this shell's PATH is not the daemon's.
  const std::string& held = f.daemon.slice_enforcement;
  evidence.insert(evidence.begin(), f.mps_control ? "nvidia-cuda-mps-control on this shell's PATH: " + *f.mps_control
                                                  : "nvidia-cuda-mps-control is not on this shell's PATH");
  if (held == "mps") {
    return finding(id, CheckStatus::Ok, "gpupoold holds slices of one GPU with CUDA MPS, the others with its watchdog",
                   evidence);
  }
  if (held == "off") {
    return finding(id, CheckStatus::Ok,
                   "gpupoold holds no slice (slice_enforcement \"off\"): a --mem slice is a promise among users",
                   evidence);
  }
  if (held == "watch") {
    evidence.insert(evidence.begin() + 1,
                    "for limits the driver enforces: CUDA MPS installed (with the driver's utilities) where gpupoold "
                    "finds it, slice_enforcement \"auto\" (the default) or \"mps\", and gpupoold restarted "
                    "(docs/leases.md, \"Slices that hold\")");
    return finding(id, CheckStatus::Ok, "gpupoold holds memory slices with its watchdog, not with CUDA MPS", evidence);
  }
  // No daemon, or one of a version that does not say: what one would do with this shell's PATH.
  const std::string unsaid = f.daemon.running ? "gpupoold does not say what holds its slices" : "no gpupoold answers";
  if (!f.mps_control) {
    evidence.insert(evidence.begin() + 1,
                    "for limits the driver enforces, install CUDA MPS (with the driver's utilities) and restart "
                    "gpupoold (docs/leases.md, \"Slices that hold\")");
    return finding(id, CheckStatus::Ok,
                   unsaid + "; CUDA MPS is not installed here: one would hold memory slices with its watchdog",
                   evidence);
  }
  return finding(id, CheckStatus::Ok,
                 unsaid + "; CUDA MPS is installed here: one would hold slices of one GPU with it "
                          "(slice_enforcement \"auto\", the default, or \"mps\")",
                 evidence);
}

Finding check_slurm(const DoctorFacts& f) {
  const std::string id = "slurm";
  auto job = variable(f.environment, "SLURM_JOB_ID");
  if (!job) return finding(id, CheckStatus::Ok, "not in a Slurm allocation");
  auto visible = variable(f.environment, "CUDA_VISIBLE_DEVICES");
  auto ordinal = variable(f.environment, "GPU_DEVICE_ORDINAL");
  auto step = variable(f.environment, "SLURM_STEP_GPUS");
  auto job_gpus = variable(f.environment, "SLURM_JOB_GPUS");
  std::vector<std::string> evidence = {"SLURM_JOB_ID=" + *job, "SLURM_JOB_GPUS=" + shown(job_gpus),
                                       "SLURM_STEP_GPUS=" + shown(step), "GPU_DEVICE_ORDINAL=" + shown(ordinal),
                                       "CUDA_VISIBLE_DEVICES=" + shown(visible)};
  auto allocated = step ? step : job_gpus;
  if (!allocated && !ordinal) {
    return finding(id, CheckStatus::Ok, fmt::format("Slurm job {} has no GPU allocated", *job), evidence);
  }
  if (!visible) {
    return finding(id, CheckStatus::Warning,
                   fmt::format("Slurm job {} has GPUs but CUDA_VISIBLE_DEVICES is unset: unless Slurm's cgroup hides "
                               "the others, programs see every GPU of the node",
                               *job),
                   evidence, "Ask for the GPUs with --gres=gpu:N or --gpus=N, and do not unset the variable in the "
                             "job script.");
  }
  if (ordinal && *ordinal != *visible) {
    return finding(id, CheckStatus::Warning,
                   fmt::format("CUDA_VISIBLE_DEVICES ({}) differs from what Slurm set (GPU_DEVICE_ORDINAL={})",
                               *visible, *ordinal),
                   evidence,
                   "Leave CUDA_VISIBLE_DEVICES as Slurm set it; pick among the allocated GPUs with cuda:N instead.");
  }
  if (allocated && split(*allocated, ',').size() != split(*visible, ',').size()) {
    return finding(id, CheckStatus::Warning,
                   fmt::format("Slurm allocated {} GPU(s) but CUDA_VISIBLE_DEVICES names {}",
                               split(*allocated, ',').size(), split(*visible, ',').size()),
                   evidence, "Leave CUDA_VISIBLE_DEVICES as Slurm set it.");
  }
  return finding(id, CheckStatus::Ok, fmt::format("CUDA_VISIBLE_DEVICES matches Slurm job {}'s GPUs", *job), evidence);
}

// --pid: what the process asked for against the GPUs it holds contexts on.
void check_process(const DoctorFacts& f, const ProcessFacts& p, std::vector<Finding>& out) {
  if (!p.environment) {
    out.push_back(finding("process-environment", CheckStatus::Problem,
                          fmt::format("cannot read the environment of pid {}", p.pid),
                          {fmt::format("/proc/{}/environ cannot be read: the process is gone or not yours", p.pid)},
                          "Run gpupool doctor as the process's owner (or root), while it runs."));
    return;
  }
  auto value = variable(*p.environment, "CUDA_VISIBLE_DEVICES");
  auto order = variable(*p.environment, "CUDA_DEVICE_ORDER");
  std::vector<std::string> asked = {"CUDA_VISIBLE_DEVICES=" + shown(value), "CUDA_DEVICE_ORDER=" + shown(order)};
  out.push_back(finding("process-environment", CheckStatus::Ok, fmt::format("pid {}'s environment was read", p.pid),
                        asked));
  if (!f.machine) {
    out.push_back(not_checked("process-gpus"));
    return;
  }
  std::set<unsigned> used;
  for (const Gpu& gpu : f.machine->gpus) {
    for (const GpuProcess& gp : gpu.processes) {
      if (gp.pid == p.pid) used.insert(gpu.index);
    }
  }
  VisibleDevicesResolution r = resolve_visible_devices(f.machine->gpus, value, order);
  std::set<unsigned> allowed;
  for (const VisibleDevice& d : r.devices) allowed.insert(d.nvml_index);
  std::vector<std::string> evidence = asked;
  evidence.push_back(fmt::format("(/proc/{}/environ is the environment the process started with: a change the "
                                 "program made itself does not show there)",
                                 p.pid));
  evidence.push_back(used.empty() ? "holds no GPU context" : fmt::format("holds contexts on GPU {}", list_indices(used)));
  evidence.push_back(r.error ? "its variables make cuInit fail: " + *r.error
                             : allowed.empty() ? "its variables select no GPU"
                                               : fmt::format("its variables select GPU {}", list_indices(allowed)));
  std::set<unsigned> outside;
  std::set_difference(used.begin(), used.end(), allowed.begin(), allowed.end(), std::inserter(outside, outside.end()));
  const std::string fix =
      "Set CUDA_VISIBLE_DEVICES before the program starts (in the shell or the launcher) and leave it alone inside "
      "the program: the driver reads it once, when CUDA is initialised (e.g. by `torch.cuda.is_available()`).";
  if (used.empty()) {
    out.push_back(finding("process-gpus", CheckStatus::Ok, fmt::format("pid {} holds no GPU context", p.pid), evidence));
  } else if (outside.empty()) {
    out.push_back(finding("process-gpus", CheckStatus::Ok,
                          fmt::format("pid {} uses only the GPUs its CUDA_VISIBLE_DEVICES selects", p.pid), evidence));
  } else if (value && f.machine->gpus.size() > 1 && used.size() == f.machine->gpus.size() &&
             allowed.size() < used.size()) {
    out.push_back(finding("process-gpus", CheckStatus::Problem,
                          fmt::format("pid {} holds a context on every GPU although it started with "
                                      "CUDA_VISIBLE_DEVICES={}: that value did not apply when CUDA was initialised",
                                      p.pid, shown(value)),
                          evidence, fix));
  } else {
    out.push_back(finding("process-gpus", CheckStatus::Problem,
                          fmt::format("pid {} uses GPU {}, outside the CUDA_VISIBLE_DEVICES={} it started with: that "
                                      "value did not apply when CUDA was initialised",
                                      p.pid, list_indices(outside), shown(value)),
                          evidence, fix));
  }

  if (f.lease_error || !f.leases) {
    out.push_back(finding("process-leases", CheckStatus::Warning, "could not read the leases",
                          {f.lease_error.value_or("not read")}, ""));
    return;
  }
  std::set<uint32_t> lineage(p.ancestry.begin(), p.ancestry.end());
  lineage.insert(p.pid);
  std::vector<std::string> lease_evidence;
  std::vector<std::string> others;
  std::set<unsigned> unleased;
  for (unsigned index : used) {
    const Gpu& gpu = *std::find_if(f.machine->gpus.begin(), f.machine->gpus.end(),
                                   [&](const Gpu& g) { return g.index == index; });
    bool own = false;
    std::vector<const LeaseFact*> foreign;
    for (const LeaseFact& l : *f.leases) {
      if (l.uuid != gpu.uuid) continue;
      if (lineage.count(l.pid) > 0) {
        own = true;
      } else {
        foreign.push_back(&l);
      }
    }
    if (own) {
      lease_evidence.push_back(fmt::format("GPU {}: leased to it (or a parent)", index));
    } else if (!foreign.empty()) {
      for (const LeaseFact* l : foreign) {
        others.push_back(fmt::format("GPU {} ({}, pid {})", index, lease_holder_text(l->job, l->user), l->pid));
      }
      lease_evidence.push_back(fmt::format("GPU {}: leased to another job", index));
    } else {
      unleased.insert(index);
      lease_evidence.push_back(fmt::format("GPU {}: no lease", index));
    }
  }
  if (!others.empty()) {
    out.push_back(finding("process-leases", CheckStatus::Problem,
                          fmt::format("pid {} uses GPUs leased to another job: {}", p.pid, fmt::join(others, ", ")),
                          lease_evidence,
                          "Start it with `gpupool run` (which sets CUDA_VISIBLE_DEVICES to its own lease) instead of "
                          "choosing GPUs by hand."));
  } else if (!unleased.empty()) {
    out.push_back(finding("process-leases", CheckStatus::Warning,
                          fmt::format("pid {} uses GPU {} outside any lease", p.pid, list_indices(unleased)),
                          lease_evidence,
                          "Run it through `gpupool run` or `gpupool submit`, so that others are not placed on its "
                          "GPUs."));
  } else {
    out.push_back(finding("process-leases", CheckStatus::Ok,
                          used.empty() ? fmt::format("pid {} uses no GPU", p.pid)
                                       : fmt::format("pid {} uses only GPUs leased to it", p.pid),
                          lease_evidence));
  }
}

}  // namespace

const char* to_string(CheckStatus status) {
  switch (status) {
    case CheckStatus::Ok: return "ok";
    case CheckStatus::Warning: return "warning";
    case CheckStatus::Problem: return "problem";
  }
  return "?";
}

std::optional<std::string> parse_kernel_module_version(std::string_view text) {
  std::string first_line(text.substr(0, text.find('\n')));
  auto module = first_line.find("Kernel Module");
  if (module == std::string::npos) return std::nullopt;
  std::istringstream words(first_line.substr(module));
  for (std::string word; words >> word;) {
    bool version = std::isdigit(static_cast<unsigned char>(word.front())) != 0 && word.find('.') != std::string::npos &&
                   std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isdigit(c) || c == '.'; });
    if (version) return word;
  }
  return std::nullopt;
}

std::optional<std::string> parse_torch_cuda_version(std::string_view text) {
  for (const std::string& raw : split(text, '\n')) {
    std::string line = raw;
    if (line.rfind("cuda", 0) != 0) continue;
    // `cuda = '12.1'` or `cuda: Optional[str] = '12.1'`, not `cudnn = ...`.
    if (line.size() > 4 && line[4] != ' ' && line[4] != ':' && line[4] != '=') continue;
    auto equals = line.find('=');
    if (equals == std::string::npos) continue;
    std::string value = line.substr(equals + 1);
    auto open = value.find_first_of("'\"");
    if (open == std::string::npos) return std::nullopt;  // `cuda = None`: a CPU build
    auto close = value.find(value[open], open + 1);
    if (close == std::string::npos) return std::nullopt;
    std::string version = value.substr(open + 1, close - open - 1);
    if (!major_minor(version)) return std::nullopt;
    return version;
  }
  return std::nullopt;
}

std::optional<std::string> parse_cuda_toolkit_version(std::string_view json_text) {
  auto json = nlohmann::json::parse(json_text, nullptr, false);
  if (json.is_discarded() || !json.is_object()) return std::nullopt;
  auto cuda = json.find("cuda");
  if (cuda == json.end() || !cuda->is_object()) return std::nullopt;
  auto version = cuda->find("version");
  if (version == cuda->end() || !version->is_string()) return std::nullopt;
  std::string text = version->get<std::string>();
  if (!major_minor(text)) return std::nullopt;
  return text;
}

std::vector<Finding> diagnose(const DoctorFacts& facts) {
  std::vector<Finding> out = {check_kernel_module(facts),      check_device_nodes(facts),
                              check_nvml(facts),               check_gpus(facts),
                              check_cuda_version(facts),       check_container(facts),
                              check_cuda_visible_devices(facts), check_persistence(facts),
                              check_ecc(facts),                check_link_errors(facts),
                              check_unattributed_memory(facts),
                              check_display_servers(facts),
                              check_outside_processes(facts),  check_leases(facts),
                              check_daemon(facts),             check_quarantine(facts),
                              check_state_space(facts),
                              check_mps(facts),                check_slurm(facts)};
  if (facts.process) check_process(facts, *facts.process, out);
  return out;
}

int doctor_exit_code(const std::vector<Finding>& findings) {
  CheckStatus worst = CheckStatus::Ok;
  for (const Finding& f : findings) worst = std::max(worst, f.status);
  return static_cast<int>(worst);
}

std::string findings_text(const std::vector<Finding>& findings, bool verbose) {
  std::string text;
  int counts[3] = {0, 0, 0};
  for (const Finding& f : findings) {
    ++counts[static_cast<int>(f.status)];
    text += fmt::format("{:<8} {:<21} {}\n", to_string(f.status), f.check, f.summary);
    if (verbose || f.status != CheckStatus::Ok) {
      for (const std::string& line : f.evidence) text += fmt::format("{:9}{}\n", "", line);
    }
    if (!f.fix.empty()) text += fmt::format("{:9}fix: {}\n", "", f.fix);
  }
  text += fmt::format("\n{} ok, {} warning(s), {} problem(s)\n", counts[0], counts[1], counts[2]);
  if (!verbose && counts[0] > 0) text += "(--verbose shows what each check read)\n";
  return text;
}

}  // namespace gpupool
