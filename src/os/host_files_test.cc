#include "os/host_files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(HostFilesTest, KnowsTheRunningExecutableAndItsDirectory) {
  auto exe = executable_path();
  ASSERT_TRUE(exe.ok()) << exe.error().message;
  EXPECT_EQ(*exe, std::filesystem::read_symlink("/proc/self/exe").string());
  EXPECT_EQ(executable_directory(), std::filesystem::path(*exe).parent_path().string());
}

TEST(HostFilesTest, ReadsParentAndStartTimeFromProcStat) {
  char pattern[] = "/tmp/gpupool-host-files-test-XXXXXX";
  std::string root = mkdtemp(pattern);
  std::filesystem::create_directories(root + "/proc/42");
  // A command name with spaces and parentheses, as a process may choose.
  std::ofstream(root + "/proc/42/stat")
      << "42 (a) b (c) S 7 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 123456789 1000 10 "
         "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";
  HostFiles host(root);
  EXPECT_EQ(host.parent_pid(42), 7u);
  EXPECT_EQ(host.process_start_ticks(42), 123456789u);
  EXPECT_EQ(host.process_start_ticks(43), std::nullopt);
  EXPECT_EQ(host.process_start_time(42), std::nullopt);  // no /proc/stat yet
  std::ofstream(root + "/proc/stat") << "cpu  1 2 3\nintr 5\nbtime 1764900000\nprocesses 9\n";
  EXPECT_DOUBLE_EQ(*host.process_start_time(42), 1764900000.0 + 123456789.0 / static_cast<double>(sysconf(_SC_CLK_TCK)));
  std::filesystem::remove_all(root);
}

TEST(HostFilesTest, AGroupLivesWhileOneOfItsProcessesHasNotEnded) {
  char pattern[] = "/tmp/gpupool-host-files-test-XXXXXX";
  std::string root = mkdtemp(pattern);
  auto process = [&](int pid, char state, int group) {
    std::filesystem::create_directories(root + "/proc/" + std::to_string(pid));
    std::ofstream(root + "/proc/" + std::to_string(pid) + "/stat")
        << pid << " (job (x)) " << state << " 1 " << group << " " << group << " 0 -1 0\n";
  };
  std::filesystem::create_directories(root + "/proc/self");
  process(50, 'S', 50);
  process(51, 'R', 50);
  process(60, 'Z', 60);  // ended, never reaped: an orphan where nobody reaps
  HostFiles host(root);
  EXPECT_TRUE(host.group_has_living_process(50));
  EXPECT_FALSE(host.group_has_living_process(60));
  EXPECT_FALSE(host.group_has_living_process(70));
  process(50, 'Z', 50);
  EXPECT_TRUE(host.group_has_living_process(50));  // 51 lives on after its leader
  process(51, 'X', 50);
  EXPECT_FALSE(host.group_has_living_process(50));
  std::filesystem::remove_all(root);
}

TEST(HostFilesTest, AProcessKeepsItsStartTime) {
  HostFiles host;
  auto ours = host.process_start_ticks(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(ours.has_value());
  EXPECT_EQ(host.process_start_ticks(static_cast<uint32_t>(getpid())), ours);
  EXPECT_LE(host.process_start_ticks(1).value_or(0), *ours);
  auto started = host.process_start_time(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(started.has_value());
  EXPECT_LE(*started, static_cast<double>(time(nullptr)) + 1);
  EXPECT_GT(*started, static_cast<double>(time(nullptr)) - 3600);  // this test started moments ago
}

TEST(HostFilesTest, ReadsPermissionsAndListsDirectoriesUnderTheRoot) {
  char pattern[] = "/tmp/gpupool-host-files-test-XXXXXX";
  std::string root = mkdtemp(pattern);
  std::filesystem::create_directories(root + "/dev");
  std::ofstream(root + "/dev/nvidiactl") << "";
  std::ofstream(root + "/dev/nvidia0") << "";
  std::filesystem::permissions(root + "/dev/nvidia0", std::filesystem::perms(0660));
  HostFiles host(root);
  EXPECT_EQ(host.permissions("/dev/nvidia0"), 0660u);
  EXPECT_EQ(host.permissions("/dev/nvidia1"), std::nullopt);
  EXPECT_EQ(host.list_directory("/dev"), (std::vector<std::string>{"nvidia0", "nvidiactl"}));
  EXPECT_TRUE(host.list_directory("/nowhere").empty());
  std::filesystem::remove_all(root);
}

TEST(HostFilesTest, ReadsTheOnlineCpusWithTheirSocketAndCoreSiblings) {
  char pattern[] = "/tmp/gpupool-host-files-test-XXXXXX";
  std::string root = mkdtemp(pattern);
  const std::string cpus = root + "/sys/devices/system/cpu";
  auto plant = [&](unsigned cpu, const std::string& package, const std::string& siblings) {
    std::string topology = cpus + "/cpu" + std::to_string(cpu) + "/topology";
    std::filesystem::create_directories(topology);
    std::ofstream(topology + "/physical_package_id") << package << "\n";
    std::ofstream(topology + "/thread_siblings_list") << siblings << "\n";
  };
  plant(0, "0", "0,2");
  plant(1, "1", "1,3");
  plant(2, "-1", "0,2");  // a platform that does not say: one socket
  plant(3, "1", "1,3");
  std::ofstream(cpus + "/cpu3/online") << "0\n";            // offline: left out
  std::filesystem::create_directories(cpus + "/cpu4");      // no topology: left out
  std::filesystem::create_directories(cpus + "/cpufreq");   // not a CPU
  std::ofstream(cpus + "/online") << "0-2\n";
  std::vector<CpuThread> threads = HostFiles(root).cpu_threads();
  ASSERT_EQ(threads.size(), 3u);
  EXPECT_EQ(threads[0].cpu, 0u);
  EXPECT_EQ(threads[1].cpu, 1u);
  EXPECT_EQ(threads[1].package, 1u);
  EXPECT_EQ(threads[2].package, 0u);
  EXPECT_EQ(threads[2].core_cpus, (std::vector<unsigned>{0, 2}));
  EXPECT_TRUE(HostFiles(root + "/nowhere").cpu_threads().empty());
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace gpupool
