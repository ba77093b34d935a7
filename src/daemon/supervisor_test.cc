#include "daemon/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "os/clock.h"

namespace gpupool {
namespace {

using std::chrono::steady_clock;
using ::testing::HasSubstr;
using ::testing::Not;

// How long to wait for what must happen; only a broken supervisor makes a test wait that long.
constexpr auto kPatience = std::chrono::seconds(20);
constexpr auto kPoll = std::chrono::milliseconds(5);

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-supervisor-test-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  SupervisedAttempt attempt(std::vector<std::string> argv, unsigned number = 1) {
    SupervisedAttempt a;
    a.id = 7;
    a.attempt = number;
    a.uid = getuid();
    a.gid = getgid();
    a.argv = std::move(argv);
    a.environment = {"PATH=/usr/bin:/bin"};
    a.cwd = dir_;
    a.stdout_path = dir_ + "/7.out";
    a.stderr_path = dir_ + "/7.err";
    a.kill_grace_s = 0.2;
    a.record_path = fmt::format("{}/7.{}", dir_, number);
    return a;
  }

  static Result<pid_t> hand_to_standby(const SupervisedAttempt& a, const std::vector<int>& leases) {
    TRY_ASSIGN(StandbySupervisor standby, StandbySupervisor::spawn(GPUPOOL_TEST_SUPERVISOR));
    TRY(standby.hand(a, leases));
    return standby.pid();
  }

  static pid_t start(const SupervisedAttempt& a, const std::vector<int>& leases = {}) {
    auto pid = hand_to_standby(a, leases);
    EXPECT_TRUE(pid.ok()) << pid.error().message;
    return pid.ok() ? *pid : -1;
  }

  // Waits for the supervisor (our child) to end; true when it exited 0, having recorded the end.
  static bool finished(pid_t supervisor) {
    if (supervisor <= 0) return false;
    const auto deadline = steady_clock::now() + kPatience;
    int status = 0;
    while (waitpid(supervisor, &status, WNOHANG) == 0) {
      if (steady_clock::now() > deadline) {
        kill(supervisor, SIGKILL);
        waitpid(supervisor, &status, 0);
        ADD_FAILURE() << "the supervisor did not finish";
        return false;
      }
      std::this_thread::sleep_for(kPoll);
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  static AttemptRecord record(const SupervisedAttempt& a) {
    auto read = read_attempt_record(a.record_path);
    EXPECT_TRUE(read.ok()) << read.error().message;
    return read.ok() ? *read : AttemptRecord{};
  }

  static AttemptRecord run(const SupervisedAttempt& a) {
    EXPECT_TRUE(finished(start(a)));
    return record(a);
  }

  // Waits until the job runs ("started" recorded, the supervisor still holding the record).
  static AttemptRecord running(const SupervisedAttempt& a) {
    const auto deadline = steady_clock::now() + kPatience;
    for (;;) {
      AttemptRecord now = record(a);
      if (now.job_pid || steady_clock::now() > deadline) return now;
      std::this_thread::sleep_for(kPoll);
    }
  }

  std::string dir_;
};

TEST_F(SupervisorTest, RecordsAJobThatSucceeds) {
  auto a = attempt({"sh", "-c", "exit 0"});
  pid_t supervisor = start(a);
  ASSERT_TRUE(finished(supervisor));
  AttemptRecord r = record(a);
  EXPECT_EQ(r.progress, AttemptProgress::Exited);
  EXPECT_EQ(r.supervisor_pid, supervisor);
  EXPECT_TRUE(r.job_pid.has_value());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, std::nullopt);
  EXPECT_EQ(r.reason, "");
  ASSERT_TRUE(r.start_time && r.end_time);
  EXPECT_LE(*r.start_time, *r.end_time);
}

TEST_F(SupervisorTest, RecordsTheExitCode) {
  AttemptRecord r = run(attempt({"sh", "-c", "exit 3"}));
  EXPECT_EQ(r.progress, AttemptProgress::Exited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.signal, std::nullopt);
}

TEST_F(SupervisorTest, RecordsTheSignalThatKilledTheJob) {
  AttemptRecord r = run(attempt({"sh", "-c", "kill -KILL $$"}));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.reason, "");
}

TEST_F(SupervisorTest, ACommandNotFoundOnThePathCouldNotStart) {
  AttemptRecord r = run(attempt({"gpupool-no-such-command", "x"}));
  EXPECT_EQ(r.progress, AttemptProgress::Exited);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.reason, "could not start: command not found: gpupool-no-such-command");
}

