#include "doctor/doctor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "health/quarantine.h"

namespace gpupool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kModuleText =
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Nov 13 12:00:00 UTC 2025\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";

Gpu make_gpu(unsigned index) {
  Gpu gpu;
  gpu.index = index;
  gpu.uuid = fmt::format("GPU-{:08x}-0000-0000-0000-000000000000", index);
  gpu.pci_bus_id = fmt::format("00000000:{:02X}:00.0", index + 1);
  gpu.name = "NVIDIA H200";
  gpu.minor_number = index;
  gpu.persistence_mode = true;
  gpu.ecc_corrected_volatile = 0;
  gpu.ecc_uncorrected_volatile = 0;
  gpu.compute_capability = ComputeCapability{9, 0};
  gpu.multiprocessors = 132;
  return gpu;
}

// A machine where every check passes.
DoctorFacts healthy(unsigned gpus = 2) {
  DoctorFacts f;
  f.module_version_text = kModuleText;
  f.device_nodes = {{"nvidia-uvm", 0666}, {"nvidia-uvm-tools", 0666}, {"nvidiactl", 0666}};
  f.nvml_library = "NVML: libnvidia-ml.so.1";
  Machine m;
  m.driver = {"580.159.04", "13.580.159.04", 13000};
  for (unsigned i = 0; i < gpus; ++i) {
    m.gpus.push_back(make_gpu(i));
    f.device_nodes.push_back({fmt::format("nvidia{}", i), 0666});
  }
  f.machine = m;
  f.pool = std::vector<GpuAvailability>(gpus);
  f.leases = std::vector<LeaseFact>{};
  f.daemon.runtime_dir = "/run/gpupool";
  return f;
}

const Finding& check(const std::vector<Finding>& findings, const std::string& id) {
  for (const Finding& f : findings) {
    if (f.check == id) return f;
  }
  static const Finding missing{"missing", CheckStatus::Problem, "no such check", {}, ""};
  ADD_FAILURE() << "no finding " << id;
  return missing;
}

Finding run(const DoctorFacts& facts, const std::string& id) { return check(diagnose(facts), id); }

GpuProcess process(uint32_t pid, std::optional<std::string> command = std::nullopt,
                   ProcessKind kind = ProcessKind::Compute) {
  GpuProcess p;
  p.pid = pid;
  p.kind = kind;
  p.used_memory_mib = 100;
  p.command = std::move(command);
  return p;
}

TEST(DoctorTest, AHealthyMachinePassesEveryCheckInOrder) {
  auto findings = diagnose(healthy());
  std::vector<std::string> ids;
  for (const Finding& f : findings) {
    ids.push_back(f.check);
    EXPECT_EQ(f.status, CheckStatus::Ok) << f.check << ": " << f.summary;
    EXPECT_TRUE(f.fix.empty()) << f.check;
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"kernel-module", "device-nodes", "nvml", "gpus", "cuda-version",
                                           "container", "cuda-visible-devices", "persistence-mode", "ecc",
                                           "link-errors", "stray-memory", "display-server", "outside-processes", "leases", "daemon", "quarantine", "state-space",
                                           "mps", "slurm"}));
  EXPECT_EQ(doctor_exit_code(findings), 0);
}

Finding mps_finding(const DoctorFacts& facts) {
  for (const Finding& f : diagnose(facts)) {
    if (f.check == "mps") return f;
  }
  ADD_FAILURE() << "no mps check";
  return {};
}

bool said(const Finding& f, std::string_view text) {
  return std::any_of(f.evidence.begin(), f.evidence.end(),
                     [&](const std::string& line) { return line.find(text) != std::string::npos; });
}

