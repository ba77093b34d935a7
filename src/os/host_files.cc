#include "os/host_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "base/cpu_list.h"
#include "os/accounts.h"

namespace gpupool {
namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// sysfs names PCI devices "0000:3b:00.0"; NVML says "00000000:3B:00.0".
std::string sysfs_pci_name(const std::string& nvml_bus_id) {
  std::string id = nvml_bus_id;
  if (id.size() == 16 && id[8] == ':') id = id.substr(4);
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return id;
}

// Fields 3 onwards of a /proc/PID/stat file, numbered as in proc(5): [0] is field 3, the state;
// empty when it cannot be read.
std::vector<std::string> stat_fields(const std::string& stat_path) {
  auto stat = read_file(stat_path);
  if (!stat) return {};
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count after the last ')'.
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream text(stat->substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; text >> field;) fields.push_back(std::move(field));
  return fields;
}

template <typename Number>
std::optional<Number> parse_number(const std::string& field) {
  Number value = 0;
  auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (error != std::errc() || end != field.data() + field.size()) return std::nullopt;
  return value;
}

// Field `number` (3 or more) of a /proc/PID/stat file.
template <typename Number>
std::optional<Number> stat_number(const std::string& stat_path, size_t number) {
  auto fields = stat_fields(stat_path);
  if (fields.size() < number - 2) return std::nullopt;
  return parse_number<Number>(fields[number - 3]);
}

}  // namespace

HostFiles::HostFiles(std::string root) : root_(std::move(root)) {}

std::string HostFiles::path(const std::string& absolute) const {
  if (root_.empty() || root_ == "/") return absolute;
  return root_ + absolute;
}

std::optional<ProcessIdentity> HostFiles::process_identity(uint32_t pid) const {
  auto status = read_file(path(fmt::format("/proc/{}/status", pid)));
  if (!status) return std::nullopt;
  std::istringstream lines(*status);
  std::string line;
  std::optional<unsigned> uid;
  while (std::getline(lines, line)) {
    if (line.rfind("Uid:", 0) == 0) {
      uid = static_cast<unsigned>(std::strtoul(line.c_str() + 4, nullptr, 10));
      break;
    }
  }
  if (!uid) return std::nullopt;
  ProcessIdentity identity;
  identity.user = user_name(*uid);
  std::string cmdline = read_file(path(fmt::format("/proc/{}/cmdline", pid))).value_or("");
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  if (cmdline.empty()) {  // kernel threads and zombies have no command line
    cmdline = "[" + trim(read_file(path(fmt::format("/proc/{}/comm", pid))).value_or("?")) + "]";
  }
  identity.command = cmdline;
  return identity;
}

std::optional<uint32_t> HostFiles::parent_pid(uint32_t pid) const {
  return stat_number<uint32_t>(path(fmt::format("/proc/{}/stat", pid)), 4);
}

std::optional<uint64_t> HostFiles::process_start_ticks(uint32_t pid) const {
  return stat_number<uint64_t>(path(fmt::format("/proc/{}/stat", pid)), 22);
}

bool HostFiles::group_has_living_process(uint32_t group) const {
  for (const std::string& name : list_directory("/proc")) {
    auto pid = parse_number<uint32_t>(name);
    if (!pid) continue;
    auto fields = stat_fields(path(fmt::format("/proc/{}/stat", *pid)));
    // Field 3 the state (Z: ended, waiting to be reaped; X: dead), field 5 the process group.
    if (fields.size() >= 3 && fields[0] != "Z" && fields[0] != "X" && parse_number<uint32_t>(fields[2]) == group) {
      return true;
    }
  }
  return false;
}

