// Clients' connections to gpupoold: the listening socket (one daemon per state directory), who
// each peer is (SO_PEERCRED and its groups, never what its messages say), the greeting, request
// lines in and replies out, with descriptors where a reply carries them.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <asio.hpp>

#include "base/result.h"
#include "jobs/job.h"
#include "os/unix_socket.h"
#include "protocol/messages.h"

namespace gpupool {

// Open connections per user, root's not counted. Shared with the sessions, which count
// themselves out of it whenever they go, even after the daemon's other parts.
using ConnectionCounts = std::map<uid_t, unsigned>;

struct Session {
  explicit Session(asio::local::stream_protocol::socket s)
      : socket{std::move(s)}, input(protocol::kMaxMessageBytes) {}
  ~Session() {
    if (connections) --(*connections)[peer.uid];
  }
  std::shared_ptr<ConnectionCounts> connections;  // set when the connection is counted
  asio::local::stream_protocol::socket socket;
  asio::streambuf input;
  PeerCredentials peer;
  JobOwner owner;
  bool greeted = false;
  int protocol = protocol::kVersion;  // the client's, from its hello: the daemon answers in it
  bool admin = false;
  bool closing = false;
  std::optional<JobId> lease_job;  // an interactive job this connection waits for or holds
  bool stops_the_clock = false;    // its client stops its time limit while the job is suspended
  bool granted = false;
  std::string told_reason;  // why its lease waits, as last sent (a change is sent again)
  std::set<JobId> waiting_for;     // a `wait` in progress
  std::vector<JobId> wait_ids;
  struct Outgoing {
    std::string line;
    std::vector<int> descriptors;  // owned copies, closed once sent
  };
  std::deque<Outgoing> outbox;
  bool writing = false;
};
using SessionPtr = std::shared_ptr<Session>;

class Sessions {
 public:
  using RequestHandler = std::function<void(const SessionPtr&, const protocol::Request&)>;
  using DisconnectHandler = std::function<void(const SessionPtr&)>;

  explicit Sessions(asio::io_context& io);
  // A start-up step after listen() may fail: the socket must not outlive it, or clients would
  // be refused by a daemon that is not there instead of told that none runs.
  ~Sessions() { stop_listening(); }

  // Takes the state directory's one-daemon lock, then the socket in the runtime directory.
  Result<void> listen(const std::string& state_dir, const std::string& runtime_dir);
  void stop_listening();
  // Whether the socket is still in the runtime directory (someone may delete either).
  bool socket_in_place() const;
  // Binds the socket again, where it was deleted, and serves it.
  Result<void> listen_again();
  const std::string& socket_path() const { return socket_path_; }

  // Accepts clients from now on; each greeted client's requests go to `requests`, and its
  // going away to `disconnected`. Members of `admin_gid` (and root) are administrators.
  void serve(std::optional<gid_t> admin_gid, RequestHandler requests, DisconnectHandler disconnected);

  void send(const SessionPtr& session, const protocol::Response& response, std::vector<int> descriptors = {});

 private:
  void hang_up(const SessionPtr& session);
  void accept_next();
  Result<void> bind_socket();
  void read_request(const SessionPtr& session);
  void handle_line(const SessionPtr& session, const std::string& line);
  // Sends what is queued, then closes the connection if it is closing.
  void flush(const SessionPtr& session);
  void send_and_close(const SessionPtr& session, const protocol::Response& response);

  asio::local::stream_protocol::acceptor acceptor_;
  std::string socket_path_;
  bool socket_bound_ = false;  // socket_path_ is this daemon's, to remove when it stops
  int instance_lock_ = -1;
  std::optional<gid_t> admin_gid_;
  RequestHandler requests_;
  DisconnectHandler disconnected_;
  std::shared_ptr<ConnectionCounts> connections_ = std::make_shared<ConnectionCounts>();
};

}  // namespace gpupool
