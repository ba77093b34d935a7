// gpupoold's read-only HTTP server: /metrics, /api/gpus, /api/jobs, /api/history, /api/dashboard
// (the three in one answer, the dashboard's one request per refresh) and the dashboard's files.
// HTTP/1.1 on Asio, on a thread and event loop of its own, so that no client of it ever holds up
// the daemon's job loop; it reads only what the monitor publishes. It answers GET and HEAD alone
// (405 to any other method), errors as JSON, {"error": "..."}, and bounds what any client may
// hold (docs/security.md, "The HTTP side"): head size, head time, idle and write time, requests
// per connection, connections per peer address and in all.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "base/result.h"

namespace gpupool {

class Monitor;

// What one client may hold. The total stays far below the descriptors the daemon keeps for its
// jobs and socket clients (docs/security.md has the arithmetic).
struct HttpLimits {
  size_t max_head_bytes = 16 * 1024;                // request line and headers; more is 431 and close
  std::chrono::milliseconds head_timeout{10'000};   // from a request's first byte to its blank line; then 408
  std::chrono::milliseconds idle_timeout{5'000};    // a kept-alive connection with no request is closed
  std::chrono::milliseconds write_timeout{10'000};  // a client that does not read its answer is dropped
  size_t max_requests_per_connection = 1000;        // then "Connection: close"
  // From [monitor] http_max_connections_per_address and http_max_connections: more are closed at once.
  size_t max_connections_per_peer = 0;
  size_t max_connections = 0;
};

class HttpServer {
 public:
  // Binds HOST:PORT (port 0: any free port) and starts serving; an error when the address cannot be bound.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& address, Monitor& monitor,
                                                   const HttpLimits& limits);
  ~HttpServer();  // stops serving, closes every connection and waits for its thread
  // HOST:PORT it listens on (the port the kernel chose when asked for port 0).
  const std::string& address() const;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

 private:
  class Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool
