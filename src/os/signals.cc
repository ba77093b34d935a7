#include "os/signals.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace gpupool {
namespace {

sigset_t set_of(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : signals) sigaddset(&set, signal);
  return set;
}

}  // namespace

void block_signals(std::initializer_list<int> signals) {
  sigset_t set = set_of(signals);
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

Result<Fd> signal_descriptor(std::initializer_list<int> signals) {
  sigset_t set = set_of(signals);
  int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) return fail("cannot watch for signals: {}", std::strerror(errno));
  return Fd(fd);
}

std::optional<int> read_signal(int signal_fd) {
  signalfd_siginfo info{};
  if (read(signal_fd, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) return std::nullopt;
  return static_cast<int>(info.ssi_signo);
}

bool take_pending_signal(int signal) {
  sigset_t set = set_of({signal});
  timespec now{0, 0};
  return sigtimedwait(&set, nullptr, &now) == signal;
}

void set_signal_handler(std::initializer_list<int> signals, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  for (int signal : signals) sigaction(signal, &action, nullptr);
}

void reset_signal_dispositions() {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int signal = 1; signal < NSIG; ++signal) {
    if (signal != SIGKILL && signal != SIGSTOP) sigaction(signal, &default_action, nullptr);
  }
}

void unblock_all_signals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

void ignore_signals(std::initializer_list<int> signals) {
  for (int signal : signals) ::signal(signal, SIG_IGN);
}

AllSignalsBlocked::AllSignalsBlocked() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous_);
}

AllSignalsBlocked::~AllSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

}  // namespace gpupool
