// gpupool-cuda-checkpoint: one step of the CUDA driver's checkpoint API on some processes, for
// `gpupool suspend` / `resume`. The daemon runs it as a child process so that a driver call that
// hangs is bounded by killing it, and so that the daemon never loads libcuda itself.
//
//   gpupool-cuda-checkpoint [--library PATH] [--lock-dir DIR] [--lock-timeout-ms N] STEP PID...
//
// With --lock-dir, it first takes an OFD write lock on DIR/PID for every PID, in order, waiting
// for each, and holds them until it exits: a call on a process waits for a call still under way
// on it, such as one whose daemon was killed while the helper went on (the daemon's unit stops
// its main process only).
//
// STEP: state, lock, checkpoint, restore or unlock, on each PID in order, stopping at the first
// that fails. One line per PID reached: "PID RESULT STATE SECONDS" (RESULT "ok" or the error's
// name; STATE the process's state after the call, or "unknown"). Exit status: 0 all done, 1 a
// step failed, 2 usage, 3 the driver has no checkpoint API, 4 libcuda unusable (cuInit fails), 5 a
// --lock-dir file cannot be locked.
// gpu/process_checkpoint.cc reads this back.
//
// Own declarations of the driver's entry points and structs (cuda.h, CUDA 12.8+), loaded with
// dlopen, so that it builds and runs where no CUDA toolkit is.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace {

using CuResult = int;

// CUcheckpointLockArgs.
struct LockArgs {
  unsigned int timeout_ms;  // 0: no timeout
  unsigned int reserved0;
  uint64_t reserved1[7];
};
static_assert(sizeof(LockArgs) == 64);

struct Driver {
  CuResult (*init)(unsigned) = nullptr;
  CuResult (*get_error_name)(CuResult, const char**) = nullptr;
  // The last argument is each call's optional args struct; only the lock's is ever passed.
  CuResult (*lock)(int, LockArgs*) = nullptr;
  CuResult (*checkpoint)(int, void*) = nullptr;
  CuResult (*restore)(int, void*) = nullptr;
  CuResult (*unlock)(int, void*) = nullptr;
  CuResult (*get_state)(int, int*) = nullptr;
};

enum ExitCode { kDone = 0, kStepFailed = 1, kUsage = 2, kNoCheckpointApi = 3, kNoDriver = 4, kNoLock = 5 };

constexpr const char* kSteps[] = {"state", "lock", "checkpoint", "restore", "unlock"};

int usage(const char* why) {
  std::fprintf(stderr,
               "gpupool-cuda-checkpoint: %s\n"
               "usage: gpupool-cuda-checkpoint [--library PATH] [--lock-dir DIR] [--lock-timeout-ms N] "
               "state|lock|checkpoint|restore|unlock PID...\n",
               why);
  return kUsage;
}

// A whole decimal number in [1, max]; 0 for anything else.
unsigned long parse_positive(const char* text, unsigned long max) {
  if (*text < '0' || *text > '9') return 0;
  char* end = nullptr;
  errno = 0;
  unsigned long value = std::strtoul(text, &end, 10);
  return *end != '\0' || errno != 0 || value > max ? 0 : value;
}

std::string error_name(const Driver& driver, CuResult result) {
  if (result == 0) return "ok";
  const char* name = nullptr;
  if (driver.get_error_name != nullptr && driver.get_error_name(result, &name) == 0 && name != nullptr) return name;
  return "CUDA_ERROR_" + std::to_string(result);
}

// CUprocessState's names; CHECKPOINTING and RESTORING are newer drivers' passing states.
std::string state_name(const Driver& driver, int pid) {
  constexpr const char* kNames[] = {"running", "locked", "checkpointed", "failed", "checkpointing", "restoring"};
  int state = -1;
  if (driver.get_state(pid, &state) != 0) return "unknown";
  if (state < 0 || state >= static_cast<int>(std::size(kNames))) return "state-" + std::to_string(state);
  return kNames[state];
}

// Whether `fd` is still the file at `path`: the daemon removes the files of ended processes
// (locked while it does), so a lock taken on a file since removed holds nobody back.
bool still_named(int fd, const std::string& path) {
  struct stat opened {}, named {};
  return fstat(fd, &opened) == 0 && lstat(path.c_str(), &named) == 0 && opened.st_dev == named.st_dev &&
         opened.st_ino == named.st_ino;
}

// Waits for, and takes, the lock of DIR/PID; false with a line on stderr when it cannot. The
// descriptor stays open (and locked) until the helper exits.
bool lock_process_file(const std::string& directory, int pid) {
  const std::string path = directory + "/" + std::to_string(pid);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  for (;;) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    while (fd >= 0 && fcntl(fd, F_OFD_SETLKW, &lock) != 0) {
      if (errno != EINTR) {
        close(fd);
        fd = -1;
      }
    }
    if (fd < 0) {
      std::fprintf(stderr, "gpupool-cuda-checkpoint: cannot lock %s: %s\n", path.c_str(), std::strerror(errno));
      return false;
    }
    if (still_named(fd, path)) return true;
    close(fd);  // removed while we waited: lock the file that has the name now
  }
}

