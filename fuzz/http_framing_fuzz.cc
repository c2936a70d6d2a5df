// libFuzzer target for the transport's request framing (server/http_framing.h), the first code
// that reads a client's bytes: each input is checked as a request head (and its method and
// target split out), searched for the head's end from every offset the transport would use, and
// fed to the chunked-body follower whole and byte by byte, which must agree. To reach past the
// request line without committed seeds, the input is also spliced into a few valid heads (the
// first byte picks one, the rest replaces its tail).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_framing.h"

namespace promptcache {
namespace {

constexpr const char* kHeads[] = {
    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n",
    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n",
    "GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nAccept: */*\r\n",
};
constexpr const char* kBodies[] = {"5\r\nhello\r\n0\r\n\r\n",
                                   "a;ext=1\r\n0123456789\r\n0\r\nT: v\r\n\r\n"};

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "http_framing_fuzz: %s\n", what);
    std::abort();
  }
}

void RunHead(std::string_view text) {
  const RequestHead head = ParseRequestHead(text, 1 << 20);
  Check(head.status == 0 || (head.status >= 400 && head.status < 600 && !head.reason.empty()),
        "a refused head has a 4xx/5xx status and a reason");
  Check(head.status != 0 || head.framing != BodyFraming::kLength || head.length <= (1 << 20),
        "an accepted head declares at most the body limit");
  std::string method, target;
  RequestLineParts(text, &method, &target);
  const size_t end = FindHeadEnd(text);
  Check(end == std::string_view::npos || (end >= 4 && text.substr(end - 4, 4) == "\r\n\r\n"),
        "a head ends just past CRLF CRLF");
  if (end != std::string_view::npos && end > 8) {
    Check(FindHeadEnd(text, end - 8) == end, "a search from a later offset finds the same end");
  }
}

void RunChunks(std::string_view body) {
  ChunkedBodyCheck whole, bytes;
  const size_t took = whole.Feed(body.data(), body.size());
  Check(took <= body.size(), "Feed takes at most what it is given");
  size_t taken = 0;
  for (size_t i = 0; i < body.size() && !bytes.done() && !bytes.failed(); ++i) {
    taken += bytes.Feed(body.data() + i, 1);
  }
  Check(whole.done() == bytes.done() && whole.failed() == bytes.failed(),
        "whole and byte-by-byte reads agree on the outcome");
  if (whole.done()) Check(took == taken, "whole and byte-by-byte reads end at the same byte");
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  const std::string text(reinterpret_cast<const char*>(data), size);
  RunHead(text);
  RunChunks(text);
  if (size > 0) {
    const std::string rest = text.substr(1);
    RunHead(std::string(kHeads[data[0] % 3]) + rest + "\r\n\r\n");
    RunChunks(std::string(kBodies[data[0] % 2]).substr(0, data[0] % 8) + rest);
  }
  return 0;
}
