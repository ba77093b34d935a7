#include "cli/daemon_client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lease/lease_directory.h"

namespace gpupool::cli {

std::string runtime_directory() { return LeaseDirectory::default_path(); }

DaemonClient::DaemonClient(int fd) : fd_(fd), reader_(std::make_unique<LineReader>(fd, protocol::kMaxMessageBytes)) {}

DaemonClient::DaemonClient(DaemonClient&& other) noexcept : fd_(other.fd_), reader_(std::move(other.reader_)) {
  other.fd_ = -1;
}

DaemonClient::~DaemonClient() {
  reader_.reset();
  if (fd_ >= 0) ::close(fd_);
}

Result<std::optional<DaemonClient>> DaemonClient::connect_if_running(const std::string& runtime_dir) {
  std::string path = protocol::socket_path(runtime_dir);
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return std::optional<DaemonClient>();
  // The runtime directory is world-writable: anyone could leave a socket there and collect
  // what clients send (their environment). Only root's or our own is the daemon.
  if (!S_ISSOCK(st.st_mode) || (st.st_uid != 0 && st.st_uid != getuid())) {
    return fail("{} belongs to uid {}, not to root or you: not trusting it as gpupoold", path, st.st_uid);
  }
  auto fd = connect_unix_socket(path);
  if (!fd) return std::optional<DaemonClient>();  // a socket left behind by a daemon that died
  DaemonClient client(*fd);
  protocol::Hello hello{protocol::kVersion, std::string("gpupool ") + GPUPOOL_VERSION, ""};
  TRY(send_line(client.fd_, protocol::encode(hello)));
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
    const char* start = LeaseDirectory::slurm_job_directory() ? "gpupool slurm start" : "gpupoold";
    return fail("no gpupoold is running (no socket at {}); start one with `{}`", protocol::socket_path(runtime_dir),
                start);
  }
  return std::move(*client);
}

Result<void> DaemonClient::send(const protocol::Request& request) {
  return send_line(fd_, protocol::encode(request));
}

Result<ReceivedResponse> DaemonClient::receive() {
  TRY_ASSIGN(auto line, reader_->read_line());
  if (!line) return fail("gpupoold closed the connection");
  auto response = protocol::parse_response(line->line);
  if (!response) {
    for (int fd : line->descriptors) ::close(fd);
    return response.error();
  }
  if (auto* error = std::get_if<protocol::ErrorResponse>(&*response)) {
    for (int fd : line->descriptors) ::close(fd);
    return Error{error->message};
  }
  return ReceivedResponse{std::move(*response), std::move(line->descriptors)};
}

Result<protocol::Response> DaemonClient::request(const protocol::Request& request) {
  TRY(send(request));
  TRY_ASSIGN(ReceivedResponse received, receive());
  for (int fd : received.descriptors) ::close(fd);
  return std::move(received.response);
}

}  // namespace gpupool::cli