template <typename Function>
bool bind(void* library, const char* name, Function& out) {
  out = reinterpret_cast<Function>(dlsym(library, name));
  return out != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::string library_path = "libcuda.so.1";
  std::string lock_directory;
  unsigned long lock_timeout_ms = 0;
  int at = 1;
  for (; at < argc && std::strncmp(argv[at], "--", 2) == 0; ++at) {
    if (std::strcmp(argv[at], "--") == 0) {
      ++at;
      break;
    }
    if (at + 1 >= argc) return usage("an option without its value");
    if (std::strcmp(argv[at], "--library") == 0) {
      library_path = argv[++at];
    } else if (std::strcmp(argv[at], "--lock-dir") == 0) {
      lock_directory = argv[++at];
    } else if (std::strcmp(argv[at], "--lock-timeout-ms") == 0) {
      const char* value = argv[++at];
      lock_timeout_ms = parse_positive(value, 0xffffffffUL);
      if (lock_timeout_ms == 0 && std::strcmp(value, "0") != 0) return usage("--lock-timeout-ms takes milliseconds");
    } else {
      return usage("unknown option");
    }
  }
  if (at >= argc) return usage("no step");
  const std::string step = argv[at++];
  if (std::find(std::begin(kSteps), std::end(kSteps), step) == std::end(kSteps)) return usage("unknown step");
  std::vector<int> pids;
  for (; at < argc; ++at) {
    unsigned long pid = parse_positive(argv[at], 0x7fffffffUL);
    if (pid == 0) return usage("a PID is a positive number");
    pids.push_back(static_cast<int>(pid));
  }
  if (pids.empty()) return usage("no PID");
  if (!lock_directory.empty()) {
    for (int pid : pids) {
      if (!lock_process_file(lock_directory, pid)) return kNoLock;
    }
  }

  void* library = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "gpupool-cuda-checkpoint: cannot load %s\n", dlerror());
    return kNoDriver;
  }
  Driver driver;
  if (!bind(library, "cuInit", driver.init)) {
    std::fprintf(stderr, "gpupool-cuda-checkpoint: %s has no cuInit: not a CUDA driver\n", library_path.c_str());
    return kNoDriver;
  }
  bind(library, "cuGetErrorName", driver.get_error_name);
  const char* missing =
      !bind(library, "cuCheckpointProcessLock", driver.lock)               ? "cuCheckpointProcessLock"
      : !bind(library, "cuCheckpointProcessCheckpoint", driver.checkpoint) ? "cuCheckpointProcessCheckpoint"
      : !bind(library, "cuCheckpointProcessRestore", driver.restore)       ? "cuCheckpointProcessRestore"
      : !bind(library, "cuCheckpointProcessUnlock", driver.unlock)         ? "cuCheckpointProcessUnlock"
      : !bind(library, "cuCheckpointProcessGetState", driver.get_state)    ? "cuCheckpointProcessGetState"
                                                                           : nullptr;
  if (missing != nullptr) {
    std::fprintf(stderr, "gpupool-cuda-checkpoint: %s has no %s: the CUDA checkpoint API needs driver 550 or newer\n",
                 library_path.c_str(), missing);
    return kNoCheckpointApi;
  }
  // The driver answers another process's checkpoint calls only once initialised in this one.
  if (CuResult result = driver.init(0); result != 0) {
    std::fprintf(stderr, "gpupool-cuda-checkpoint: cuInit failed: %s\n", error_name(driver, result).c_str());
    return kNoDriver;
  }

  for (int pid : pids) {
    auto began = std::chrono::steady_clock::now();
    CuResult result = 0;
    if (step == "lock") {
      LockArgs args{};
      args.timeout_ms = static_cast<unsigned int>(lock_timeout_ms);
      result = driver.lock(pid, &args);
    } else if (step == "checkpoint") {
      result = driver.checkpoint(pid, nullptr);
    } else if (step == "restore") {
      result = driver.restore(pid, nullptr);
    } else if (step == "unlock") {
      result = driver.unlock(pid, nullptr);
    } else {
      int state = 0;
      result = driver.get_state(pid, &state);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    // Each line as it comes, so that one cut short by a kill still says how far it got.
    std::printf("%d %s %s %.3f\n", pid, error_name(driver, result).c_str(), state_name(driver, pid).c_str(), seconds);
    std::fflush(stdout);
    if (result != 0) return kStepFailed;
  }
  return kDone;
}
