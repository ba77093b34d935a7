#include "daemon/http_request.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace gpupool {
namespace {

// RFC 9110's tchar: what a method or a header name may hold.
bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view text) { return !text.empty() && std::all_of(text.begin(), text.end(), is_token_char); }

// Field values: visible characters, spaces and tabs, and bytes from 0x80 (obs-text).
bool is_field_value(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    auto byte = static_cast<unsigned char>(c);
    return byte == '\t' || byte >= 0x20 ? byte != 0x7f : false;
  });
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
           return lower(x) == lower(y);
         });
}

std::string_view trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

HttpRefusal bad(std::string message) { return HttpRefusal{400, std::move(message)}; }

// "close" and "keep-alive" among Connection's comma-separated options.
void read_connection_options(std::string_view value, HttpRequest& request) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view option = trim(value.substr(0, comma));
    if (equals_ignoring_case(option, "close")) request.keep_alive = false;
    if (equals_ignoring_case(option, "keep-alive")) request.keep_alive = true;
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
  }
}

std::optional<HttpRefusal> read_target(std::string_view target, HttpRequest& request) {
  if (!target.starts_with('/')) return bad("the request target must be a path starting with /");
  size_t question = target.find('?');
  auto path = percent_decode(target.substr(0, question), false);
  if (!path) return bad("the path holds a broken %-escape");
  request.path = std::move(*path);
  if (question == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t equals = pair.find('=');
    auto name = percent_decode(pair.substr(0, equals), true);
    auto value = percent_decode(equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1), true);
    if (!name || !value) return bad("the query holds a broken %-escape");
    request.query.emplace_back(std::move(*name), std::move(*value));
  }
  return std::nullopt;
}

std::optional<HttpRefusal> read_request_line(std::string_view line, HttpRequest& request) {
  size_t first = line.find(' ');
  size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) {
    return bad("the request line must be METHOD PATH HTTP/1.1");
  }
  std::string_view method = line.substr(0, first);
  std::string_view version = line.substr(second + 1);
  if (!is_token(method)) return bad("the request line must be METHOD PATH HTTP/1.1");
  if (version == "HTTP/1.0") {
    request.keep_alive = false;
  } else if (version != "HTTP/1.1") {
    if (version.starts_with("HTTP/")) return HttpRefusal{505, "only HTTP/1.0 and HTTP/1.1 are served"};
    return bad("the request line must be METHOD PATH HTTP/1.1");
  }
  request.method = std::string(method);
  return read_target(line.substr(first + 1, second - first - 1), request);
}

std::optional<HttpRefusal> read_header(std::string_view line, HttpRequest& request) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
    return bad("a header line must be NAME: VALUE");  // line folding (a leading space) is refused too
  }
  std::string_view name = line.substr(0, colon);
  std::string_view value = trim(line.substr(colon + 1));
  if (!is_field_value(value)) return bad(fmt::format("header {} holds a control character", name));
  if (equals_ignoring_case(name, "Connection")) read_connection_options(value, request);
  if (equals_ignoring_case(name, "Transfer-Encoding")) request.has_body = true;
  if (equals_ignoring_case(name, "Content-Length")) {
    uint64_t length = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (value.empty() || error != std::errc() || end != value.data() + value.size()) {
      return bad("Content-Length must be a number");
    }
    if (length > 0) request.has_body = true;
  }
  return std::nullopt;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string_view> HttpRequest::parameter(std::string_view name) const {
  for (const auto& [key, value] : query) {
    if (key == name) return value;
  }
  return std::nullopt;
}

std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space) {
  std::string decoded;
  decoded.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int high = hex_digit(text[i + 1]);
      int low = hex_digit(text[i + 2]);
      if (high < 0 || low < 0) return std::nullopt;
      decoded += static_cast<char>(high * 16 + low);
      i += 2;
    } else {
      decoded += plus_is_space && text[i] == '+' ? ' ' : text[i];
    }
  }
  return decoded;
}

std::variant<HttpNeedMore, HttpRefusal, HttpHead> read_http_head(std::string_view received, size_t max_head_bytes) {
  // Only the first max_head_bytes count: a head whose end lies beyond them is too long whatever follows.
  std::string_view window = received.substr(0, max_head_bytes);
  HttpHead head;
  size_t line_start = 0;
  for (;;) {
    size_t newline = window.find('\n', line_start);
    if (newline == std::string_view::npos) {
      if (received.size() >= max_head_bytes) {
        return HttpRefusal{431, fmt::format("the request head is longer than {} bytes", max_head_bytes)};
      }
      return HttpNeedMore{};
    }
    std::string_view line = window.substr(line_start, newline - line_start);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos) return bad("a bare CR in the request head");
    if (line_start == 0) {
      if (auto refusal = read_request_line(line, head.request)) return *refusal;
    } else if (line.empty()) {
      head.length = newline + 1;
      return head;
    } else if (auto refusal = read_header(line, head.request)) {
      return *refusal;
    }
    line_start = newline + 1;
  }
}

std::string_view http_reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

}  // namespace gpupool
