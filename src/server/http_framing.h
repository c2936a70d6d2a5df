// Strict HTTP/1.1 request framing (RFC 9112), checked by the transport (server/http_transport.h)
// before cpp-httplib parses a request or reads its body.
//
// A proxy in front of the server and the server itself must agree on where each request ends, or
// a body the proxy forwarded as data is served as a request of its own ("request smuggling").
// cpp-httplib is lenient where the two may disagree: it reads `Content-Length: abc` as 0, accepts
// `Content-Length` beside `Transfer-Encoding`, reads a chunk size with strtoul (a sign, "0x",
// trailing junk) and skips header lines that end in a bare LF. So the transport parses every
// request head itself and refuses, with one error and a closed connection, anything whose length
// is not certain: a Content-Length that is not all digits or that differs from another, both
// Content-Length and Transfer-Encoding, a Transfer-Encoding other than a single `chunked`, bare CR
// or LF, whitespace before a field's colon, folded lines, a malformed request line. A body that
// declares more than the server's limit is refused before any of it is read (413). A chunked
// body's framing is checked as it is read (ChunkedBodyCheck), so that it ends where the chunks
// say, however cpp-httplib would have read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace promptcache {

// The request line (with its CRLF) may be this long (cpp-httplib answers 414 past it too), each
// header line too (cpp-httplib's own limit), and the whole head, empty lines before it included.
inline constexpr size_t kMaxRequestLineBytes = 8192;
inline constexpr size_t kMaxFieldLineBytes = 8192;
inline constexpr size_t kMaxHeadBytes = 64 * 1024;

enum class BodyFraming { kNone, kLength, kChunked };

struct RequestHead {
  std::string method, target;  // as sent (target cut to kMaxRequestLineBytes)
  BodyFraming framing = BodyFraming::kNone;
  uint64_t length = 0;  // kLength: the declared Content-Length
  // 0: the head is well formed. Else the status to refuse it with (400, 413, 414, 431, 501,
  // 505) and a one-line reason naming the problem.
  int status = 0;
  std::string reason;
};

// Checks a request head: `head` runs from the request line up to and including the blank line
// that ends the header section ("\r\n\r\n"). A declared body over `max_body_bytes` is a 413.
RequestHead ParseRequestHead(std::string_view head, uint64_t max_body_bytes);

// The method and target of a head's request line, as far as its first line can be split on
// spaces (for an error response's shape: a refused /v1/messages request gets Anthropic's).
void RequestLineParts(std::string_view head, std::string* method, std::string* target);

// Where a request head ends in `data`: the offset just past its "\r\n\r\n", or npos. The search
// may start at `from` (bytes before it were searched already and hold no terminator).
size_t FindHeadEnd(std::string_view data, size_t from = 0);

// Follows a chunked body (RFC 9112 section 7.1) byte by byte as it is read: chunk sizes in hex
// digits only, extensions after ';', CRLF everywhere, then trailer fields and the final CRLF.
class ChunkedBodyCheck {
 public:
  // Takes up to `n` bytes of the body; returns how many belong to it: fewer than `n` once its last
  // byte has been taken (the rest is the next request's), 0 once done or failed.
  size_t Feed(const char* p, size_t n);
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }
  const std::string& error() const { return error_; }

 private:
  enum class State {
    kSize,       // hex digits of a chunk size
    kSizeSpace,  // whitespace after them, before ';'
    kExtension,  // after ';', up to CR
    kSizeLf,     // CR seen, LF next
    kData,       // `left_` bytes of chunk data
    kDataCr,     // CRLF after the data
    kDataLf,
    kTrailerStart,  // after the last chunk: CR (the end) or a trailer field
    kTrailer,       // a trailer field, up to CR
    kTrailerLf,
    kEndLf,  // the final CRLF's LF
    kDone,
    kFailed,
  };
  void Take(char c);  // one byte of a size line, a CRLF or the trailer section
  void Fail(std::string why);

  State state_ = State::kSize;
  uint64_t left_ = 0;  // chunk size being read, then data bytes left
  int digits_ = 0;     // of the chunk size
  size_t line_ = 0;    // bytes of the extension or trailer line so far
  std::string error_;
};

}  // namespace promptcache