TEST(DoctorTest, MpsSaysWhatHoldsSlicesAndWhatTheComputeModesMean) {
  DoctorFacts facts = healthy();
  Finding without = mps_finding(facts);
  EXPECT_EQ(without.status, CheckStatus::Ok);
  EXPECT_EQ(without.summary,
            "no gpupoold answers; CUDA MPS is not installed here: one would hold memory slices with its watchdog");
  EXPECT_TRUE(said(without, "install CUDA MPS"));
  EXPECT_TRUE(said(without, "per-cgroup GPU memory limits need a driver from r615 (here 580.159.04) and the kernel's "
                            "cgroup dmem controller (here absent, it came with 6.14): not available"));

  facts.mps_control = "/usr/bin/nvidia-cuda-mps-control";
  facts.dmem_controller = true;
  facts.machine->gpus[0].compute_mode = ComputeMode::ExclusiveProcess;
  facts.machine->gpus[1].mig_enabled = true;
  Finding with = mps_finding(facts);
  EXPECT_EQ(with.status, CheckStatus::Ok);
  EXPECT_EQ(with.summary,
            "no gpupoold answers; CUDA MPS is installed here: one would hold slices of one GPU with it "
            "(slice_enforcement \"auto\", the default, or \"mps\")");
  EXPECT_EQ(with.evidence.front(), "nvidia-cuda-mps-control on this shell's PATH: /usr/bin/nvidia-cuda-mps-control");
  EXPECT_TRUE(said(with, "GPU 0: compute mode exclusive_process: only one process (the MPS server) may use it"));
  EXPECT_TRUE(said(with, "GPU 1: compute mode "));
  EXPECT_TRUE(said(with, "MIG on: its instances are hard slices already"));
  EXPECT_TRUE(said(with, "gpupool changes neither"));
  EXPECT_TRUE(said(with, "(here present): not available")) << "the driver is r580";
  facts.module_version_text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  615.20  Release Build\n";
  EXPECT_TRUE(said(mps_finding(facts), "(here 615.20) and the kernel's cgroup dmem controller (here present): "
                                       "available, though gpupool does not use them yet"));
}

// The running daemon's own word on what holds slices, not this shell's PATH.
TEST(DoctorTest, MpsSaysWhatTheRunningDaemonHoldsSlicesWith) {
  DoctorFacts facts = healthy();
  facts.mps_control = "/usr/bin/nvidia-cuda-mps-control";
  facts.daemon.running = true;
  facts.daemon.slice_enforcement = "watch";  // installed here, but not where gpupoold looks
  Finding watched = mps_finding(facts);
  EXPECT_EQ(watched.summary, "gpupoold holds memory slices with its watchdog, not with CUDA MPS");
  EXPECT_TRUE(said(watched, "where gpupoold finds it"));
  facts.mps_control.reset();
  facts.daemon.slice_enforcement = "mps";
  Finding held = mps_finding(facts);
  EXPECT_EQ(held.summary, "gpupoold holds slices of one GPU with CUDA MPS, the others with its watchdog");
  EXPECT_EQ(held.evidence.front(), "nvidia-cuda-mps-control is not on this shell's PATH");
  facts.daemon.slice_enforcement = "off";
  EXPECT_EQ(mps_finding(facts).summary,
            "gpupoold holds no slice (slice_enforcement \"off\"): a --mem slice is a promise among users");
}

TEST(DoctorTest, ExitCodeIsTheWorstStatus) {
  std::vector<Finding> findings = {{"a", CheckStatus::Ok, "", {}, ""}, {"b", CheckStatus::Warning, "", {}, ""}};
  EXPECT_EQ(doctor_exit_code(findings), 1);
  findings.push_back({"c", CheckStatus::Problem, "", {}, ""});
  EXPECT_EQ(doctor_exit_code(findings), 2);
  EXPECT_EQ(doctor_exit_code({}), 0);
  EXPECT_STREQ(to_string(CheckStatus::Warning), "warning");
}

TEST(DoctorTest, ReadsTheKernelModuleVersion) {
  EXPECT_EQ(parse_kernel_module_version(kModuleText), "580.159.04");
  EXPECT_EQ(parse_kernel_module_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  "
                                        "Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jan 7 2025\n"),
            "570.86.15");
  EXPECT_EQ(parse_kernel_module_version("NVRM version: something else\n"), std::nullopt);
  EXPECT_EQ(parse_kernel_module_version(""), std::nullopt);
}

TEST(DoctorTest, KernelModule) {
  DoctorFacts f = healthy();
  Finding ok = run(f, "kernel-module");
  EXPECT_THAT(ok.summary, HasSubstr("580.159.04"));

  f.module_version_text.reset();
  Finding missing = run(f, "kernel-module");
  EXPECT_EQ(missing.status, CheckStatus::Problem);
  EXPECT_THAT(missing.fix, HasSubstr("modprobe nvidia"));

  f.module_version_text = "garbage";
  EXPECT_EQ(run(f, "kernel-module").status, CheckStatus::Warning);

  f = healthy();
  f.machine->driver.driver_version = "580.200.01";
  Finding mismatch = run(f, "kernel-module");
  EXPECT_EQ(mismatch.status, CheckStatus::Problem);
  EXPECT_THAT(mismatch.summary, HasSubstr("upgraded"));
}

