#include "daemon/session.h"

#include <fcntl.h>

#include <algorithm>

#include <fmt/format.h>

#include "os/accounts.h"
#include "os/file_lock.h"
#include "os/files.h"
#include "os/process.h"

namespace gpupool {
namespace {

using asio::local::stream_protocol;
namespace proto = protocol;

// Connections one user (root aside) may hold open: each `run`, `launch`, `wait` or Python
// acquire() holds one while it waits. Without a cap, one user could take every descriptor the
// daemon has (then it cannot start jobs) and up to a message's worth of memory per connection.
constexpr unsigned kMaxConnectionsPerUser = 512;

// Asio opens its sockets inheritable; a supervisor must not carry the daemon's sockets.
void keep_from_children(int fd) { (void)set_inherited_by_exec(fd, false); }

}  // namespace

Sessions::Sessions(asio::io_context& io) : acceptor_(io) {}

Result<void> Sessions::listen(const std::string& state_dir, const std::string& runtime_dir) {
  // One daemon per state directory: the lock lives as long as this process.
  std::string lock_path = state_dir + "/gpupoold.lock";
  TRY_ASSIGN(Fd lock, open_file(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600));
  if (!try_lock_file(lock.get(), LockMode::exclusive)) {
    return fail("another gpupoold is running with state directory {}", state_dir);
  }
  instance_lock_ = lock.release();  // never closed
  socket_path_ = proto::socket_path(runtime_dir);
  if (auto existing = link_status(socket_path_)) {
    // Left by a daemon that died, unless someone else planted it there.
    if (existing->owner != effective_user_id()) {
      return fail("{} belongs to uid {}: remove it, it is not this daemon's", socket_path_, existing->owner);
    }
    if (auto fd = connect_unix_socket(socket_path_)) {
      close_descriptors({*fd});
      return fail("another gpupoold is listening on {}", socket_path_);
    }
    (void)remove_file(socket_path_);
  }
  return bind_socket();
}

Result<void> Sessions::bind_socket() {
  asio::error_code error;
  acceptor_.open(stream_protocol(), error);
  if (!error) acceptor_.bind(stream_protocol::endpoint(socket_path_), error);
  socket_bound_ = !error;
  if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
  if (error) return fail("cannot listen on {}: {}", socket_path_, error.message());
  keep_from_children(acceptor_.native_handle());
  // A system daemon serves everyone (identity comes from the kernel, not the socket's mode);
  // a personal daemon only its own user.
  return change_mode(socket_path_, effective_user_id() == 0 ? 0666 : 0600);
}

bool Sessions::socket_in_place() const {
  auto status = link_status(socket_path_);
  return status && status->type == FileType::socket;
}

Result<void> Sessions::listen_again() {
  asio::error_code ignored;
  acceptor_.close(ignored);  // its pending accept ends, aborted
  socket_bound_ = false;
  TRY(bind_socket());
  accept_next();
  return {};
}

void Sessions::stop_listening() {
  asio::error_code ignored;  // also from the destructor, which must not throw
  acceptor_.close(ignored);
  if (socket_bound_) (void)remove_file(socket_path_);
  socket_bound_ = false;
}

void Sessions::serve(std::optional<gid_t> admin_gid, RequestHandler requests, DisconnectHandler disconnected) {
  admin_gid_ = admin_gid;
  requests_ = std::move(requests);
  disconnected_ = std::move(disconnected);
  accept_next();
}

void Sessions::accept_next() {
  acceptor_.async_accept([this](const asio::error_code& error, stream_protocol::socket socket) {
    if (error) {
      if (error != asio::error::operation_aborted) accept_next();
      return;
    }
    keep_from_children(socket.native_handle());
    auto session = std::make_shared<Session>(std::move(socket));
    auto peer = peer_credentials(session->socket.native_handle());
    if (peer) {
      session->peer = *peer;
      session->owner.uid = peer->uid;
      session->owner.gid = peer->gid;
      session->owner.user = user_name(peer->uid);
      // The groups the kernel recorded at connect(), never /proc/<pid>: the pid may already
      // belong to another process by the time the connection is accepted.
      session->owner.groups = peer->groups ? *peer->groups : database_groups(session->owner.user, peer->gid);
      session->admin = peer->uid == 0 || (admin_gid_ && (peer->gid == *admin_gid_ ||
                                                         std::find(session->owner.groups.begin(),
                                                                   session->owner.groups.end(),
                                                                   *admin_gid_) != session->owner.groups.end()));
      if (peer->uid != 0 && (*connections_)[peer->uid] >= kMaxConnectionsPerUser) {
        send_and_close(session, proto::ErrorResponse{fmt::format("user {} already has {} connections open to gpupoold",
                                                                 session->owner.user, kMaxConnectionsPerUser)});
      } else {
        if (peer->uid != 0) {
          ++(*connections_)[peer->uid];
          session->connections = connections_;
        }
        read_request(session);
      }
    }
    accept_next();
  });
}

void Sessions::read_request(const SessionPtr& session) {
  asio::async_read_until(session->socket, session->input, '\n',
                         [this, session](const asio::error_code& error, size_t length) {
                           if (error) {
                             if (error == asio::error::not_found) {
                               send_and_close(session, proto::ErrorResponse{fmt::format(
                                                           "bad request: longer than {} bytes", proto::kMaxMessageBytes)});
                             }
                             hang_up(session);
                             disconnected_(session);
                             return;
                           }
                           std::string line(asio::buffers_begin(session->input.data()),
                                            asio::buffers_begin(session->input.data()) +
                                                static_cast<std::ptrdiff_t>(length - 1));
                           session->input.consume(length);
                           handle_line(session, line);
                           if (!session->closing) read_request(session);
                         });
}

void Sessions::handle_line(const SessionPtr& session, const std::string& line) {
  if (!session->greeted) {
    auto hello = proto::parse_hello(line);
    if (!hello) {
      send_and_close(session, proto::ErrorResponse{hello.error().message});
    } else if (hello->protocol < proto::kOldestVersion || hello->protocol > proto::kVersion) {
      send_and_close(session, proto::ErrorResponse{fmt::format("protocol {} is not supported: this gpupoold speaks {} to {}",
                                                               hello->protocol, proto::kOldestVersion, proto::kVersion)});
    } else {
      session->greeted = true;
      session->protocol = hello->protocol;
      std::string reply = proto::encode(
          proto::Hello{hello->protocol, std::string("gpupoold ") + GPUPOOL_VERSION, session->owner.user});
      session->outbox.push_back({std::move(reply), {}});
      flush(session);
    }
    return;
  }
  auto request = proto::parse_request(line);
  if (!request) {
    // Refused, not hung up on: the line ended where it should, so the next one can be read, and
    // a client (a script's long-lived Client) keeps its connection after one bad request. A line
    // over the size limit, which breaks the framing, never gets here.
    session->outbox.push_back({proto::encode(proto::ErrorResponse{request.error().message}), {}});
    flush(session);
    return;
  }
  requests_(session, *request);
}

void Sessions::send(const SessionPtr& session, const proto::Response& response, std::vector<int> descriptors) {
  session->outbox.push_back({proto::encode(response), std::move(descriptors)});
  flush(session);
}

void Sessions::send_and_close(const SessionPtr& session, const proto::Response& response) {
  session->outbox.push_back({proto::encode(response), {}});
  session->closing = true;
  flush(session);
}

void Sessions::flush(const SessionPtr& session) {
  if (session->writing) return;
  while (!session->outbox.empty() && !session->outbox.front().descriptors.empty()) {
    // Descriptors go with sendmsg; the line is short and the client is waiting for it.
    Session::Outgoing& out = session->outbox.front();
    auto sent = send_line(session->socket.native_handle(), out.line, out.descriptors);
    close_descriptors(out.descriptors);
    session->outbox.pop_front();
    if (!sent) {
      hang_up(session);
      return;
    }
  }
  if (session->outbox.empty()) {
    if (session->closing) hang_up(session);
    return;
  }
  session->writing = true;
  session->outbox.front().line += '\n';
  asio::async_write(session->socket, asio::buffer(session->outbox.front().line),
                    [this, session](const asio::error_code& error, size_t) {
                      session->writing = false;
                      session->outbox.pop_front();
                      if (error) {
                        hang_up(session);
                        return;
                      }
                      flush(session);
                    });
}

void Sessions::hang_up(const SessionPtr& session) {
  for (auto& out : session->outbox) close_descriptors(out.descriptors);
  // A line being written stays until its handler pops it: the write reads from it. (Clearing it
  // too crashed the daemon on a client's oversized line, whose error reply is then in flight.)
  session->outbox.erase(session->outbox.begin() + (session->writing ? 1 : 0), session->outbox.end());
  asio::error_code ignored;
  session->socket.shutdown(asio::socket_base::shutdown_both, ignored);
  session->socket.close(ignored);
}

}  // namespace gpupool
