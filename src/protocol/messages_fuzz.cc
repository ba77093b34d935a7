// Fuzzes the daemon protocol's parsers with one line: as a hello, a request and a response.
// Each either parses, and then its encoding parses again to a message with the same encoding
// (encode(parse(x)) is a fixed point, so nothing is lost or invented on the way), or yields one
// error line saying what was being read. A hello may also be the daemon's refusal, whose message
// is the error as it is.
// Seeds: tests/fuzz/messages/.
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "protocol/messages.h"

namespace {

using namespace gpupool::protocol;

void check(bool condition) {
  if (!condition) std::abort();
}

void check_error_line(const std::string& message, std::string_view prefix) {
  check(message.starts_with(prefix) && message.size() > prefix.size());
  check(message.find('\n') == std::string::npos);
}

template <typename Message>
void check_round_trip(const Message& message, gpupool::Result<Message> (*parse)(std::string_view)) {
  const std::string line = encode(message);
  check(line.find('\n') == std::string::npos);
  auto again = parse(line);
  check(again.ok());
  check(encode(*again) == line);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);

  auto hello = parse_hello(line);
  if (hello) {
    check_round_trip(*hello, parse_hello);
  } else if (!hello.error().message.starts_with("bad hello: ")) {
    auto refusal = parse_response(line);
    check(refusal.ok() && std::holds_alternative<ErrorResponse>(*refusal));
    check(std::get<ErrorResponse>(*refusal).message == hello.error().message);
  } else {
    check_error_line(hello.error().message, "bad hello: ");
  }

  auto request = parse_request(line);
  if (request) {
    check_round_trip(*request, parse_request);
  } else {
    check_error_line(request.error().message, "bad request: ");
  }

  auto response = parse_response(line);
  if (response) {
    check_round_trip(*response, parse_response);
  } else {
    check_error_line(response.error().message, "bad response: ");
  }
  return 0;
}