TEST(DoctorTest, DeviceNodes) {
  DoctorFacts f = healthy();
  std::erase_if(f.device_nodes, [](const DeviceNode& n) { return n.name == "nvidia-uvm"; });
  Finding missing = run(f, "device-nodes");
  EXPECT_EQ(missing.status, CheckStatus::Problem);
  EXPECT_THAT(missing.summary, HasSubstr("/dev/nvidia-uvm"));
  EXPECT_THAT(missing.fix, HasSubstr("nvidia-modprobe"));

  f = healthy();
  std::erase_if(f.device_nodes, [](const DeviceNode& n) { return n.name == "nvidia1"; });
  EXPECT_THAT(run(f, "device-nodes").summary, HasSubstr("/dev/nvidia1"));

  f = healthy();
  f.device_nodes.back().permissions = 0660;
  Finding group = run(f, "device-nodes");
  EXPECT_EQ(group.status, CheckStatus::Warning);
  EXPECT_THAT(group.evidence, ::testing::Contains("/dev/nvidia1 mode 0660"));
  EXPECT_THAT(group.fix, HasSubstr("NVreg_DeviceFileMode"));

  f.device_nodes.back().permissions = 0600;
  Finding closed = run(f, "device-nodes");
  EXPECT_EQ(closed.status, CheckStatus::Problem);
  EXPECT_THAT(closed.summary, HasSubstr("cannot open /dev/nvidia1"));

  f = healthy();
  f.machine.reset();
  EXPECT_EQ(run(f, "device-nodes").status, CheckStatus::Ok);  // nvidia0 and nvidia1 are there
  std::erase_if(f.device_nodes, [](const DeviceNode& n) { return n.name == "nvidia0" || n.name == "nvidia1"; });
  EXPECT_THAT(run(f, "device-nodes").summary, HasSubstr("/dev/nvidiaN"));
}

TEST(DoctorTest, Nvml) {
  DoctorFacts f = healthy();
  EXPECT_THAT(run(f, "nvml").evidence, ::testing::Contains("driver 580.159.04, NVML 13.580.159.04"));

  f.machine.reset();
  f.nvml_library = "libnvidia-ml.so.1";
  f.nvml_error = "NVIDIA driver not found: libnvidia-ml.so.1: cannot open shared object file";
  Finding absent = run(f, "nvml");
  EXPECT_EQ(absent.status, CheckStatus::Problem);
  EXPECT_THAT(absent.fix, HasSubstr("Install the NVIDIA driver"));

  f.nvml_error = "NVML in /usr/local/cuda/lib64/stubs/libnvidia-ml.so failed to initialise: NVML error 12";
  EXPECT_THAT(run(f, "nvml").summary, HasSubstr("stub"));
  f.nvml_error = "NVML in libnvidia-ml.so.1 failed to initialise: NVML Shared Library Not Found (NVML error 12)";
  EXPECT_THAT(run(f, "nvml").summary, HasSubstr("stub"));

  f.nvml_error = "NVML in libnvidia-ml.so.1 failed to initialise: Driver/library version mismatch (NVML error 18)";
  EXPECT_THAT(run(f, "nvml").fix, HasSubstr("reboot"));
}

TEST(DoctorTest, Gpus) {
  DoctorFacts f = healthy();
  EXPECT_EQ(run(f, "gpus").evidence.size(), 2u);
  f.machine->gpus[1].fault = "GPU is lost";
  Finding lost = run(f, "gpus");
  EXPECT_EQ(lost.status, CheckStatus::Problem);
  EXPECT_THAT(lost.summary, HasSubstr("GPU 1"));
  EXPECT_THAT(lost.fix, HasSubstr("Xid"));

  f.machine->gpus.clear();
  EXPECT_THAT(run(f, "gpus").summary, HasSubstr("no GPU"));
  f.machine.reset();
  EXPECT_EQ(run(f, "gpus").status, CheckStatus::Problem);
}

TEST(DoctorTest, ReadsInstalledCudaVersions) {
  EXPECT_EQ(parse_torch_cuda_version("__version__ = '2.3.0'\ndebug = False\ncuda = '12.1'\ngit_version = 'x'\n"),
            "12.1");
  EXPECT_EQ(parse_torch_cuda_version("cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n"), "12.4");
  EXPECT_EQ(parse_torch_cuda_version("cudnn = '8.9'\ncuda = None\n"), std::nullopt);
  EXPECT_EQ(parse_torch_cuda_version("cuda = 'twelve'\n"), std::nullopt);
  EXPECT_EQ(parse_cuda_toolkit_version(R"({"cuda": {"name": "CUDA SDK", "version": "12.4.1"}})"), "12.4.1");
  EXPECT_EQ(parse_cuda_toolkit_version(R"({"cuda": {"version": 12}})"), std::nullopt);
  EXPECT_EQ(parse_cuda_toolkit_version("not json"), std::nullopt);
}

