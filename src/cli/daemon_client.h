// The client side of the daemon's protocol: connect (checking that the socket really is the
// daemon's), greet, and exchange messages. Used by every queue command and by `run` /
// `launch` when a daemon is running.
#pragma once

#include <chrono>
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
  // The connection broke or the daemon closed it (it stopped, or restarts), as opposed to the
  // daemon refusing a request: what failed may be asked again of the next daemon.
  bool connection_lost() const { return lost_; }

 private:
  explicit DaemonClient(Fd fd);
  Fd fd_;
  bool lost_ = false;
  std::unique_ptr<LineReader> reader_;  // reads fd_: declared after it, so it goes first
};

using Deadline = std::chrono::steady_clock::time_point;

// How long a client that lost its daemon waits for the next one (a restart, an upgrade) before
// giving up; GPUPOOL_RECONNECT_S sets another time (0: give up at once).
constexpr std::chrono::seconds kDaemonComeback(60);

// A connection that outlives the daemon's restarts: a request whose connection is lost on the way
// is sent again once a daemon answers on the socket again (within kDaemonComeback). Only for
// requests that may be sent twice: queries and waits, never a submission.
class ReconnectingClient {
 public:
  static Result<ReconnectingClient> connect(const std::string& runtime_dir);

  // The answer to `request`; nullopt when `deadline` passed before it came (answer() may still
  // collect it).
  Result<std::optional<ReceivedResponse>> request(const protocol::Request& request,
                                                  std::optional<Deadline> deadline = std::nullopt);
  // The same in two steps, for a caller with other work while it waits (`logs -f`): start()
  // sends the request (on a new connection, should an earlier one's answer be outstanding), and
  // answer() waits for its answer until `deadline`, sending it again after a reconnect.
  Result<void> start(const protocol::Request& request);
  Result<std::optional<ReceivedResponse>> answer(std::optional<Deadline> deadline);
  // The answer, which must be a jobs answer: its jobs.
  Result<std::vector<Job>> jobs(const protocol::Request& request);

 private:
  ReconnectingClient(std::string runtime_dir, std::optional<DaemonClient> client, std::chrono::milliseconds comeback);
  Result<void> reconnect();

  std::string runtime_dir_;
  std::chrono::milliseconds comeback_;
  std::optional<DaemonClient> client_;  // none: lost, to be connected again
  std::optional<protocol::Request> pending_;  // sent or to be sent, its answer not yet received
  bool sent_ = false;                         // pending_ was sent on client_
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
