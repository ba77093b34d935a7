// The client side of the daemon's protocol: connect (checking that the socket really is the
// daemon's), greet, and exchange messages. Used by every queue command and by `run` /
// `launch` when a daemon is running.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "os/fd.h"
#include "os/unix_socket.h"
#include "protocol/messages.h"

namespace gpupool::cli {

struct ReceivedResponse {
  protocol::Response response;
  std::vector<Fd> descriptors;
};

class DaemonClient {
 public:
  // nullopt when no daemon listens on the runtime directory's socket.
  static Result<std::optional<DaemonClient>> connect_if_running(const std::string& runtime_dir);
  // An error saying how to start one when none listens.
  static Result<DaemonClient> connect(const std::string& runtime_dir);
  DaemonClient(DaemonClient&& other) noexcept = default;
  DaemonClient& operator=(DaemonClient&&) = delete;
  DaemonClient(const DaemonClient&) = delete;

  Result<void> send(const protocol::Request& request);
  // The next message; an ErrorResponse becomes an Error with the daemon's words.
  Result<ReceivedResponse> receive();
  // send + receive, for the one-answer requests.
  Result<protocol::Response> request(const protocol::Request& request);
  int descriptor() const { return fd_.get(); }
  // receive() has a message without reading the socket (poll the descriptor only when not).
  bool has_message() const { return reader_->has_line(); }

 private:
  explicit DaemonClient(Fd fd);
  Fd fd_;
  std::unique_ptr<LineReader> reader_;  // reads fd_: declared after it, so it goes first
};

// The runtime directory of this machine's daemon and leases.
std::string runtime_directory();

// The response's alternative, or an error naming what came instead.
template <typename T>
Result<T> expect(protocol::Response response) {
  if (auto* value = std::get_if<T>(&response)) return std::move(*value);
  return fail("the daemon sent an unexpected answer: {}", protocol::encode(response));
}

}  // namespace gpupool::cli
