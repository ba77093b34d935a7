#include "cli/daemon_client.h"

#include "os/files.h"
#include "os/paths.h"
#include "os/process.h"

namespace gpupool::cli {

std::string runtime_directory() { return default_runtime_dir(); }

DaemonClient::DaemonClient(Fd fd)
    : fd_(std::move(fd)), reader_(std::make_unique<LineReader>(fd_.get(), protocol::kMaxMessageBytes)) {}

Result<std::optional<DaemonClient>> DaemonClient::connect_if_running(const std::string& runtime_dir) {
  std::string path = protocol::socket_path(runtime_dir);
  auto status = link_status(path);
  if (!status) return std::optional<DaemonClient>();
  // The runtime directory is world-writable: anyone could leave a socket there and collect
  // what clients send (their environment). Only root's or our own is the daemon.
  if (status->type != FileType::socket || (status->owner != 0 && status->owner != real_user_id())) {
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
  return send_line(fd_.get(), protocol::encode(request));
}

Result<ReceivedResponse> DaemonClient::receive() {
  TRY_ASSIGN(auto line, reader_->read_line());
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

}  // namespace gpupool::cli
