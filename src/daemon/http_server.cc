#include "daemon/http_server.h"

#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <asio.hpp>
#include <nlohmann/json.hpp>

#include "daemon/config.h"
#include "daemon/http_peer_limits.h"
#include "daemon/http_request.h"
#include "daemon/web_assets.h"
#include "monitor/monitor.h"
#include "os/clock.h"
#include "os/fd.h"

namespace gpupool {
namespace {

using asio::ip::tcp;

constexpr double kDefaultHistorySeconds = 3600;
// After an answer that closes the connection, what the client still sends is read and dropped
// for this long: closing with unread bytes makes the kernel send a reset, which can destroy the
// answer (a 431 to a client still sending its long header) before the client reads it.
constexpr std::chrono::milliseconds kLingerTime{2'000};
// Bytes read per call: a head arrives in pieces of at most this, never more than the head cap in all.
constexpr size_t kReadChunk = 4096;
// When accept() fails for want of descriptors, waiting a little instead of retrying at once keeps
// the HTTP thread from spinning until one is free.
constexpr std::chrono::milliseconds kAcceptRetry{100};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type and Content-Length
};

HttpResponse content(std::string body, std::string content_type) {
  return HttpResponse{200, std::move(content_type), std::move(body), {}};
}

HttpResponse error_response(int status, const std::string& message) {
  // A path or query may hold any bytes: ones that are not UTF-8 are replaced, not thrown over.
  std::string body = nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return HttpResponse{status, "application/json", body + "\n", {}};
}

// A query value that is not a number, or out of range, is refused: a poller that sent a typo
// would otherwise get an answer for a window it did not ask for.
Result<double> number_parameter(std::string_view text, const char* name, double minimum) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < minimum) {
    return fail("{} must be a number of seconds from {}, not '{}'", name, minimum, text);
  }
  return value;
}

// ?since=UNIX_SECONDS (what a poller has not seen yet) or ?seconds=N back from now.
Result<double> history_since(const HttpRequest& request) {
  if (auto since = request.parameter("since")) return number_parameter(*since, "since", 0);
  auto seconds_text = request.parameter("seconds");
  if (!seconds_text) return unix_now() - kDefaultHistorySeconds;
  TRY_ASSIGN(double seconds, number_parameter(*seconds_text, "seconds", 0));
  return unix_now() - seconds;
}

