#include "sched/mps.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

const std::string kUuid = "GPU-7b2c1f4e-0a9d-4c3b-8e21-5f6a7b8c9d0e";

TEST(Mps, EachGpuHasItsOwnShortDirectoriesUnderTheRuntimeDirectory) {
  MpsDirectories d = mps_directories("/run/gpupool", kUuid, {kUuid});
  EXPECT_EQ(d.root, "/run/gpupool/mps/GPU-7b2c1f4e");
  EXPECT_EQ(d.pipe, "/run/gpupool/mps/GPU-7b2c1f4e/pipe");
  EXPECT_EQ(d.log, "/run/gpupool/mps/GPU-7b2c1f4e/log");
  EXPECT_EQ(mps_pipe_too_long(d), std::nullopt);
  // Only hexadecimal digits of the UUID make the name: nothing can climb out.
  EXPECT_EQ(mps_directories("/r", "GPU-../../etc/passwd", {}).root, "/r/mps/GPU-ecad");
}

TEST(Mps, GpusWhoseUuidsShareTheirFirstDigitsGetDirectoriesOfTheirOwn) {
  std::string neighbour = "GPU-7b2c1f4e-0aff-4c3b-8e21-5f6a7b8c9d0e";
  std::vector<std::string> machine = {kUuid, neighbour, "GPU-11111111-2222-3333-4444-555555555555"};
  EXPECT_EQ(mps_directories("/run/gpupool", kUuid, machine).root, "/run/gpupool/mps/GPU-7b2c1f4e0a9");
  EXPECT_EQ(mps_directories("/run/gpupool", neighbour, machine).root, "/run/gpupool/mps/GPU-7b2c1f4e0af");
  EXPECT_EQ(mps_directories("/run/gpupool", machine[2], machine).root, "/run/gpupool/mps/GPU-11111111");
}

TEST(Mps, APipeDirectoryTooLongForItsSocketsIsSaid) {
  MpsDirectories d = mps_directories("/tmp/" + std::string(80, 'x'), kUuid, {kUuid});
  auto why = mps_pipe_too_long(d);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("is too long for the control daemon's sockets (126 bytes of at most 107)"), std::string::npos)
      << *why;
}

TEST(Mps, OnlyASliceOfOneGpuRunsAsAnMpsClient) {
  EXPECT_TRUE(runs_under_mps(GpuRequest{1, 20480}));
  EXPECT_FALSE(runs_under_mps(GpuRequest{2, 20480})) << "a process reaches one control daemon";
  EXPECT_FALSE(runs_under_mps(GpuRequest{1, std::nullopt})) << "a whole GPU needs no limit";
}

TEST(Mps, TheControlDaemonSeesItsGpuAlone) {
  MpsDirectories d = mps_directories("/run/gpupool", kUuid, {kUuid});
  EXPECT_EQ(mps_control_environment(d, kUuid),
            (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=" + kUuid, "CUDA_MPS_PIPE_DIRECTORY=" + d.pipe,
                                      "CUDA_MPS_LOG_DIRECTORY=" + d.log}));
}

