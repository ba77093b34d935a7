#include "cli/daemon_client.h"

#include <thread>

#include "base/duration.h"
#include "os/environment.h"
#include "os/files.h"
#include "os/paths.h"
#include "os/process.h"

namespace gpupool::cli {

std::string runtime_directory() { return default_runtime_dir(); }

DaemonClient::DaemonClient(Fd fd)
    : fd_(std::move(fd)), reader_(std::make_unique<LineReader>(fd_.get(), protocol::kMaxMessageBytes)) {}

namespace {

// The runtime directory is world-writable: anyone could leave a socket there and collect what
// clients send (their environment). Only root's or our own is the daemon.
bool trusted_socket(const FileStatus& status) {
  return status.type == FileType::socket && (status.owner == 0 || status.owner == real_user_id());
}

}  // namespace

Result<std::optional<DaemonClient>> DaemonClient::connect_if_running(const std::string& runtime_dir) {
  std::string path = protocol::socket_path(runtime_dir);
  auto status = link_status(path);
  if (!status) return std::optional<DaemonClient>();
  if (!trusted_socket(*status)) {
    return fail("{} belongs to uid {}, not to root or you: not trusting it as gpupoold", path, status->owner);
  }
  auto fd = connect_unix_socket(path);
  if (!fd) return std::optional<DaemonClient>();  // a socket left behind by a daemon that died
  DaemonClient client{Fd(*fd)};
  protocol::Hello hello{protocol::kVersion, std::string("gpupool ") + GPUPOOL_VERSION, ""};
  TRY(send_line(client.fd_.get(), protocol::encode(hello)));
  TRY_ASSIGN(auto reply, client.reader_->read_line());
  if (!reply) return fail("gpupoold closed the connection during the greeting");
  auto greeted = protocol::parse_hello(reply->line);
  if (!greeted) {
    // The daemon explains in an error message (e.g. it speaks another protocol version).
    auto response = protocol::parse_response(reply->line);
    if (response) {
      if (auto* error = std::get_if<protocol::ErrorResponse>(&*response)) return fail("gpupoold: {}", error->message);
    }
    return greeted.error();
  }
  return std::optional<DaemonClient>(std::move(client));
}

Result<DaemonClient> DaemonClient::connect(const std::string& runtime_dir) {
  TRY_ASSIGN(auto client, connect_if_running(runtime_dir));
  if (!client) {
    // Inside a Slurm job the job's own daemon is the one looked for.
    const char* start = slurm_job_directory() ? "gpupool slurm start" : "gpupoold";
    return fail("no gpupoold is running (no socket at {}); start one with `{}`", protocol::socket_path(runtime_dir),
                start);
  }
  return std::move(*client);
}

Result<void> DaemonClient::send(const protocol::Request& request) {
  auto sent = send_line(fd_.get(), protocol::encode(request));
  if (!sent) lost_ = true;
  return sent;
}

Result<ReceivedResponse> DaemonClient::receive() {
  auto read = reader_->read_line();
  if (!read || !*read) lost_ = true;
  TRY_ASSIGN(auto line, std::move(read));
  if (!line) return fail("gpupoold closed the connection");
  auto response = protocol::parse_response(line->line);
  if (!response) return response.error();
  if (auto* error = std::get_if<protocol::ErrorResponse>(&*response)) return Error{error->message};
  return ReceivedResponse{std::move(*response), std::move(line->descriptors)};
}

Result<protocol::Response> DaemonClient::request(const protocol::Request& request) {
  TRY(send(request));
  TRY_ASSIGN(ReceivedResponse received, receive());
  return std::move(received.response);
}

ReconnectingClient::ReconnectingClient(std::string runtime_dir, std::optional<DaemonClient> client,
                                       std::chrono::milliseconds comeback)
    : runtime_dir_(std::move(runtime_dir)), comeback_(comeback) {
  if (client) client_.emplace(std::move(*client));
}

Result<ReconnectingClient> ReconnectingClient::connect(const std::string& runtime_dir) {
  std::chrono::milliseconds comeback = kDaemonComeback;
  if (auto configured = environment_variable("GPUPOOL_RECONNECT_S")) {
    auto seconds = parse_duration_s(*configured);
    if (!seconds) return fail("GPUPOOL_RECONNECT_S: {}", seconds.error().message);
    comeback = std::chrono::milliseconds(static_cast<int64_t>(*seconds * 1000));
  }
  auto client = DaemonClient::connect_if_running(runtime_dir);
  if (client && *client) return ReconnectingClient(runtime_dir, std::move(**client), comeback);
  auto status = link_status(protocol::socket_path(runtime_dir));
  if (!status && client) {
    TRY_ASSIGN(DaemonClient started_since, DaemonClient::connect(runtime_dir));  // the "no daemon" line
    return ReconnectingClient(runtime_dir, std::move(started_since), comeback);
  }
  // A socket nobody should trust is an answer at once. One that did not answer, or a greeting
  // broken off (even where the daemon has removed its socket since, as a stopping one does), is
  // a daemon going away or coming back (a restart): the first request waits for it as for one
  // lost later.
  if (status && !client && !trusted_socket(*status)) return client.error();
  return ReconnectingClient(runtime_dir, std::nullopt, comeback);
}

Result<void> ReconnectingClient::reconnect() {
  // Asked again every tenth of a second: a restart takes about that long.
  auto give_up = std::chrono::steady_clock::now() + comeback_;
  for (;;) {
    auto back = DaemonClient::connect_if_running(runtime_dir_);
    if (back && *back) {
      client_.emplace(std::move(**back));
      sent_ = false;
      return {};
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      return fail("lost gpupoold, and none answered on {} within {} s{}", protocol::socket_path(runtime_dir_),
                  std::chrono::duration<double>(comeback_).count(), back ? "" : ": " + back.error().message);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Result<void> ReconnectingClient::start(const protocol::Request& request) {
  if (pending_ && sent_) client_.reset();  // its answer would come first
  pending_ = request;
  sent_ = false;
  return {};
}

Result<std::optional<ReceivedResponse>> ReconnectingClient::answer(std::optional<Deadline> deadline) {
  if (!pending_) return fail("no request to answer");
  for (;;) {
    if (!client_) TRY(reconnect());
    if (!sent_) {
      if (auto sent = client_->send(*pending_); !sent) {
        if (!client_->connection_lost()) return sent.error();
        client_.reset();
        continue;
      }
      sent_ = true;
    }
    if (!client_->has_message()) {
      std::optional<std::chrono::milliseconds> left;
      if (deadline) {
        left = std::chrono::ceil<std::chrono::milliseconds>(
            std::max(*deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration{}));
      }
      TRY_ASSIGN(std::vector<bool> ready, wait_until_ready({client_->descriptor()}, left));
      if (!ready[0]) return std::optional<ReceivedResponse>();
    }
    auto received = client_->receive();
    if (received) {
      pending_.reset();
      return std::optional(std::move(*received));
    }
    if (!client_->connection_lost()) {
      pending_.reset();  // the daemon refused it: answered
      return received.error();
    }
    client_.reset();
  }
}

Result<std::optional<ReceivedResponse>> ReconnectingClient::request(const protocol::Request& request,
                                                                    std::optional<Deadline> deadline) {
  TRY(start(request));
  return answer(deadline);
}

Result<std::vector<Job>> ReconnectingClient::jobs(const protocol::Request& request) {
  TRY_ASSIGN(auto received, this->request(request));
  if (!received) return fail("no answer from gpupoold");  // no deadline was given: not reached
  TRY_ASSIGN(protocol::JobsResponse page, expect<protocol::JobsResponse>(std::move(received->response)));
  return std::move(page.jobs);
}

}  // namespace gpupool::cli
