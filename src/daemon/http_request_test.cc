#include "daemon/http_request.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

constexpr size_t kCap = 256;

HttpHead head_of(std::string_view text) {
  auto result = read_http_head(text, kCap);
  EXPECT_TRUE(std::holds_alternative<HttpHead>(result)) << text;
  return std::holds_alternative<HttpHead>(result) ? std::get<HttpHead>(result) : HttpHead{};
}

HttpRefusal refusal_of(std::string_view text, size_t cap = kCap) {
  auto result = read_http_head(text, cap);
  EXPECT_TRUE(std::holds_alternative<HttpRefusal>(result)) << text;
  return std::holds_alternative<HttpRefusal>(result) ? std::get<HttpRefusal>(result) : HttpRefusal{0, ""};
}

TEST(HttpRequestHead, ReadsMethodPathQueryAndLength) {
  std::string text = "GET /api/history?since=17.5&x=a+b%2Fc&flag HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\n";
  HttpHead head = head_of(text);
  EXPECT_EQ(head.request.method, "GET");
  EXPECT_EQ(head.request.path, "/api/history");
  EXPECT_EQ(head.request.parameter("since"), "17.5");
  EXPECT_EQ(head.request.parameter("x"), "a b/c");
  EXPECT_EQ(head.request.parameter("flag"), "");
  EXPECT_EQ(head.request.parameter("seconds"), std::nullopt);
  EXPECT_TRUE(head.request.keep_alive);
  EXPECT_FALSE(head.request.has_body);
  EXPECT_EQ(text.substr(head.length), "GET / HTTP/1.1\r\n");  // the next request is left alone
}

TEST(HttpRequestHead, TheFirstOfARepeatedParameterCounts) {
  EXPECT_EQ(head_of("GET /?a=1&a=2 HTTP/1.1\r\n\r\n").request.parameter("a"), "1");
}

TEST(HttpRequestHead, BareNewlinesAreAccepted) {
  HttpHead head = head_of("GET /metrics HTTP/1.1\nHost: h\n\n");
  EXPECT_EQ(head.request.path, "/metrics");
  EXPECT_EQ(head.length, 31u);
}

TEST(HttpRequestHead, KeepAliveFollowsTheVersionAndConnection) {
  EXPECT_FALSE(head_of("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(head_of("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  EXPECT_TRUE(head_of("GET / HTTP/1.0\r\nconnection: TE, keep-alive\r\n\r\n").request.keep_alive);
}

TEST(HttpRequestHead, ABodyIsNoticed) {
  EXPECT_FALSE(head_of("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").request.has_body);
  EXPECT_TRUE(head_of("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n").request.has_body);
  EXPECT_TRUE(head_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").request.has_body);
  EXPECT_EQ(refusal_of("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").status, 400);
}

TEST(HttpRequestHead, WaitsForTheBlankLine) {
  for (std::string_view part : {"", "GE", "GET / HTTP/1.1", "GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nHost: h\r\n\r"}) {
    EXPECT_TRUE(std::holds_alternative<HttpNeedMore>(read_http_head(part, kCap))) << part;
  }
}

TEST(HttpRequestHead, AHeadOverTheCapIs431AtTheCap) {
  std::string line = "GET / HTTP/1.1\r\nX-Long: " + std::string(kCap, 'a');
  EXPECT_TRUE(std::holds_alternative<HttpNeedMore>(read_http_head(line.substr(0, kCap - 1), kCap)));
  HttpRefusal refusal = refusal_of(line.substr(0, kCap));
  EXPECT_EQ(refusal.status, 431);
  EXPECT_EQ(refusal.message, "the request head is longer than 256 bytes");
  // The blank line arriving past the cap does not make it acceptable.
  EXPECT_EQ(refusal_of(line + "\r\n\r\n").status, 431);
}

TEST(HttpRequestHead, BadSyntaxIs400) {
  for (std::string_view text :
       {"GET /\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1 x\r\n\r\n", "G(T / HTTP/1.1\r\n\r\n",
        "GET api HTTP/1.1\r\n\r\n", "GET /%zz HTTP/1.1\r\n\r\n", "GET /?a=%4 HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nNo colon\r\n\r\n", "GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        "GET / HTTP/1.1\r\nA : b\r\n\r\n", "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", "GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",
        "\r\n", "GET / FTP/1.0\r\n\r\n"}) {
    EXPECT_EQ(refusal_of(text).status, 400) << text;
  }
}

TEST(HttpRequestHead, ABadRequestLineIsRefusedBeforeTheHeadEnds) { EXPECT_EQ(refusal_of("BAD\r\nX: y").status, 400); }

TEST(HttpRequestHead, OtherVersionsAre505) { EXPECT_EQ(refusal_of("GET / HTTP/2.0\r\n\r\n").status, 505); }

TEST(HttpRequestHead, PercentDecoding) {
  EXPECT_EQ(percent_decode("a%20b+c", false), "a b+c");
  EXPECT_EQ(percent_decode("a%20b+c", true), "a b c");
  EXPECT_EQ(percent_decode("%", true), std::nullopt);
  EXPECT_EQ(percent_decode("%a", true), std::nullopt);
  EXPECT_EQ(percent_decode("%gg", true), std::nullopt);
}

}  // namespace
}  // namespace gpupool