std::string serialise(const HttpResponse& response, bool keep_alive, bool with_body) {
  std::string text = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", response.status,
                                 http_reason(response.status), response.content_type, response.body.size());
  for (const auto& [name, value] : response.headers) text += fmt::format("{}: {}\r\n", name, value);
  if (!keep_alive) text += "Connection: close\r\n";
  text += "\r\n";
  if (with_body) text += response.body;
  return text;
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(Monitor& monitor, const HttpLimits& limits)
      : monitor_(monitor),
        limits_(limits),
        peers_(limits.max_connections_per_peer, limits.max_connections),
        acceptor_(io_),
        accept_retry_(io_) {
    for (const WebAsset& asset : web_assets()) assets_.emplace(asset.path, &asset);
  }

  Result<void> listen(const std::string& address) {
    auto parts = split_http_address(address);
    if (!parts) return fail("--http {}: expected HOST:PORT", address);
    asio::error_code error;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(parts->first, std::to_string(parts->second), error);
    for (const auto& entry : endpoints) {
      if (listen_on(entry.endpoint())) break;
    }
    if (!acceptor_.is_open()) {
      return fail("cannot listen for HTTP on {}: the address is in use or not this machine's", address);
    }
    address_ = fmt::format("{}:{}", parts->first, acceptor_.local_endpoint(error).port());
    accept_next();
    thread_ = std::thread([this] { io_.run(); });
    return {};
  }

  const std::string& address() const { return address_; }

  ~Impl() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  class Connection;

  bool listen_on(const tcp::endpoint& endpoint) {
    asio::error_code error;
    acceptor_.open(endpoint.protocol(), error);
    if (error) return false;
    // The daemon forks supervisors: no socket of this server may reach them.
    (void)set_inherited_by_exec(acceptor_.native_handle(), false);
    // A restarted daemon gets its port back although the last one's connections linger in TIME_WAIT.
    acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
    if (!error) acceptor_.bind(endpoint, error);
    if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
    if (error) acceptor_.close(error);
    return !error;
  }

  void accept_next() {
    acceptor_.async_accept([this](const asio::error_code& error, tcp::socket socket) {
      if (error == asio::error::operation_aborted) return;
      if (error == asio::error::no_descriptors || error == asio::error::no_buffer_space) {
        accept_retry_.expires_after(kAcceptRetry);
        accept_retry_.async_wait([this](const asio::error_code& cancelled) {
          if (!cancelled) accept_next();
        });
        return;
      }
      if (!error) admit(std::move(socket));
      accept_next();
    });
  }

  void admit(tcp::socket socket);

  // What a request asks for; the connection decides on keeping alive and on HEAD's empty body.
  HttpResponse answer(const HttpRequest& request) {
    auto asset = assets_.find(request.path);
    if (asset == assets_.end() && kApiPages.count(request.path) == 0) {
      return error_response(404, fmt::format("no page {}", request.path));
    }
    if (request.method != "GET" && request.method != "HEAD") {
      // Everything is read-only: another method on a page that exists is 405, as HTTP says.
      HttpResponse refusal =
          error_response(405, fmt::format("{} is read-only: {} is not allowed", request.path, request.method));
      refusal.headers.emplace_back("Allow", "GET, HEAD");
      return refusal;
    }
    if (asset != assets_.end()) {
      HttpResponse page = content(std::string(asset->second->body), std::string(asset->second->content_type));
      page.headers.emplace_back("Cache-Control", "no-cache");
      return page;
    }
    if (request.path == "/metrics") return content(monitor_.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
    if (request.path == "/api/gpus") return content(monitor_.gpus_json(), "application/json");
    if (request.path == "/api/jobs") return content(monitor_.jobs_json(), "application/json");
    auto since = history_since(request);
    if (!since) return error_response(400, since.error().message);
    if (request.path == "/api/history") return content(monitor_.history_json(*since), "application/json");
    // /api/dashboard, the page's refresh in one request, so an open page holds one connection at a time.
    return content(fmt::format(R"({{"gpus":{},"jobs":{},"history":{}}})", monitor_.gpus_json(), monitor_.jobs_json(),
                               monitor_.history_json(*since)),
                   "application/json");
  }

  static inline const std::set<std::string, std::less<>> kApiPages = {"/metrics", "/api/gpus", "/api/jobs",
                                                                      "/api/history", "/api/dashboard"};

  Monitor& monitor_;
  const HttpLimits limits_;
  HttpPeerLimits peers_;  // the HTTP thread's only; outlives the connections io_ still holds
  std::map<std::string, const WebAsset*, std::less<>> assets_;  // the dashboard's files by path
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::string address_;
  std::thread thread_;
};

