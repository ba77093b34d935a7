#include "daemon/process_watch.h"

#include <chrono>

#include "os/fd.h"
#include "os/process.h"

namespace gpupool {
namespace {

// A pidfd polls readable once its process has ended.
bool pidfd_ended(int pidfd) {
  auto ready = wait_until_ready({pidfd}, std::chrono::milliseconds(0));
  return !ready || (*ready)[0];  // an error counts as ended: the job's end is then read from its record
}

}  // namespace

ProcessWatch::ProcessWatch(asio::io_context& io, std::function<void(JobId)> ended)
    : io_(io), ended_(std::move(ended)) {}

void ProcessWatch::watch(JobId id, pid_t pid) {
  auto fd = open_process_fd(pid);
  if (!fd) {
    asio::post(io_, [this, id] { ended_(id); });  // already gone
    return;
  }
  watchers_[id] = std::make_unique<asio::posix::stream_descriptor>(io_, fd->release());
  await(id);
}

void ProcessWatch::forget(JobId id) { watchers_.erase(id); }

void ProcessWatch::await(JobId id) {
  watchers_.at(id)->async_wait(asio::posix::stream_descriptor::wait_read, [this, id](const asio::error_code& error) {
    if (error == asio::error::operation_aborted) return;
    // A wake-up alone does not prove the exit: epoll can hand this watcher the event of a socket
    // closed while a just-forked child still held a copy of it (Asio reuses its per-descriptor
    // state), so the pidfd itself is asked.
    auto watcher = watchers_.find(id);
    if (watcher != watchers_.end() && !pidfd_ended(watcher->second->native_handle())) {
      await(id);
      return;
    }
    watchers_.erase(id);
    ended_(id);
  });
}

Result<void> ProcessWatch::watch_end_with(pid_t pid, std::function<void()> ended) {
  auto pidfd = open_process_fd(pid);
  if (!pidfd) return fail("--end-with {}: {}", pid, pidfd.error().message);
  end_with_.emplace(io_, pidfd->release());
  end_with_->async_wait(asio::posix::stream_descriptor::wait_read,
                        [ended = std::move(ended)](const asio::error_code& error) {
                          if (!error) ended();
                        });
  return {};
}

}  // namespace gpupool
