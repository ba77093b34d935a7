// gpupoold's read-only HTTP server (cpp-httplib, threads of its own): /metrics, /api/gpus,
// /api/jobs, /api/history and the dashboard. It reads only what the monitor publishes, never
// the event loop's state, and answers GET alone (405 to any other method). Errors come as JSON,
// {"error": "..."}.
#pragma once

#include <memory>
#include <string>

#include "base/result.h"

namespace gpupool {

class Monitor;

class HttpServer {
 public:
  // Binds HOST:PORT (port 0: any free port) and starts serving; an error when the address cannot be bound.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& address, Monitor& monitor);
  ~HttpServer();  // stops serving and waits for its threads
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