TEST(DoctorTest, CudaVersion) {
  DoctorFacts f = healthy();
  EXPECT_THAT(run(f, "cuda-version").summary, HasSubstr("no PyTorch"));

  f.installed_cuda = {{"PyTorch in /usr/lib/python3/dist-packages", "12.1"}, {"CUDA toolkit /usr/local/cuda-13.0", "13.0.1"}};
  EXPECT_EQ(run(f, "cuda-version").status, CheckStatus::Ok);

  f.machine->driver.cuda_driver_version = 12040;
  f.installed_cuda = {{"PyTorch in /usr/lib/python3/dist-packages", "12.6"}};
  Finding minor = run(f, "cuda-version");
  EXPECT_EQ(minor.status, CheckStatus::Warning);
  EXPECT_THAT(minor.summary, HasSubstr("minor version compatibility"));

  f.installed_cuda.push_back({"CUDA toolkit /usr/local/cuda-13.0", "13.0"});
  Finding major = run(f, "cuda-version");
  EXPECT_EQ(major.status, CheckStatus::Problem);
  EXPECT_THAT(major.summary, HasSubstr("/usr/local/cuda-13.0"));
  EXPECT_THAT(major.evidence.front(), HasSubstr("supports CUDA 12.4"));

  f.machine->driver.cuda_driver_version.reset();
  EXPECT_EQ(run(f, "cuda-version").status, CheckStatus::Warning);
}

TEST(DoctorTest, Container) {
  DoctorFacts f = healthy();
  EXPECT_THAT(run(f, "container").summary, HasSubstr("not in a container"));

  f.in_container = true;
  f.container_evidence = "/.dockerenv exists (Docker)";
  f.environment["NVIDIA_VISIBLE_DEVICES"] = "all";
  Finding ok = run(f, "container");
  EXPECT_EQ(ok.status, CheckStatus::Ok);
  EXPECT_THAT(ok.evidence, ::testing::Contains("detected: /.dockerenv exists (Docker)"));

  f.environment["NVIDIA_VISIBLE_DEVICES"] = "0,1,2";
  Finding fewer = run(f, "container");
  EXPECT_EQ(fewer.status, CheckStatus::Warning);
  EXPECT_THAT(fewer.summary, HasSubstr("names 3 GPU(s) but 2 device node(s)"));

  f.environment["NVIDIA_VISIBLE_DEVICES"] = "0,1";
  EXPECT_EQ(run(f, "container").status, CheckStatus::Ok);

  std::erase_if(f.device_nodes, [](const DeviceNode& n) { return n.name == "nvidia0" || n.name == "nvidia1"; });
  f.environment["NVIDIA_VISIBLE_DEVICES"] = "void";
  Finding none = run(f, "container");
  EXPECT_EQ(none.status, CheckStatus::Problem);
  EXPECT_THAT(none.fix, HasSubstr("--gpus"));
}

TEST(DoctorTest, CudaVisibleDevicesGoesThroughTheResolver) {
  DoctorFacts f = healthy();
  EXPECT_THAT(run(f, "cuda-visible-devices").summary, HasSubstr("2 GPU(s) (variable unset)"));

  f.environment["CUDA_VISIBLE_DEVICES"] = "1";
  Finding one = run(f, "cuda-visible-devices");
  EXPECT_EQ(one.status, CheckStatus::Ok);
  EXPECT_THAT(one.evidence, ::testing::Contains("cuda:0 = GPU 1"));

  f.environment["CUDA_VISIBLE_DEVICES"] = "0,0";
  Finding twice = run(f, "cuda-visible-devices");
  EXPECT_EQ(twice.status, CheckStatus::Problem);
  EXPECT_THAT(twice.summary, HasSubstr("CUDA initialisation would fail"));

  f.environment["CUDA_VISIBLE_DEVICES"] = "2";
  EXPECT_NE(run(f, "cuda-visible-devices").status, CheckStatus::Ok);

  f.environment["CUDA_VISIBLE_DEVICES"] = "GPU-";
  EXPECT_NE(run(f, "cuda-visible-devices").status, CheckStatus::Ok);

  f.environment.erase("CUDA_VISIBLE_DEVICES");
  f.environment["CUDA_DEVICE_ORDER"] = "bogus";
  EXPECT_EQ(run(f, "cuda-visible-devices").status, CheckStatus::Problem);

  f.machine.reset();
  EXPECT_THAT(run(f, "cuda-visible-devices").summary, HasSubstr("not checked"));
}