// One client connection: reads a head at a time within the head cap and deadline, answers, and
// either waits for the next request (for at most the idle time) or closes.
class HttpServer::Impl::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl& server, tcp::socket socket, std::string peer)
      : server_(server), socket_(std::move(socket)), timer_(server.io_), peer_(std::move(peer)) {}
  ~Connection() { server_.peers_.release(peer_); }

  void start() { wait_for_request(); }

 private:
  enum class State { kReading, kWriting, kLingering, kClosed };
  enum class Expiry { kIdle, kHead, kWrite, kLinger };

  void wait_for_request() {
    state_ = State::kReading;
    if (received_.empty()) {
      arm(server_.limits_.idle_timeout, Expiry::kIdle);
      read_more();
    } else {  // a pipelined request already began
      arm(server_.limits_.head_timeout, Expiry::kHead);
      read_head();
    }
  }

  void read_more() {
    size_t room = std::min(kReadChunk, server_.limits_.max_head_bytes - received_.size());
    socket_.async_read_some(asio::buffer(chunk_.data(), room),
                            [self = shared_from_this()](const asio::error_code& error, size_t length) {
                              if (self->state_ != State::kReading) return;
                              if (error) return self->hang_up();
                              // The head's deadline runs from its first byte, not from the last one.
                              if (self->received_.empty()) self->arm(self->server_.limits_.head_timeout, Expiry::kHead);
                              self->received_.append(self->chunk_.data(), length);
                              self->read_head();
                            });
  }

  void read_head() {
    auto result = read_http_head(received_, server_.limits_.max_head_bytes);
    if (std::holds_alternative<HttpNeedMore>(result)) return read_more();
    if (const auto* refusal = std::get_if<HttpRefusal>(&result)) {
      return respond(error_response(refusal->status, refusal->message), false, true);
    }
    auto& head = std::get<HttpHead>(result);
    received_.erase(0, head.length);
    const HttpRequest& request = head.request;
    ++served_;
    // A body is never read, so the connection cannot tell where the next request would start.
    bool keep_alive = request.keep_alive && !request.has_body &&
                      (request.method == "GET" || request.method == "HEAD") &&
                      served_ < server_.limits_.max_requests_per_connection;
    respond(server_.answer(request), keep_alive, request.method != "HEAD");
  }

  void respond(const HttpResponse& response, bool keep_alive, bool with_body) {
    state_ = State::kWriting;
    sending_ = serialise(response, keep_alive, with_body);
    arm(server_.limits_.write_timeout, Expiry::kWrite);
    asio::async_write(socket_, asio::buffer(sending_),
                      [self = shared_from_this(), keep_alive](const asio::error_code& error, size_t) {
                        if (self->state_ != State::kWriting) return;
                        // An idle connection holds no answer's worth of memory.
                        std::string().swap(self->sending_);
                        if (error) return self->hang_up();
                        if (keep_alive) return self->wait_for_request();
                        self->linger();
                      });
  }

  void linger() {
    state_ = State::kLingering;
    std::string().swap(received_);
    asio::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm(kLingerTime, Expiry::kLinger);
    drain();
  }

  void drain() {
    socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](const asio::error_code& error, size_t) {
      if (self->state_ != State::kLingering) return;
      if (error) return self->hang_up();
      self->drain();
    });
  }

  // One timer per connection: each arm replaces the last, and a stale expiry is told apart by its generation.
  void arm(std::chrono::milliseconds after, Expiry what) {
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), what, generation = ++armed_](const asio::error_code& error) {
      if (!error && generation == self->armed_) self->expired(what);
    });
  }

  void expired(Expiry what) {
    if (what == Expiry::kHead && state_ == State::kReading) {
      // Too slow a head (one header line a second holds a connection for ever otherwise).
      asio::error_code ignored;
      socket_.cancel(ignored);
      return respond(
          error_response(408, fmt::format("the request head did not arrive within {} s",
                                          std::chrono::duration<double>(server_.limits_.head_timeout).count())),
          false, true);
    }
    hang_up();
  }

  void hang_up() {
    state_ = State::kClosed;
    asio::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  const std::string peer_;
  State state_ = State::kReading;
  uint64_t armed_ = 0;
  size_t served_ = 0;
  std::string received_;  // at most limits_.max_head_bytes
  std::string sending_;
  std::array<char, kReadChunk> chunk_;
};

void HttpServer::Impl::admit(tcp::socket socket) {
  asio::error_code error;
  tcp::endpoint remote = socket.remote_endpoint(error);
  if (error) return;
  std::string peer = remote.address().to_string();
  // Over a cap the connection is closed here, before it is given a buffer or a timer.
  if (!peers_.admit(peer)) return;
  (void)set_inherited_by_exec(socket.native_handle(), false);
  // Without it a reply on a reused connection waits ~40 ms for the client's delayed ACK.
  socket.set_option(tcp::no_delay(true), error);
  std::make_shared<Connection>(*this, std::move(socket), std::move(peer))->start();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

const std::string& HttpServer::address() const { return impl_->address(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& address, Monitor& monitor,
                                                      const HttpLimits& limits) {
  auto impl = std::make_unique<Impl>(monitor, limits);
  // Asio reports with error codes here; what may still throw is an allocation or the thread's start.
  try {
    TRY(impl->listen(address));
  } catch (const std::exception& error) {
    return fail("cannot start the HTTP server on {}: {}", address, error.what());
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace gpupool
