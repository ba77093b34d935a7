#include "daemon/http_server.h"

#include <cstdlib>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "daemon/config.h"
#include "daemon/web_assets.h"
#include "monitor/monitor.h"
#include "os/clock.h"
#include "os/fd.h"
#include "os/network.h"

namespace gpupool {
namespace {

// A browser keeps its connections open between polls, each holding a thread until it closes:
// enough threads that open dashboards never make a scrape wait.
constexpr size_t kWorkerThreads = 8;
// Prometheus and the dashboard reuse one connection for every request.
constexpr size_t kKeepAliveRequests = 10000;
constexpr double kDefaultHistorySeconds = 3600;

}  // namespace

class HttpServer::Impl {
 public:
  explicit Impl(Monitor& monitor) : monitor_(monitor) {}

  Result<void> listen(const std::string& address) {
    auto parts = split_http_address(address);
    if (!parts) return fail("--http {}: expected HOST:PORT", address);
    server_.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
    // Without it a reply on a reused connection waits ~40 ms for the client's delayed ACK.
    server_.set_tcp_nodelay(true);
    server_.set_keep_alive_max_count(kKeepAliveRequests);
    // The daemon forks supervisors: no socket of this server may reach them.
    server_.set_socket_options([](socket_t fd) {
      (void)set_inherited_by_exec(fd, false);
      (void)allow_address_reuse(fd);
    });
    routes();
    // Port 0: the kernel picks a free one (tests run many daemons at once).
    int port = parts->second == 0 ? server_.bind_to_any_port(parts->first) : parts->second;
    if (port <= 0 || (parts->second != 0 && !server_.bind_to_port(parts->first, port))) {
      return fail("cannot listen for HTTP on {}: the address is in use or not this machine's", address);
    }
    address_ = fmt::format("{}:{}", parts->first, port);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    return {};
  }

  const std::string& address() const { return address_; }

  ~Impl() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void routes() {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(monitor_.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server_.Get("/api/gpus", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(monitor_.gpus_json(), "application/json");
    });
    server_.Get("/api/jobs", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(monitor_.jobs_json(), "application/json");
    });
    server_.Get("/api/history", [this](const httplib::Request& request, httplib::Response& response) {
      // ?since=UNIX_SECONDS (what a poller has not seen yet) or ?seconds=N back from now.
      double since = 0;
      if (request.has_param("since")) {
        since = std::strtod(request.get_param_value("since").c_str(), nullptr);
      } else {
        double seconds = kDefaultHistorySeconds;
        if (request.has_param("seconds")) seconds = std::strtod(request.get_param_value("seconds").c_str(), nullptr);
        since = unix_now() - seconds;
      }
      response.set_content(monitor_.history_json(since), "application/json");
    });
    for (const WebAsset& asset : web_assets()) {
      server_.Get(std::string(asset.path), [&asset](const httplib::Request&, httplib::Response& response) {
        response.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type));
        response.set_header("Cache-Control", "no-cache");
      });
    }
  }

  Monitor& monitor_;
  httplib::Server server_;
  std::string address_;
  std::thread thread_;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

const std::string& HttpServer::address() const { return impl_->address(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& address, Monitor& monitor) {
  auto impl = std::make_unique<Impl>(monitor);
  // cpp-httplib reports failures by exception at most (an allocation); none leave this function.
  try {
    TRY(impl->listen(address));
  } catch (const std::exception& error) {
    return fail("cannot start the HTTP server on {}: {}", address, error.what());
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace gpupool