TEST(DoctorTest, PersistenceMode) {
  DoctorFacts f = healthy();
  f.machine->gpus[0].persistence_mode.reset();
  Finding na = run(f, "persistence-mode");
  EXPECT_EQ(na.status, CheckStatus::Ok);
  EXPECT_THAT(na.evidence, ::testing::Contains("GPU 0: n/a"));
  f.machine->gpus[1].persistence_mode = false;
  Finding off = run(f, "persistence-mode");
  EXPECT_EQ(off.status, CheckStatus::Warning);
  EXPECT_THAT(off.summary, HasSubstr("off on GPU 1"));
  EXPECT_THAT(off.fix, HasSubstr("nvidia-persistenced"));
}

TEST(DoctorTest, Ecc) {
  DoctorFacts f = healthy();
  f.machine->gpus[0].ecc_corrected_volatile.reset();
  f.machine->gpus[0].ecc_uncorrected_volatile.reset();
  Finding na = run(f, "ecc");
  EXPECT_EQ(na.status, CheckStatus::Ok);
  // Missing is n/a, never 0.
  EXPECT_EQ(na.evidence.front(), "GPU 0: volatile ECC errors corrected n/a, uncorrected n/a; retired pages n/a "
                                 "(pending n/a); remapped rows n/a (pending n/a, failed n/a)");
  f.machine->gpus[1].ecc_corrected_volatile = 3;
  EXPECT_EQ(run(f, "ecc").status, CheckStatus::Warning);
  f.machine->gpus[1].ecc_uncorrected_volatile = 1;
  Finding bad = run(f, "ecc");
  EXPECT_EQ(bad.status, CheckStatus::Problem);
  EXPECT_THAT(bad.summary, HasSubstr("uncorrected ECC errors on GPU 1"));
}

TEST(DoctorTest, LinkErrors) {
  DoctorFacts f = healthy();
  Finding na = run(f, "link-errors");
  EXPECT_EQ(na.status, CheckStatus::Ok);
  EXPECT_EQ(na.evidence.front(), "GPU 0: PCIe replays n/a; NVLink CRC errors n/a (flow control), n/a (data), "
                                 "replays n/a, recoveries n/a");
  f.machine->gpus[0].nvlink_crc_flit_errors = 0;
  f.machine->gpus[0].nvlink_recovery_errors = 0;
  EXPECT_EQ(run(f, "link-errors").status, CheckStatus::Ok);
  f.machine->gpus[1].pcie_replay_count = 5;
  Finding pcie = run(f, "link-errors");
  EXPECT_EQ(pcie.status, CheckStatus::Warning);
  EXPECT_EQ(pcie.summary, "PCIe replays on GPU 1");
  EXPECT_THAT(pcie.fix, HasSubstr("reseat"));
  // NVLink errors come first: a failing link ends in XID 74.
  f.machine->gpus[0].nvlink_recovery_errors = 2;
  Finding nvlink = run(f, "link-errors");
  EXPECT_EQ(nvlink.summary, "NVLink errors on GPU 0");
  EXPECT_THAT(nvlink.fix, HasSubstr("XID 74"));
  EXPECT_THAT(nvlink.evidence.front(), HasSubstr("recoveries 2"));
}

TEST(DoctorTest, MemoryNoProcessHolds) {
  DoctorFacts f = healthy();
  f.machine->gpus[1].memory_used_mib = 40000;
  f.machine->gpus[1].processes.clear();
  Finding stray = run(f, "stray-memory");
  EXPECT_EQ(stray.status, CheckStatus::Warning);
  EXPECT_THAT(stray.summary, HasSubstr("GPU 1 holds memory no process uses"));
  EXPECT_THAT(stray.evidence, ::testing::Contains("GPU 1: 40000 MiB in use, 40000 MiB of it by no listed process (0 processes)"));
  EXPECT_THAT(stray.fix, HasSubstr("nvidia-smi -r -i N"));
  EXPECT_THAT(stray.fix, ::testing::Not(HasSubstr("container")));
  f.in_container = true;
  EXPECT_THAT(run(f, "stray-memory").fix, HasSubstr("other containers' processes are not listed"));
  // The driver's own few hundred MiB are nothing to act on.
  f.machine->gpus[1].memory_used_mib = kUnattributedMemoryToleranceMib;
  EXPECT_EQ(run(f, "stray-memory").status, CheckStatus::Ok);
}

