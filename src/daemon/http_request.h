// The HTTP/1.1 request head as gpupoold's read-only HTTP server reads it: a pure parser (no
// I/O) that looks at the bytes a connection has received so far and says whether a whole head
// is there, within a size cap, and what it asks for. Bodies are never read: the server serves
// GET and HEAD only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace gpupool {

struct HttpRequest {
  std::string method;                                      // as sent: "GET", "HEAD", "POST"...
  std::string path;                                        // percent-decoded, without the query: "/api/history"
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in the order sent
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "keep-alive"
  bool has_body = false;   // a Content-Length other than 0, or a Transfer-Encoding

  // The first value of `name` in the query, nullopt when absent.
  std::optional<std::string_view> parameter(std::string_view name) const;
};

// More bytes are needed; what was received holds no whole head yet, and is under the cap.
struct HttpNeedMore {};
// A head the server cannot serve: the status to answer with and why, then the connection closes.
struct HttpRefusal {
  int status;  // 400 (bad syntax), 431 (head over the cap), 505 (not HTTP/1.x)
  std::string message;
};
struct HttpHead {
  HttpRequest request;
  size_t length;  // bytes of the head, blank line included; what follows belongs to the next request
};

// Reads the head at the start of `received`. A head longer than `max_head_bytes` is refused with
// 431 as soon as that many bytes are there without its end, so a caller that never buffers more
// than `max_head_bytes` of one head holds at most that much per connection.
std::variant<HttpNeedMore, HttpRefusal, HttpHead> read_http_head(std::string_view received, size_t max_head_bytes);

// "%2F" → "/"; in a query ('+' is a space) `plus_is_space`. nullopt for a broken escape.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space);

// The reason phrase of the statuses the server answers with: "OK", "Not Found"...
std::string_view http_reason(int status);

}  // namespace gpupool
