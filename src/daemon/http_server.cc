#include "daemon/http_server.h"

#include <charconv>
#include <cmath>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

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

// A query value that is not a number, or out of range, is refused: a poller that sent a typo
// would otherwise get an answer for a window it did not ask for.
Result<double> number_parameter(const httplib::Request& request, const char* name, double minimum) {
  const std::string& text = request.get_param_value(name);
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < minimum) {
    return fail("{} must be a number of seconds from {}, not '{}'", name, minimum, text);
  }
  return value;
}

// ?since=UNIX_SECONDS (what a poller has not seen yet) or ?seconds=N back from now.
Result<double> history_since(const httplib::Request& request) {
  if (request.has_param("since")) return number_parameter(request, "since", 0);
  if (!request.has_param("seconds")) return unix_now() - kDefaultHistorySeconds;
  TRY_ASSIGN(double seconds, number_parameter(request, "seconds", 0));
  return unix_now() - seconds;
}

void set_error(httplib::Response& response, int status, const std::string& message) {
  response.status = status;
  // A query may hold any bytes: ones that are not UTF-8 are replaced, not thrown over.
  std::string body = nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  response.set_content(body + "\n", "application/json");
}

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
  void get(const std::string& path, httplib::Server::Handler handler) {
    server_.Get(path, std::move(handler));
    paths_.insert(path);
  }

  void routes() {
    get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(monitor_.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
    });
    get("/api/gpus", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(monitor_.gpus_json(), "application/json");
    });
    get("/api/jobs", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(monitor_.jobs_json(), "application/json");
    });
    get("/api/history", [this](const httplib::Request& request, httplib::Response& response) {
      auto since = history_since(request);
      if (!since) return set_error(response, 400, since.error().message);
      response.set_content(monitor_.history_json(*since), "application/json");
    });
    for (const WebAsset& asset : web_assets()) {
      get(std::string(asset.path), [&asset](const httplib::Request&, httplib::Response& response) {
        response.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type));
        response.set_header("Cache-Control", "no-cache");
      });
    }
    // Everything is read-only: another method on a page that exists is 405, as HTTP says.
    auto other_method = [this](const httplib::Request& request, httplib::Response& response) {
      if (paths_.count(request.path) == 0) return set_error(response, 404, fmt::format("no page {}", request.path));
      response.set_header("Allow", "GET, HEAD");
      set_error(response, 405, fmt::format("{} is read-only: {} is not allowed", request.path, request.method));
    };
    server_.Post(".*", other_method);
    server_.Put(".*", other_method);
    server_.Patch(".*", other_method);
    server_.Delete(".*", other_method);
    // Errors say what went wrong in JSON, which every client of the API reads.
    server_.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
      if (!response.body.empty()) return;
      set_error(response, response.status,
                response.status == 404 ? fmt::format("no page {}", request.path)
                                          : fmt::format("the request could not be served (HTTP {})", response.status));
    });
  }

  Monitor& monitor_;
  httplib::Server server_;
  std::set<std::string> paths_;  // the pages served, written before the server starts
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