TEST(DoctorTest, MemoryRepairs) {
  DoctorFacts f = healthy();
  f.machine->gpus[0].remapped_rows = 2;
  f.machine->gpus[0].row_remapping_pending = false;
  f.machine->gpus[0].row_remapping_failed = false;
  f.machine->gpus[1].retired_pages = 0;
  f.machine->gpus[1].retired_pages_pending = false;
  Finding ok = run(f, "ecc");
  EXPECT_EQ(ok.status, CheckStatus::Ok);
  EXPECT_THAT(ok.evidence.front(), HasSubstr("remapped rows 2 (pending no, failed no)"));
  EXPECT_THAT(ok.evidence.back(), HasSubstr("retired pages 0 (pending no)"));

  f.machine->gpus[1].retired_pages_pending = true;
  Finding pending = run(f, "ecc");
  EXPECT_EQ(pending.status, CheckStatus::Warning);
  EXPECT_THAT(pending.summary, HasSubstr("waits for a reset on GPU 1"));
  f.machine->gpus[1].retired_pages_pending = false;
  f.machine->gpus[0].row_remapping_pending = true;
  EXPECT_THAT(run(f, "ecc").summary, HasSubstr("GPU 0"));

  f.machine->gpus[0].row_remapping_failed = true;
  Finding failed = run(f, "ecc");
  EXPECT_EQ(failed.status, CheckStatus::Problem);
  EXPECT_THAT(failed.fix, HasSubstr("RMA"));
}

TEST(DoctorTest, DisplayServers) {
  DoctorFacts f = healthy();
  f.machine->gpus[0].processes = {process(10, "/usr/bin/python train.py")};
  EXPECT_EQ(run(f, "display-server").status, CheckStatus::Ok);
  f.machine->gpus[1].processes = {process(11, "/usr/lib/xorg/Xorg vt1 -displayfd 3")};
  Finding xorg = run(f, "display-server");
  EXPECT_EQ(xorg.status, CheckStatus::Warning);
  EXPECT_THAT(xorg.summary, HasSubstr("GPU 1"));
  f.machine->gpus[1].processes = {process(12, std::nullopt, ProcessKind::Graphics)};
  Finding graphics = run(f, "display-server");
  EXPECT_EQ(graphics.status, CheckStatus::Warning);
  EXPECT_THAT(graphics.evidence.front(), HasSubstr("command not visible"));
}

TEST(DoctorTest, OutsideProcesses) {
  DoctorFacts f = healthy();
  (*f.pool)[1].external_busy = true;
  (*f.pool)[1].external_mib = 2048;
  (*f.pool)[1].holders = "pid 812 bob python";
  Finding busy = run(f, "outside-processes");
  EXPECT_EQ(busy.status, CheckStatus::Warning);
  EXPECT_THAT(busy.evidence, ::testing::Contains("GPU 1: pid 812 bob python (2048 MiB)"));
  f.pool.reset();
  f.pool_error = "cannot open the lease directory";
  EXPECT_EQ(run(f, "outside-processes").status, CheckStatus::Warning);
}

TEST(DoctorTest, LeasesHeldForDeadProcesses) {
  DoctorFacts f = healthy();
  f.leases->push_back({0, "GPU-00000000-0000-0000-0000-000000000000", 4242, "alice", "train", true});
  EXPECT_THAT(run(f, "leases").summary, HasSubstr("every holder runs"));
  f.leases->back().holder_alive = false;
  Finding dead = run(f, "leases");
  EXPECT_EQ(dead.status, CheckStatus::Problem);
  EXPECT_THAT(dead.summary, HasSubstr("GPU 0 (pid 4242)"));
  EXPECT_THAT(dead.fix, HasSubstr("fuser -v /run/gpupool/locks/UUID.lock"));
  f.leases.reset();
  f.lease_error = "permission denied";
  EXPECT_EQ(run(f, "leases").status, CheckStatus::Warning);
}

TEST(DoctorTest, Daemon) {
  DoctorFacts f = healthy();
  EXPECT_THAT(run(f, "daemon").summary, HasSubstr("no gpupoold runs"));
  f.daemon.running = true;
  EXPECT_EQ(run(f, "daemon").summary, "gpupoold answers");
  f.daemon.error = "/run/gpupool/gpupoold.sock belongs to uid 1000";
  EXPECT_EQ(run(f, "daemon").status, CheckStatus::Problem);
}