TEST_F(SupervisorTest, ACommandThatIsNotExecutableCouldNotStart) {
  std::string script = dir_ + "/script";
  write_text(script, "#!/bin/sh\n");
  chmod(script.c_str(), 0644);
  AttemptRecord r = run(attempt({script}));
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_EQ(r.reason, fmt::format("could not start: cannot run {}: Permission denied", script));
}

TEST_F(SupervisorTest, AMissingWorkingDirectoryCouldNotStart) {
  auto a = attempt({"true"});
  a.cwd = dir_ + "/missing";
  AttemptRecord r = run(a);
  EXPECT_EQ(r.progress, AttemptProgress::Exited);
  EXPECT_EQ(r.reason, fmt::format("could not start: cannot enter {}: No such file or directory", a.cwd));
  EXPECT_EQ(r.job_pid, std::nullopt) << "the job never got to run";
  EXPECT_EQ(r.exit_code, std::nullopt);
}

TEST_F(SupervisorTest, TheTimeLimitKillsAJobThatIgnoresSigterm) {
  auto a = attempt({"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"});
  a.time_limit_s = 0.3;
  AttemptRecord r = run(a);
  EXPECT_EQ(r.reason, "time limit");
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  ASSERT_TRUE(r.start_time && r.end_time);
  EXPECT_GE(*r.end_time - *r.start_time, 0.3 + 0.2 - 0.05) << "SIGKILL only after the grace period";
}

TEST_F(SupervisorTest, TheTimeLimitStopsAJobWithSigterm) {
  auto a = attempt({"sleep", "30"});
  a.time_limit_s = 0.3;
  AttemptRecord r = run(a);
  EXPECT_EQ(r.reason, "time limit");
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
}

// A suspended job's time does not count: the daemon stops the clock and starts it again.
TEST_F(SupervisorTest, TheTimeLimitsClockStopsWhileTheJobIsSuspended) {
  auto a = attempt({"sleep", "30"});
  a.time_limit_s = 2;
  pid_t supervisor = start(a);
  AttemptRecord began = running(a);
  ASSERT_TRUE(began.job_pid && began.start_time);
  ASSERT_TRUE(began.takes_the_clock);  // said in its record, so that the daemon may send it these
  ASSERT_EQ(kill(supervisor, kStopTheClock), 0);
  ASSERT_EQ(kill(supervisor, kStopTheClock), 0);  // twice is once
  const auto deadline = steady_clock::now() + kPatience;
  while (!record(a).clock_stopped && steady_clock::now() < deadline) std::this_thread::sleep_for(kPoll);
  ASSERT_TRUE(record(a).clock_stopped);
  // Past the limit, with the clock stopped: the job runs on.
  while (unix_now() < *began.start_time + 2.5) std::this_thread::sleep_for(kPoll);
  EXPECT_EQ(record(a).progress, AttemptProgress::Running);
  ASSERT_EQ(kill(supervisor, kStartTheClock), 0);
  ASSERT_TRUE(finished(supervisor));
  AttemptRecord r = record(a);
  EXPECT_FALSE(r.clock_stopped);
  EXPECT_EQ(r.reason, "time limit");
  ASSERT_TRUE(r.end_time);
  EXPECT_GE(*r.end_time - *began.start_time, 2.5);
}

TEST_F(SupervisorTest, CancellingStopsTheJobAndSaysSo) {
  auto a = attempt({"sleep", "30"});
  pid_t supervisor = start(a);
  AttemptRecord during = running(a);
  EXPECT_EQ(during.progress, AttemptProgress::Running);
  EXPECT_EQ(during.supervisor_pid, supervisor);
  EXPECT_TRUE(during.job_pid.has_value());
  ASSERT_TRUE(cancel_supervised(supervisor).ok());
  ASSERT_TRUE(finished(supervisor));
  AttemptRecord r = record(a);
  EXPECT_EQ(r.progress, AttemptProgress::Exited);
  EXPECT_EQ(r.reason, "cancelled");
  EXPECT_EQ(r.signal, SIGTERM);
}