TEST(Mps, AClientIsLimitedToItsSliceOnItsOneDevice) {
  MpsDirectories d = mps_directories("/run/gpupool", kUuid, {kUuid});
  EXPECT_EQ(mps_client_environment(d, 20480, std::nullopt),
            (std::vector<std::string>{"CUDA_MPS_PIPE_DIRECTORY=" + d.pipe, "CUDA_MPS_LOG_DIRECTORY=" + d.log,
                                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M"}));
}

TEST(Mps, AComputeShareIsTheClientsActiveThreadPercentage) {
  MpsDirectories d = mps_directories("/run/gpupool", kUuid, {kUuid});
  EXPECT_EQ(mps_client_environment(d, 4096, 25).back(), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25");
}

TEST(Mps, TheServerListIsOnePidALine) {
  EXPECT_EQ(parse_mps_pids("").value(), std::vector<uint32_t>{});
  EXPECT_EQ(parse_mps_pids("2597\n").value(), std::vector<uint32_t>{2597});
  EXPECT_EQ(parse_mps_pids("2597\r\n 3100 \n\n").value(), (std::vector<uint32_t>{2597, 3100}));
}

TEST(Mps, AServerListWithSomethingElseIsAnError) {
  for (const char* text : {"Cannot find MPS control daemon process\n", "12a\n", "0\n", "-5\n", "99999999999\n"}) {
    auto parsed = parse_mps_pids(text);
    ASSERT_FALSE(parsed) << text;
    EXPECT_NE(parsed.error().message.find("not a process id"), std::string::npos);
  }
}

TEST(Mps, AControlStopsOnceNoSliceRunsOnItsGpu) {
  EXPECT_EQ(unneeded_mps_controls({"GPU-a", "GPU-b", "GPU-c"}, {"GPU-b"}),
            (std::vector<std::string>{"GPU-a", "GPU-c"}));
  EXPECT_EQ(unneeded_mps_controls({"GPU-a"}, {"GPU-a", "GPU-d"}), std::vector<std::string>{})
      << "a GPU in use without a control is the starter's business";
}

TEST(Mps, AnMpsJobWithAProcessOutsideMpsIsStoppedOnce) {
  std::map<uint64_t, SliceUse> worst = {{1, SliceUse{1, 0, 500, 20480, 4242}},   // outside MPS
                                        {2, SliceUse{2, 0, 500, 20480, 0}},      // all clients
                                        {3, SliceUse{3, 1, 500, 20480, 77}},     // not an MPS job
                                        {4, SliceUse{4, 1, 500, 20480, 88}}};    // told to end already
  auto is_mps_job = [](uint64_t job) { return job != 3; };
  auto told_to_end = [](uint64_t job) { return job == 4; };
  EXPECT_EQ(jobs_outside_mps(worst, is_mps_job, told_to_end), std::vector<uint64_t>{1});
  EXPECT_EQ(outside_mps_text(4242, 0),
            "its process 4242 used GPU 0 outside MPS, where its slice's memory limit does not hold");
}

TEST(Mps, TheOneUserRuleIsSaidInWords) {
  EXPECT_EQ(mps_one_user_text(2, "alice"),
            "GPU 2's MPS server serves alice's slices: MPS serves one user at a time on a GPU");
}

// A server.log of a real fault: on an H100 machine (driver 580.159.04), two clients running
// matrix products (pids 485, 486) and one writing through a bad pointer (487), under one server
// (scripts/device/probe-mps-fault.py).
TEST(MpsFaults, TheServerLogNamesTheCulpritAndEveryClientTornDown) {
  std::ifstream file(GPUPOOL_TEST_DATA_DIR "/mps/server-fatal-fault-h100-driver-580.log");
  ASSERT_TRUE(file) << "the recorded server.log";
  std::stringstream log;
  log << file.rdbuf();
  EXPECT_EQ(parse_mps_faults(log.str()), (std::vector<MpsFault>{{487u, {487u, 486u, 485u}}}));
}

TEST(MpsFaults, LinesAreReadAsTheyComeAndOddOnesSkipped) {
  EXPECT_TRUE(parse_mps_faults("").empty());
  EXPECT_TRUE(parse_mps_faults("[2026-12-06 09:28:32.049 Server   489] Client {PID: 485, Context ID: 0} connected\n").empty());
  // Without the culprit's line (an older server), and two faults one after the other.
  std::string two =
      "[t Server 9] Server is handling a fatal GPU error.\n"
      "[t Server 9] The following client process have a sticky error set:\n"
      "[t Server 9] 12\n[t Server 9] 13\n"
      "[t Server 9] Client {PID: 12, Context ID: 1} exiting.\n"
      "[t Server 9] Client {PID: 14, Context: 1} encountered a fatal GPU error.\n"
      "[t Server 9] Server is handling a fatal GPU error.\n"
      "[t Server 9] The following client process have a sticky error set:\r\n"
      "[t Server 9] 14\r\n";
  EXPECT_EQ(parse_mps_faults(two), (std::vector<MpsFault>{{std::nullopt, {12u, 13u}}, {14u, {14u}}}));
  // A pid list that is not one: "0", a name, a number too large.
  EXPECT_EQ(parse_mps_faults("[t Server 9] Client {PID: x1, Context: 1} encountered a fatal GPU error.\n"),
            std::vector<MpsFault>{});
  EXPECT_EQ(parse_mps_faults("[t Server 9] Server is handling a fatal GPU error.\n"
                             "[t Server 9] The following client process have a sticky error set:\n"
                             "[t Server 9] 0\n[t Server 9] 99999999999\n"),
            (std::vector<MpsFault>{{std::nullopt, {}}}));
}

TEST(MpsFaults, TheCulpritsJobIsToldApartFromTheOthers) {
  std::map<uint32_t, JobId> clients = {{485, 11}, {486, 12}, {487, 13}, {490, 13}};
  EXPECT_EQ(mps_fault_reasons({MpsFault{487u, {487u, 486u, 485u, 999u}}}, clients),
            (std::map<JobId, std::string>{
                {11, "ended by a fault in job 13 on the same GPU"},
                {12, "ended by a fault in job 13 on the same GPU"},
                {13, "a fatal GPU fault in its process 487 ended every MPS client on its GPU"}}));
  EXPECT_EQ(mps_fault_reasons({MpsFault{999u, {999u, 485u}}}, clients),
            (std::map<JobId, std::string>{{11, "ended by a fault in process 999, of no gpupool job, on the same GPU"}}));
  EXPECT_EQ(mps_fault_reasons({MpsFault{std::nullopt, {486u}}}, clients),
            (std::map<JobId, std::string>{{12, "ended by a fatal GPU fault on its GPU's MPS server"}}));
  EXPECT_TRUE(mps_fault_reasons({}, clients).empty());
}

}  // namespace
}  // namespace gpupool