TEST(DoctorTest, StateSpace) {
  DoctorFacts f = healthy();
  EXPECT_THAT(run(f, "state-space").summary, HasSubstr("not checked"));
  constexpr uint64_t kMiB = 1 << 20;
  f.daemon.state_space = StateSpaceFact{2048 * kMiB, 512 * kMiB, 0};
  EXPECT_EQ(run(f, "state-space").status, CheckStatus::Ok);
  f.daemon.state_space->free_bytes = 700 * kMiB;
  EXPECT_EQ(run(f, "state-space").status, CheckStatus::Warning);
  f.daemon.state_space->free_bytes = 3 * kMiB + 5;
  Finding short_of_space = run(f, "state-space");
  EXPECT_EQ(short_of_space.status, CheckStatus::Problem);
  EXPECT_EQ(short_of_space.summary, "the state filesystem is short of space: job output is not being saved");
  EXPECT_EQ(short_of_space.evidence,
            (std::vector<std::string>{"free: 3 MiB; kept for the job database (state_reserve_mb): 512 MiB"}));
  EXPECT_THAT(short_of_space.fix, HasSubstr("max_log_mb"));
  f.daemon.state_space->unsaved_jobs = 2;
  EXPECT_THAT(run(f, "state-space").summary, HasSubstr("2 job(s) could not be saved"));
}

TEST(DoctorTest, Quarantine) {
  DoctorFacts f = healthy();
  EXPECT_THAT(run(f, "quarantine").summary, HasSubstr("not checked"));
  f.daemon.running = true;
  EXPECT_EQ(run(f, "quarantine").summary, "no GPU is quarantined");
  f.daemon.quarantined = {{2, 1764945000, "XID 79 (the GPU fell off the bus)"},
                          {5, 1764945000, "a row remap is pending (a reset applies it)"}};
  Finding quarantined = run(f, "quarantine");
  EXPECT_EQ(quarantined.status, CheckStatus::Problem);
  EXPECT_EQ(quarantined.summary, "GPU 2, 5 quarantined: no new job starts there");
  EXPECT_EQ(quarantined.evidence,
            (std::vector<std::string>{
                "GPU 2: XID 79 (the GPU fell off the bus); to do: reboot the machine; if it repeats, have the GPU "
                "reseated or replaced",
                "GPU 5: a row remap is pending (a reset applies it); to do: reset the GPU (`nvidia-smi -r -i N`) once "
                "its jobs are off it"}));
  EXPECT_THAT(quarantined.fix, HasSubstr("gpupool resume --gpu N"));
}

TEST(DoctorTest, Slurm) {
  DoctorFacts f = healthy();
  f.environment["SLURM_JOB_ID"] = "77";
  EXPECT_THAT(run(f, "slurm").summary, HasSubstr("no GPU allocated"));

  f.environment["SLURM_JOB_GPUS"] = "2,3";
  f.environment["GPU_DEVICE_ORDINAL"] = "0,1";
  Finding unset = run(f, "slurm");
  EXPECT_EQ(unset.status, CheckStatus::Warning);
  EXPECT_THAT(unset.summary, HasSubstr("CUDA_VISIBLE_DEVICES is unset"));

  f.environment["CUDA_VISIBLE_DEVICES"] = "0,1";
  EXPECT_EQ(run(f, "slurm").status, CheckStatus::Ok);

  f.environment["CUDA_VISIBLE_DEVICES"] = "1";
  EXPECT_THAT(run(f, "slurm").summary, HasSubstr("differs from what Slurm set"));

  f.environment.erase("GPU_DEVICE_ORDINAL");
  EXPECT_THAT(run(f, "slurm").summary, HasSubstr("allocated 2 GPU(s) but CUDA_VISIBLE_DEVICES names 1"));
}

DoctorFacts with_process(const std::map<std::string, std::string>& env, std::set<unsigned> on_gpus) {
  DoctorFacts f = healthy(4);
  f.process = ProcessFacts{4242, env, {4242, 4000, 1}};
  for (unsigned i : on_gpus) f.machine->gpus[i].processes.push_back(process(4242, "python train.py"));
  return f;
}

TEST(DoctorTest, ProcessWhoseEnvironmentCannotBeRead) {
  DoctorFacts f = healthy();
  f.process = ProcessFacts{4242, std::nullopt, {}};
  auto findings = diagnose(f);
  EXPECT_EQ(check(findings, "process-environment").status, CheckStatus::Problem);
  EXPECT_EQ(findings.back().check, "process-environment");  // nothing more can be said
}

