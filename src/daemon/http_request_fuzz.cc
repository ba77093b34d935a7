// Fuzzes the HTTP request-head parser: whatever bytes arrive, it never looks past its cap, a head
// it accepts ends within the cap on a blank line and holds a token method and a path starting
// with '/', a refusal is 400, 431 or 505 with one line of reason, and it waits for more only while
// under the cap. Seeds: tests/fuzz/http_request/.
#include <cstdlib>
#include <string>
#include <string_view>

#include "daemon/http_request.h"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte picks a cap, small enough that the fuzzer meets it often.
  size_t cap = 16 + data[0];
  std::string_view received(reinterpret_cast<const char*>(data + 1), size - 1);
  auto result = gpupool::read_http_head(received, cap);
  if (std::holds_alternative<gpupool::HttpNeedMore>(result)) {
    check(received.size() < cap);
  } else if (const auto* refusal = std::get_if<gpupool::HttpRefusal>(&result)) {
    check(refusal->status == 400 || refusal->status == 431 || refusal->status == 505);
    check(!refusal->message.empty() && refusal->message.find('\n') == std::string::npos);
    check(refusal->status != 431 || received.size() >= cap);
  } else {
    const auto& head = std::get<gpupool::HttpHead>(result);
    check(head.length <= cap && head.length <= received.size());
    check(received.substr(0, head.length).ends_with("\n\n") || received.substr(0, head.length).ends_with("\n\r\n"));
    check(!head.request.method.empty() && head.request.path.starts_with('/'));
    // The same head with anything after it reads the same: a pipelined request never changes it.
    auto again = gpupool::read_http_head(std::string(received.substr(0, head.length)) + "GET / HTTP/1.1\r\n", cap);
    check(std::holds_alternative<gpupool::HttpHead>(again) && std::get<gpupool::HttpHead>(again).length == head.length);
  }
  return 0;
}