TEST_F(SupervisorTest, ACancelAsSoonAsTheSupervisorStartsIsNotLost) {
  auto a = attempt({"sleep", "30"});
  pid_t supervisor = start(a);
  ASSERT_TRUE(cancel_supervised(supervisor).ok());
  ASSERT_TRUE(finished(supervisor));
  AttemptRecord r = record(a);
  EXPECT_EQ(r.progress, AttemptProgress::Exited);
  EXPECT_EQ(r.reason, "cancelled");
}

TEST_F(SupervisorTest, OutputIsAppendedToTheLogsAcrossAttempts) {
  EXPECT_EQ(run(attempt({"sh", "-c", "echo out1; echo err1 >&2"}, 1)).exit_code, 0);
  EXPECT_EQ(run(attempt({"sh", "-c", "echo out2; echo err2 >&2"}, 2)).exit_code, 0);
  EXPECT_EQ(read_text(dir_ + "/7.out"), "out1\nout2\n");
  EXPECT_EQ(read_text(dir_ + "/7.err"), "err1\nerr2\n");
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/7.out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(SupervisorTest, AFileLeftUnderALogsNameIsNeitherUsedNorHandedOver) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to start a job as another user";
  auto a = attempt({"sh", "-c", "echo mine"});
  a.uid = 65534;
  a.gid = 65534;
  a.cwd = "/";
  write_text(a.stdout_path, "root's words\n");  // as a reset state directory leaves it
  ASSERT_EQ(chmod(a.stdout_path.c_str(), 0640), 0);
  AttemptRecord r = run(a);
  EXPECT_EQ(r.exit_code, std::nullopt);
  EXPECT_THAT(r.reason, ::testing::HasSubstr("is not this job's log"));
  EXPECT_EQ(read_text(a.stdout_path), "root's words\n");
  struct stat st {};
  ASSERT_EQ(stat(a.stdout_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST(JobLogTest, OnlyARegularFileWithOneNameOwnedByTheJobsUserIsItsLog) {
  FileStatus log{FileType::regular, 0600, 1000, 1, 5};
  EXPECT_TRUE(check_job_log("/s/logs/7.out", log, 1000).ok());
  auto other_owner = check_job_log("/s/logs/7.out", log, 1001);
  ASSERT_FALSE(other_owner.ok());
  EXPECT_EQ(other_owner.error().message,
            "/s/logs/7.out is not this job's log (a regular file, owner uid 1000, link count 1; its log is a regular "
            "file with one name, owned by uid 1001): it is left as it is, an administrator should move it away");
  FileStatus linked = log;
  linked.links = 2;
  EXPECT_FALSE(check_job_log("/s/logs/7.out", linked, 1000).ok());
  FileStatus fifo = log;
  fifo.type = FileType::other;
  EXPECT_FALSE(check_job_log("/s/logs/7.out", fifo, 1000).ok());
}

TEST_F(SupervisorTest, OutputPastTheLimitIsDroppedWithOneLineAndTheJobRunsOn) {
  auto a = attempt({"sh", "-c", "printf 0123456789abcdef; head -c 1000000 /dev/zero; echo more >&2; exit 0"});
  a.output_limits.max_bytes = 10;
  EXPECT_EQ(run(a).exit_code, 0);  // a megabyte more than a pipe holds: never blocked
  const std::string cut =
      "gpupool: output cut at 10 bytes: the job reached its output limit (max_log_mb); the rest is dropped\n";
  EXPECT_EQ(read_text(dir_ + "/7.out"), "0123456789\n" + cut);
  EXPECT_EQ(read_text(dir_ + "/7.err"), cut);
  // The next attempt counts what the first wrote.
  EXPECT_EQ(run(attempt({"sh", "-c", "echo again"}, 2)).exit_code, 0);
  auto again = attempt({"sh", "-c", "echo again"}, 3);
  again.output_limits.max_bytes = 10;
  EXPECT_EQ(run(again).exit_code, 0);
  EXPECT_EQ(read_text(dir_ + "/7.out"), "0123456789\n" + cut + "again\n" + cut);
}

TEST_F(SupervisorTest, OutputIsDroppedWhileFreeSpaceIsUnderTheReserve) {
  auto a = attempt({"sh", "-c", "echo lost; echo lost too >&2"});
  a.output_limits.reserve_bytes = uint64_t{1} << 62;  // more than any file system has
  EXPECT_EQ(run(a).exit_code, 0);
  EXPECT_EQ(read_text(dir_ + "/7.out").rfind("gpupool: output dropped: the state filesystem is short of space (", 0),
            0u);
  EXPECT_EQ(read_text(dir_ + "/7.err").find("lost"), std::string::npos);
}

TEST_F(SupervisorTest, TheJobInheritsTheLeasesButNotTheRecord) {
  std::string lease_path = dir_ + "/lease-0";
  int lease = open(lease_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(lease, 0);
  auto a = attempt({"sh", "-c", "ls -l /proc/$$/fd"});
  EXPECT_TRUE(finished(start(a, {lease})));
  close(lease);
  EXPECT_EQ(record(a).exit_code, 0);
  std::string descriptors = read_text(a.stdout_path);
  EXPECT_THAT(descriptors, HasSubstr(lease_path));
  EXPECT_THAT(descriptors, Not(HasSubstr(a.record_path)));
}

TEST_F(SupervisorTest, AJobOutlivingItsSupervisorIsLost) {
  auto a = attempt({"sleep", "30"});
  pid_t supervisor = start(a);
  AttemptRecord during = running(a);
  ASSERT_TRUE(during.job_pid.has_value());
  kill(supervisor, SIGKILL);
  waitpid(supervisor, nullptr, 0);
  // The job does not hold the record, so the lock went with the supervisor.
  AttemptRecord r = record(a);
  killpg(*during.job_pid, SIGKILL);
  EXPECT_EQ(r.progress, AttemptProgress::Lost);
  EXPECT_EQ(r.reason, "supervisor lost");
  EXPECT_EQ(r.job_pid, during.job_pid);
}

TEST_F(SupervisorTest, AnAttemptIsStartedOnlyOnce) {
  auto a = attempt({"true"});
  pid_t supervisor = start(a);
  auto again = hand_to_standby(a, {});
  EXPECT_FALSE(again.ok());
  EXPECT_TRUE(finished(supervisor));
  EXPECT_EQ(record(a).exit_code, 0);
}

TEST_F(SupervisorTest, AStandbyWaitsForItsAttemptAndRecordsItsOwnPid) {
  auto a = attempt({"true"});
  auto standby = StandbySupervisor::spawn(GPUPOOL_TEST_SUPERVISOR);
  ASSERT_TRUE(standby.ok()) << standby.error().message;
  pid_t pid = standby->pid();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), 0) << "a standby must wait for its attempt";
  ASSERT_TRUE(standby->hand(a, {}).ok());
  EXPECT_FALSE(standby->hand(a, {}).ok()) << "one attempt per supervisor";
  EXPECT_TRUE(finished(pid));
  AttemptRecord r = record(a);
  EXPECT_EQ(r.supervisor_pid, pid);
  EXPECT_EQ(r.exit_code, 0);
}

TEST_F(SupervisorTest, AStandbyEndedWithoutAnAttemptLeavesNothing) {
  pid_t pid = -1;
  {
    auto standby = StandbySupervisor::spawn(GPUPOOL_TEST_SUPERVISOR);
    ASSERT_TRUE(standby.ok()) << standby.error().message;
    pid = standby->pid();
  }
  // Reaped by the destructor: the pid is no longer our child.
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(SupervisorTest, AStandbyThatDiedIsNotHandedTheAttempt) {
  auto a = attempt({"true"});
  auto standby = StandbySupervisor::spawn(GPUPOOL_TEST_SUPERVISOR);
  ASSERT_TRUE(standby.ok()) << standby.error().message;
  kill(standby->pid(), SIGKILL);
  siginfo_t info{};
  waitid(P_PID, static_cast<id_t>(standby->pid()), &info, WEXITED | WNOWAIT);
  auto handed = standby->hand(a, {});
  EXPECT_FALSE(handed.ok());
  EXPECT_FALSE(std::filesystem::exists(a.record_path)) << "the attempt can be started again";
}

TEST_F(SupervisorTest, RunsTheJobAsItsOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to start a job as another user";
  auto a = attempt({"sh", "-c", "id -u; id -g; id -G; umask"});
  a.uid = 65534;
  a.gid = 65534;
  a.groups = {65534};
  a.umask = 027;
  a.cwd = "/";
  AttemptRecord r = run(a);
  EXPECT_EQ(r.exit_code, 0) << r.reason;
  EXPECT_EQ(read_text(a.stdout_path), "65534\n65534\n65534\n0027\n");
  struct stat st {};
  ASSERT_EQ(stat(a.stdout_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
}

// The record on its own, written by hand: what a restarted daemon would find.
class AttemptRecordTest : public SupervisorTest {
 protected:
  std::string path() const { return dir_ + "/record"; }
  Result<AttemptRecord> read(const std::string& text) {
    write_text(path(), text);
    return read_attempt_record(path());
  }
};

constexpr const char* kSupervising = R"({"event":"supervising","supervisor_pid":100,"time":1.5})" "\n";
constexpr const char* kStarted = R"({"event":"started","job_pid":101,"pgid":101,"time":2.5})" "\n";
constexpr const char* kExited =
    R"({"event":"exited","exit_code":143,"signal":15,"reason":"cancelled","time":3.5})" "\n";

TEST_F(AttemptRecordTest, NoFileMeansNeverStarted) {
  auto r = read_attempt_record(path());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->progress, AttemptProgress::NeverStarted);
}

TEST_F(AttemptRecordTest, NoStartedMeansNeverStarted) {
  auto r = read(kSupervising);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->progress, AttemptProgress::NeverStarted);
  EXPECT_EQ(r->supervisor_pid, 100);
}

TEST_F(AttemptRecordTest, StartedWithoutItsSupervisorIsLost) {
  auto r = read(std::string(kSupervising) + kStarted);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->progress, AttemptProgress::Lost);
  EXPECT_EQ(r->job_pid, 101);
  EXPECT_EQ(r->start_time, 2.5);
}

TEST_F(AttemptRecordTest, ExitedIsReadInFull) {
  auto r = read(std::string(kSupervising) + kStarted + kExited);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->progress, AttemptProgress::Exited);
  EXPECT_EQ(r->exit_code, 143);
  EXPECT_EQ(r->signal, 15);
  EXPECT_EQ(r->reason, "cancelled");
  EXPECT_EQ(r->end_time, 3.5);
}

TEST_F(AttemptRecordTest, ASupervisorOfAnOlderReleaseTakesNoClockSignals) {
  auto older = read(std::string(kSupervising) + kStarted);
  ASSERT_TRUE(older.ok());
  EXPECT_FALSE(older->takes_the_clock);
  auto ours = read(std::string(R"({"event":"supervising","supervisor_pid":100,"time":1.5,"clock":true})") + "\n" +
                   kStarted);
  ASSERT_TRUE(ours.ok());
  EXPECT_TRUE(ours->takes_the_clock);
}

TEST_F(AttemptRecordTest, TheTimeTheClockStoodStillIsAddedUp) {
  auto clock = [](const char* event, double time) {
    return fmt::format(R"({{"event":"{}","time":{}}})", event, time) + "\n";
  };
  auto r = read(std::string(kSupervising) + kStarted + clock("clock_stopped", 10) + clock("clock_started", 25) +
                clock("clock_stopped", 30) + clock("clock_stopped", 31) + clock("clock_started", 40) +
                clock("clock_started", 41) + clock("clock_stopped", 50));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_DOUBLE_EQ(r->clock_stopped_s, 15 + 10);  // a word said twice counts once; the last spell is under way
  EXPECT_TRUE(r->clock_stopped);
}

TEST_F(AttemptRecordTest, ATornLastLineIsIgnored) {
  auto r = read(std::string(kSupervising) + kStarted + R"({"event":"exited","exit_co)");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->progress, AttemptProgress::Lost);
}

TEST_F(AttemptRecordTest, AGarbledWholeLineIsAnError) {
  auto r = read(std::string(kSupervising) + "garbage\n" + kStarted);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message, HasSubstr("line 2"));
}

TEST_F(AttemptRecordTest, ALockedRecordIsRunning) {
  write_text(path(), std::string(kSupervising) + kStarted);
  int fd = open(path().c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  ASSERT_EQ(fcntl(fd, F_OFD_SETLK, &lock), 0);
  auto r = read_attempt_record(path());
  close(fd);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->progress, AttemptProgress::Running);
  EXPECT_EQ(r->job_pid, 101);
}

}  // namespace
}  // namespace gpupool