TEST(DoctorTest, ProcessWithinItsList) {
  DoctorFacts f = with_process({{"CUDA_VISIBLE_DEVICES", "2,3"}}, {2, 3});
  EXPECT_EQ(run(f, "process-gpus").status, CheckStatus::Ok);
  EXPECT_EQ(run(f, "process-environment").status, CheckStatus::Ok);
  f = with_process({}, {});
  EXPECT_THAT(run(f, "process-gpus").summary, HasSubstr("holds no GPU context"));
}

TEST(DoctorTest, ProcessOnEveryGpuSetItsVariableTooLate) {
  DoctorFacts f = with_process({{"CUDA_VISIBLE_DEVICES", "1"}}, {0, 1, 2, 3});
  Finding late = run(f, "process-gpus");
  EXPECT_EQ(late.status, CheckStatus::Problem);
  EXPECT_THAT(late.summary, HasSubstr("every GPU"));
  EXPECT_THAT(late.fix, HasSubstr("before the program starts"));
}

TEST(DoctorTest, ProcessOnACardOutsideItsList) {
  DoctorFacts f = with_process({{"CUDA_VISIBLE_DEVICES", "1"}}, {0});
  Finding outside = run(f, "process-gpus");
  EXPECT_EQ(outside.status, CheckStatus::Problem);
  EXPECT_THAT(outside.summary, HasSubstr("uses GPU 0, outside"));

  // On a one-GPU machine "every GPU" says nothing more than the card itself.
  f = healthy(1);
  f.process = ProcessFacts{4242, std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "GPU-ffff"}}, {4242}};
  f.machine->gpus[0].processes.push_back(process(4242));
  Finding single = run(f, "process-gpus");
  EXPECT_EQ(single.status, CheckStatus::Problem);
  EXPECT_THAT(single.summary, HasSubstr("uses GPU 0, outside"));
  EXPECT_THAT(single.evidence, ::testing::Contains("its variables select no GPU"));
}

TEST(DoctorTest, ProcessLeases) {
  DoctorFacts f = with_process({{"CUDA_VISIBLE_DEVICES", "0"}}, {0});
  Finding unleased = run(f, "process-leases");
  EXPECT_EQ(unleased.status, CheckStatus::Warning);
  EXPECT_THAT(unleased.summary, HasSubstr("outside any lease"));

  // Leased to its parent (the `gpupool run` that started it): its own.
  f.leases->push_back({0, f.machine->gpus[0].uuid, 4000, "alice", "mine", true});
  EXPECT_EQ(run(f, "process-leases").status, CheckStatus::Ok);

  f.leases->back().pid = 5000;
  f.leases->back().job = "job-12";  // the daemon's lease of job 12, named as every view names it
  Finding foreign = run(f, "process-leases");
  EXPECT_EQ(foreign.status, CheckStatus::Problem);
  EXPECT_THAT(foreign.summary, HasSubstr("(job 12 (alice), pid 5000)"));

  f.leases.reset();
  f.lease_error = "permission denied";
  EXPECT_EQ(run(f, "process-leases").status, CheckStatus::Warning);
}

TEST(DoctorTest, TheTextShowsEvidenceOfPassingChecksOnlyWhenVerbose) {
  std::vector<Finding> findings = {
      {"kernel-module", CheckStatus::Ok, "loaded", {"/proc/driver/nvidia/version: NVRM 580"}, ""},
      {"device-nodes", CheckStatus::Warning, "only the group can open /dev/nvidia-uvm", {"/dev/nvidia-uvm mode 0660"},
       "chmod it"}};
  EXPECT_EQ(findings_text(findings, false),
            "ok       kernel-module         loaded\n"
            "warning  device-nodes          only the group can open /dev/nvidia-uvm\n"
            "         /dev/nvidia-uvm mode 0660\n"
            "         fix: chmod it\n"
            "\n1 ok, 1 warning(s), 0 problem(s)\n"
            "(--verbose shows what each check read)\n");
  EXPECT_THAT(findings_text(findings, true), HasSubstr("ok       kernel-module         loaded\n"
                                                       "         /proc/driver/nvidia/version: NVRM 580\n"));
  EXPECT_THAT(findings_text(findings, true), Not(HasSubstr("--verbose")));
}

}  // namespace
}  // namespace gpupool
