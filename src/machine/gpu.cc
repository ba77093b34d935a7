#include "machine/gpu.h"

#include <fmt/format.h>

namespace gpupool {

const char* to_string(ComputeMode mode) {
  switch (mode) {
    case ComputeMode::Default: return "default";
    case ComputeMode::ExclusiveThread: return "exclusive_thread";
    case ComputeMode::Prohibited: return "prohibited";
    case ComputeMode::ExclusiveProcess: return "exclusive_process";
  }
  return "unknown";
}

std::optional<double> mig_activity_reading(const MigActivity& activity, std::string_view key) {
#define GPUPOOL_MIG_ACTIVITY_READING(field) \
  if (key == #field) return activity.field;
  GPUPOOL_MIG_ACTIVITY(GPUPOOL_MIG_ACTIVITY_READING)
#undef GPUPOOL_MIG_ACTIVITY_READING
  return std::nullopt;
}

const MigDevice* mig_device_with_uuid(const Gpu& gpu, std::string_view uuid) {
  if (uuid.empty()) return nullptr;
  for (const MigDevice& device : gpu.mig_devices) {
    if (device.uuid == uuid) return &device;
  }
  return nullptr;
}

const char* to_string(ProcessKind kind) {
  switch (kind) {
    case ProcessKind::Compute: return "compute";
    case ProcessKind::Graphics: return "graphics";
    case ProcessKind::ComputeAndGraphics: return "compute+graphics";
  }
  return "unknown";
}

const char* to_string(PcieLevel level) {
  switch (level) {
    case PcieLevel::Board: return "board";
    case PcieLevel::SingleSwitch: return "single_switch";
    case PcieLevel::MultipleSwitches: return "multiple_switches";
    case PcieLevel::HostBridge: return "host_bridge";
    case PcieLevel::NumaNode: return "numa_node";
    case PcieLevel::System: return "system";
  }
  return "unknown";
}

std::string to_string(const ComputeCapability& capability) {
  return fmt::format("{}.{}", capability.major, capability.minor);
}

std::string topo_label(const Link& link) {
  if (link.nvlinks > 0) return fmt::format("NV{}", link.nvlinks);
  if (!link.pcie) return "n/a";
  switch (*link.pcie) {
    // nvidia-smi has no label of its own for two GPUs on one board; PIX is the closest.
    case PcieLevel::Board:
    case PcieLevel::SingleSwitch: return "PIX";
    case PcieLevel::MultipleSwitches: return "PXB";
    case PcieLevel::HostBridge: return "PHB";
    case PcieLevel::NumaNode: return "NODE";
    case PcieLevel::System: return "SYS";
  }
  return "n/a";
}

std::string process_user_text(const GpuProcess& process) { return process.user.value_or("unknown user"); }

std::string process_command_text(const GpuProcess& process) {
  return process.command.value_or("(not visible from here)");
}

}  // namespace gpupool