std::optional<double> HostFiles::process_start_time(uint32_t pid) const {
  auto ticks = process_start_ticks(pid);
  auto stat = read_file(path("/proc/stat"));
  if (!ticks || !stat) return std::nullopt;
  size_t line = stat->find("\nbtime ");
  if (line == std::string::npos) return std::nullopt;
  double boot = std::strtod(stat->c_str() + line + 7, nullptr);
  return boot + static_cast<double>(*ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::optional<int> HostFiles::pci_numa_node(const std::string& nvml_bus_id) const {
  auto text = read_file(path("/sys/bus/pci/devices/" + sysfs_pci_name(nvml_bus_id) + "/numa_node"));
  if (!text) return std::nullopt;
  int node = std::atoi(text->c_str());
  if (node < 0) return std::nullopt;
  return node;
}

unsigned HostFiles::numa_node_count() const {
  std::error_code ec;
  unsigned nodes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path("/sys/devices/system/node"), ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.rfind("node", 0) == 0 && std::isdigit(static_cast<unsigned char>(name[4]))) ++nodes;
  }
  return nodes;
}

std::optional<std::string> HostFiles::pci_local_cpus(const std::string& nvml_bus_id) const {
  auto text =
      read_file(path("/sys/bus/pci/devices/" + sysfs_pci_name(nvml_bus_id) + "/local_cpulist"));
  if (!text) return std::nullopt;
  return trim(*text);
}

std::vector<CpuThread> HostFiles::cpu_threads() const {
  const std::string sys_cpu = "/sys/devices/system/cpu";
  std::vector<CpuThread> threads;
  for (const std::string& name : list_directory(sys_cpu)) {
    CpuThread thread;
    std::string_view number = std::string_view(name).substr(std::min<size_t>(3, name.size()));
    auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), thread.cpu);
    if (name.rfind("cpu", 0) != 0 || number.empty() || error != std::errc() ||
        end != number.data() + number.size()) {
      continue;  // cpufreq, cpuidle, online, ...
    }
    // An offline CPU has no topology (or says 0 in its `online`): the kernel schedules nothing there.
    const std::string dir = fmt::format("{}/{}", sys_cpu, name);
    if (trim(read(dir + "/online").value_or("1")) == "0") continue;
    auto package = read(dir + "/topology/physical_package_id");
    auto siblings = read(dir + "/topology/thread_siblings_list");
    if (!package || !siblings) continue;
    // -1 where the platform does not say (some virtual machines): one socket, as hwloc takes it.
    thread.package = static_cast<unsigned>(std::max(0, std::atoi(package->c_str())));
    Result<std::vector<unsigned>> core_cpus = parse_cpu_list(trim(*siblings));
    if (!core_cpus) continue;
    thread.core_cpus = std::move(*core_cpus);
    threads.push_back(std::move(thread));
  }
  return threads;
}

std::optional<std::map<std::string, std::string>> HostFiles::process_environment(
    uint32_t pid) const {
  auto text = read(fmt::format("/proc/{}/environ", pid));
  if (!text) return std::nullopt;
  return environment_from_block(*text);
}

std::optional<std::string> HostFiles::read(const std::string& absolute) const {
  return read_file(path(absolute));
}

bool HostFiles::exists(const std::string& absolute) const {
  std::error_code ec;
  return std::filesystem::exists(path(absolute), ec);
}

std::optional<unsigned> HostFiles::permissions(const std::string& absolute) const {
  struct stat info {};
  if (::stat(path(absolute).c_str(), &info) != 0) return std::nullopt;
  return static_cast<unsigned>(info.st_mode) & 07777U;
}

std::vector<std::string> HostFiles::list_directory(const std::string& absolute) const {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path(absolute), ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

HostFiles host_files_from_environment() {
  std::optional<std::string> root = environment_variable("GPUPOOL_HOST_ROOT");
  return HostFiles(root && !root->empty() ? *root : "/");
}

Result<std::string> executable_path() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return fail("cannot read /proc/self/exe: {}", ec.message());
  return exe.string();
}

std::string executable_directory() {
  auto exe = executable_path();
  if (!exe) return ".";
  return std::filesystem::path(*exe).parent_path().string();
}

std::string private_library_directory() { return executable_directory() + "/../lib/gpupool"; }

}  // namespace gpupool
