// The request-head and chunked-body checks of the transport (server/http_framing.h): each way a
// request's length can be ambiguous is refused with its status, and valid framing is read as
// RFC 9112 says. (tests/node/http_framing.test.mjs sends the same requests to a real server.)
#include "server/http_framing.h"

#include <gtest/gtest.h>

#include <string>

namespace promptcache {
namespace {

constexpr uint64_t kLimit = 65536;

RequestHead Parse(const std::string& fields, const std::string& line = "POST /v1/x HTTP/1.1") {
  return ParseRequestHead(line + "\r\nHost: x\r\n" + fields + "\r\n", kLimit);
}

TEST(RequestHead, ContentLengthMustBeDigits) {
  const RequestHead ok = Parse("Content-Length: 51\r\n");
  EXPECT_EQ(ok.status, 0) << ok.reason;
  EXPECT_EQ(ok.framing, BodyFraming::kLength);
  EXPECT_EQ(ok.length, 51u);
  for (const char* bad : {"abc", "+51", "-5", "5 1", "0x10", "", "5.0", "51a"}) {
    const RequestHead h = Parse(std::string("Content-Length: ") + bad + "\r\n");
    EXPECT_EQ(h.status, 400) << bad;
    EXPECT_NE(h.reason.find("Content-Length"), std::string::npos) << h.reason;
  }
  EXPECT_EQ(Parse("Content-Length: 0\r\n").framing, BodyFraming::kNone);
}

TEST(RequestHead, ContentLengthsMustAgree) {
  EXPECT_EQ(Parse("Content-Length: 5\r\nContent-Length: 5\r\n").status, 0);
  EXPECT_EQ(Parse("Content-Length: 5, 5\r\n").length, 5u);
  EXPECT_EQ(Parse("Content-Length: 5\r\nContent-Length: 6\r\n").status, 400);
  EXPECT_EQ(Parse("Content-Length: 5, 6\r\n").status, 400);
  EXPECT_EQ(Parse("Content-Length: 5,\r\n").status, 400);
}

TEST(RequestHead, DeclaredBodyOverTheLimitIs413) {
  EXPECT_EQ(Parse("Content-Length: 65536\r\n").status, 0);
  EXPECT_EQ(Parse("Content-Length: 65537\r\n").status, 413);
  EXPECT_EQ(Parse("Content-Length: 1000000000\r\n").status, 413);
  // Past uint64_t: saturates, still a 413 rather than a wrapped small number.
  EXPECT_EQ(Parse("Content-Length: 18446744073709551617\r\n").status, 413);
}

TEST(RequestHead, TransferEncodingMustBeOneChunked) {
  const RequestHead ok = Parse("Transfer-Encoding: chunked\r\n");
  EXPECT_EQ(ok.status, 0) << ok.reason;
  EXPECT_EQ(ok.framing, BodyFraming::kChunked);
  EXPECT_EQ(Parse("Transfer-Encoding: Chunked \r\n").framing, BodyFraming::kChunked);
  EXPECT_EQ(Parse("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n").status, 400);
  EXPECT_EQ(Parse("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n").status, 400);
  EXPECT_EQ(Parse("Transfer-Encoding: gzip\r\n").status, 400);  // length unknown
  EXPECT_EQ(Parse("Transfer-Encoding: chunked, gzip\r\n").status, 400);
  EXPECT_EQ(Parse("Transfer-Encoding: gzip, chunked\r\n").status, 501);  // unsupported coding
  EXPECT_EQ(Parse("Transfer-Encoding: chunked, chunked\r\n").status, 400);
  EXPECT_EQ(Parse("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n").status, 400);
  EXPECT_EQ(Parse("Transfer-Encoding: , chunked\r\n").status, 400);
  EXPECT_EQ(Parse("Transfer-Encoding: xchunked\r\n").status, 400);
  EXPECT_EQ(Parse("Transfer-Encoding: chunked\r\n", "POST / HTTP/1.0").status, 400);
}

TEST(RequestHead, LinesEndWithCrlfOnly) {
  // A bare LF would end a line for a lenient proxy but not for cpp-httplib.
  EXPECT_EQ(
      ParseRequestHead("POST / HTTP/1.1\r\nHost: x\nTransfer-Encoding: chunked\r\n\r\n", kLimit)
          .status,
      400);
  EXPECT_EQ(ParseRequestHead("POST / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", kLimit).status, 400);
  EXPECT_EQ(ParseRequestHead(std::string("GET / HTTP/1.1\r\nHost: x\0\r\n\r\n", 30), kLimit).status,
            400);
}

TEST(RequestHead, FieldLinesAreStrict) {
  EXPECT_EQ(Parse("Content-Length : 5\r\n").status, 400);  // whitespace before the colon
  EXPECT_EQ(Parse("X: a\r\n continued\r\n").status, 400);  // a folded line
  EXPECT_EQ(Parse("no colon here\r\n").status, 400);
  EXPECT_EQ(Parse(": value\r\n").status, 400);
  EXPECT_EQ(Parse("X: a\x01z\r\n").status, 400);
  EXPECT_EQ(Parse("X:\tvalue with spaces and \x80 obs-text\t\r\n").status, 0);
  EXPECT_EQ(Parse("X: " + std::string(kMaxFieldLineBytes, 'a') + "\r\n").status, 431);
}

TEST(RequestHead, RequestLine) {
  const RequestHead ok = Parse("", "GET /v1/models?x=1 HTTP/1.1");
  EXPECT_EQ(ok.status, 0) << ok.reason;
  EXPECT_EQ(ok.method, "GET");
  EXPECT_EQ(ok.target, "/v1/models?x=1");
  EXPECT_EQ(Parse("", "GET / HTTP/1.0").status, 0);
  for (const char* bad : {"GET  / HTTP/1.1", "GET / HTTP/1.1 ", "GET /", "hello", "GET / HTTP/1",
                          "GET /a b HTTP/1.1", "G@T / HTTP/1.1", "GET /a?b?c HTTP/1.1"}) {
    EXPECT_EQ(Parse("", bad).status, 400) << bad;
  }
  EXPECT_EQ(Parse("", "GET / HTTP/2.0").status, 505);
  EXPECT_EQ(Parse("", "BREW / HTTP/1.1").status, 501);
  EXPECT_EQ(Parse("", "GET /" + std::string(kMaxRequestLineBytes, 'a') + " HTTP/1.1").status, 414);
}

TEST(RequestHead, HostOncePerHttp11Request) {
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\n\r\n", kLimit).status, 400);
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.0\r\n\r\n", kLimit).status, 0);
  EXPECT_EQ(Parse("Host: y\r\n").status, 400);
}

TEST(RequestHead, FindsTheEnd) {
  const std::string s = "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next";
  EXPECT_EQ(FindHeadEnd(s), s.find("GET /next"));
  EXPECT_EQ(FindHeadEnd(s, 20), s.find("GET /next"));  // the terminator straddles `from`
  EXPECT_EQ(FindHeadEnd("GET / HTTP/1.1\r\nHost: x\r\n"), std::string_view::npos);
}

// Feeds `body` byte by byte and in one piece: how much of it belongs to the chunked body, or
// npos when it fails. Both ways must agree.
size_t Consumed(const std::string& body) {
  ChunkedBodyCheck whole;
  const size_t n = whole.Feed(body.data(), body.size());
  ChunkedBodyCheck bytewise;
  size_t m = 0;
  for (size_t i = 0; i < body.size() && !bytewise.done() && !bytewise.failed(); ++i) {
    m += bytewise.Feed(body.data() + i, 1);
  }
  EXPECT_EQ(whole.failed(), bytewise.failed()) << body;
  if (whole.failed()) return std::string::npos;
  EXPECT_EQ(n, m) << body;
  EXPECT_EQ(whole.done(), bytewise.done()) << body;
  return whole.done() ? n : std::string::npos - 1;
}

TEST(ChunkedBody, EndsWhereTheChunksSay) {
  const std::string body = "5\r\nhello\r\n1A;ext=1\r\n" + std::string(26, 'x') + "\r\n0\r\n\r\n";
  EXPECT_EQ(Consumed(body + "GET / HTTP/1.1\r\n"), body.size());
  EXPECT_EQ(Consumed("0\r\nX-Trailer: 1\r\n\r\n"), 19u);
  EXPECT_EQ(Consumed("5 ;a\r\nhello\r\n0\r\n\r\n"), 18u);
  EXPECT_EQ(Consumed("5\r\nhel"), std::string::npos - 1);  // not done yet
}

TEST(ChunkedBody, RefusesWhatStrtoulWouldRead) {
  for (const char* bad :
       {"0x5\r\nhello\r\n0\r\n\r\n", "+5\r\nhello\r\n0\r\n\r\n", "-1\r\n",
        " 5\r\nhello\r\n0\r\n\r\n", "5x\r\nhello\r\n0\r\n\r\n", "5\nhello\r\n0\r\n\r\n",
        "5\r\nhelloX\r\n0\r\n\r\n", "1000000000000000\r\n", "\r\n", "5 x\r\n", "0\r\n\r\r"}) {
    EXPECT_EQ(Consumed(bad), std::string::npos) << bad;
  }
  ChunkedBodyCheck c;
  c.Feed("zz", 2);
  EXPECT_TRUE(c.failed());
  EXPECT_NE(c.error().find("chunk"), std::string::npos);
}

}  // namespace
}  // namespace promptcache
