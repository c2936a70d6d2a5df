#include "server/http_framing.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace promptcache {
namespace {

// RFC 9110 section 5.6.2: the characters of a token (method, field name, transfer coding).
bool IsTchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return IsTchar(c); });
}

bool IsOws(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && IsOws(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsOws(s.back())) s.remove_suffix(1);
  return s;
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + ('a' - 'A')) : c; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return Lower(x) == Lower(y); });
}

// What a reason may quote of the request: short, printable.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 40; ++i) {
    const unsigned char c = s[i];
    out += c >= 0x20 && c < 0x7f ? char(c) : '?';
  }
  return out + (s.size() > 40 ? "...'" : "'");
}

// Splits a field value on commas (a list, RFC 9110 section 5.6.1), trimming each element.
std::vector<std::string_view> ListElements(std::string_view value) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = value.find(',', start);
    out.push_back(TrimOws(value.substr(start, comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

// 1*DIGIT, saturating at the largest uint64_t (any such length is over every limit).
bool ParseDigits(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = uint64_t(c - '0');
    v = v > (std::numeric_limits<uint64_t>::max() - d) / 10 ? std::numeric_limits<uint64_t>::max()
                                                            : v * 10 + d;
  }
  *out = v;
  return true;
}

// The methods cpp-httplib parses (it refuses others with a generic 400).
bool KnownMethod(std::string_view m) {
  for (const char* known :
       {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"}) {
    if (m == known) return true;
  }
  return false;
}

// A field value's characters: visible ASCII, obs-text, SP and HTAB (no other control).
bool ValidFieldValue(std::string_view v) {
  return std::all_of(v.begin(), v.end(), [](char ch) {
    const unsigned char c = ch;
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

}  // namespace

void RequestLineParts(std::string_view head, std::string* method, std::string* target) {
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  *method = std::string(line.substr(0, std::min(sp1, line.size())));
  target->clear();
  if (sp2 != std::string_view::npos) {
    *target = std::string(line.substr(sp1 + 1, std::min(sp2 - sp1 - 1, kMaxRequestLineBytes)));
  }
}

size_t FindHeadEnd(std::string_view data, size_t from) {
  const size_t at = data.find("\r\n\r\n", from >= 3 ? from - 3 : 0);
  return at == std::string_view::npos ? at : at + 4;
}

namespace {

// Sets the refusal; false, for `return Refuse(...)` in the checks below.
bool Refuse(RequestHead* h, int status, std::string why) {
  h->status = status;
  h->reason = std::move(why);
  return false;
}

// method SP request-target SP HTTP-version, single spaces, in the forms cpp-httplib reads.
bool CheckRequestLine(std::string_view line, RequestHead* h, bool* http10) {
  RequestLineParts(line, &h->method, &h->target);
  if (line.size() + 2 > kMaxRequestLineBytes) {
    return Refuse(h, 414,
                  "the request line is over " + std::to_string(kMaxRequestLineBytes) + " bytes");
  }
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Refuse(h, 400,
                  "malformed request line " + Quote(line) +
                      " (expected 'METHOD TARGET HTTP/1.1', single spaces)");
  }
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(h->method)) return Refuse(h, 400, "malformed method " + Quote(h->method));
  if (h->target.empty() || !std::all_of(h->target.begin(), h->target.end(),
                                        [](char c) { return c > 0x20 && c < 0x7f; })) {
    return Refuse(h, 400, "malformed request target " + Quote(h->target));
  }
  if (std::count(h->target.begin(), h->target.end(), '?') > 1) {
    return Refuse(h, 400, "the request target " + Quote(h->target) + " has more than one '?'");
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return Refuse(h, 400, "malformed HTTP version " + Quote(version));
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Refuse(h, 505, "HTTP version " + Quote(version) + " is not supported (HTTP/1.1 is)");
  }
  if (!KnownMethod(h->method)) {
    return Refuse(h, 501, "method " + Quote(h->method) + " is not supported");
  }
  *http10 = version == "HTTP/1.0";
  return true;
}

// What the header section says of the body's length (views into the head).
struct FramingFields {
  std::vector<std::string_view> lengths, codings;  // Content-Length, Transfer-Encoding elements
  int coding_fields = 0, hosts = 0;
};

// The header lines from `pos` to the blank line: each `Name: value`, strictly.
bool CheckFields(std::string_view head, size_t pos, FramingFields* f, RequestHead* h) {
  for (;;) {
    const size_t eol = head.find("\r\n", pos);
    if (eol == std::string_view::npos) return Refuse(h, 400, "the request head is not terminated");
    if (eol == pos) return true;  // the blank line
    const std::string_view field = head.substr(pos, eol - pos);
    pos = eol + 2;
    if (field.size() + 2 > kMaxFieldLineBytes) {
      return Refuse(h, 431,
                    "a header line is over " + std::to_string(kMaxFieldLineBytes) + " bytes");
    }
    if (IsOws(field[0])) {
      return Refuse(h, 400, "a header line starts with whitespace (folded lines are not accepted)");
    }
    const size_t colon = field.find(':');
    const std::string_view name = field.substr(0, std::min(colon, field.size()));
    if (colon == std::string_view::npos || !IsToken(name)) {
      return Refuse(h, 400,
                    "malformed header line " + Quote(field) +
                        " (expected 'Name: value', no whitespace before the colon)");
    }
    const std::string_view value = TrimOws(field.substr(colon + 1));
    if (!ValidFieldValue(value)) {
      return Refuse(h, 400, "header " + Quote(name) + " has a control character in its value");
    }
    if (EqualsIgnoringCase(name, "Content-Length")) {
      for (std::string_view e : ListElements(value)) f->lengths.push_back(e);
    } else if (EqualsIgnoringCase(name, "Transfer-Encoding")) {
      ++f->coding_fields;
      for (std::string_view e : ListElements(value)) f->codings.push_back(e);
    } else if (EqualsIgnoringCase(name, "Host")) {
      ++f->hosts;
    }
  }
}

// RFC 9112 section 6.3, refusing every case where the length is not certain.
bool DecideFraming(const FramingFields& f, bool http10, uint64_t max_body_bytes, RequestHead* h) {
  if (!f.codings.empty()) {
    if (!f.lengths.empty()) {
      return Refuse(h, 400, "the request has both Content-Length and Transfer-Encoding");
    }
    if (http10) return Refuse(h, 400, "an HTTP/1.0 request cannot have a Transfer-Encoding");
    if (!EqualsIgnoringCase(f.codings.back(), "chunked")) {
      return Refuse(h, 400,
                    "the request's Transfer-Encoding " + Quote(f.codings.back()) +
                        " does not end with chunked: its length is unknown");
    }
    if (f.codings.size() > 1 || f.coding_fields > 1) {
      for (size_t i = 0; i + 1 < f.codings.size(); ++i) {
        if (IsToken(f.codings[i]) && !EqualsIgnoringCase(f.codings[i], "chunked")) {
          return Refuse(
              h, 501,
              "transfer coding " + Quote(f.codings[i]) + " is not supported (only chunked is)");
        }
      }
      return Refuse(h, 400, "the request's Transfer-Encoding is not a single 'chunked'");
    }
    h->framing = BodyFraming::kChunked;
    return true;
  }
  if (f.lengths.empty()) return true;
  uint64_t first = 0;
  for (size_t i = 0; i < f.lengths.size(); ++i) {
    uint64_t n = 0;
    if (!ParseDigits(f.lengths[i], &n)) {
      return Refuse(h, 400, "Content-Length " + Quote(f.lengths[i]) + " is not a number of bytes");
    }
    if (i == 0) first = n;
    if (n != first) return Refuse(h, 400, "the request has differing Content-Length values");
  }
  if (first > max_body_bytes) {
    return Refuse(h, 413,
                  "the request body (" + std::to_string(first) +
                      " bytes declared) is larger than the server's limit of " +
                      std::to_string(max_body_bytes) + " bytes (--max-body-bytes)");
  }
  h->framing = first > 0 ? BodyFraming::kLength : BodyFraming::kNone;
  h->length = first;
  return true;
}

}  // namespace

RequestHead ParseRequestHead(std::string_view head, uint64_t max_body_bytes) {
  RequestHead h;
  // Every CR starts a CRLF and every LF ends one: a recipient that took a bare LF for a line end
  // (as a proxy may) would see other header lines than one that does not (cpp-httplib skips them).
  for (size_t i = 0; i < head.size(); ++i) {
    const char c = head[i];
    if ((c == '\r' && (i + 1 == head.size() || head[i + 1] != '\n')) ||
        (c == '\n' && (i == 0 || head[i - 1] != '\r'))) {
      Refuse(&h, 400, "the request head has a bare CR or LF (lines must end with CRLF)");
      return h;
    }
    if (c == '\0') {
      Refuse(&h, 400, "the request head has a NUL byte");
      return h;
    }
  }
  if (head.size() > kMaxHeadBytes) {
    Refuse(&h, 431, "the request head is over " + std::to_string(kMaxHeadBytes) + " bytes");
    return h;
  }
  const size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) {
    Refuse(&h, 400, "the request head is not terminated");
    return h;
  }
  bool http10 = false;
  FramingFields fields;
  if (!CheckRequestLine(head.substr(0, eol), &h, &http10) ||
      !CheckFields(head, eol + 2, &fields, &h)) {
    return h;
  }
  if (fields.hosts > 1) {
    Refuse(&h, 400, "the request has more than one Host header");
  } else if (fields.hosts == 0 && !http10) {
    Refuse(&h, 400, "an HTTP/1.1 request needs a Host header");
  } else {
    DecideFraming(fields, http10, max_body_bytes, &h);
  }
  return h;
}

void ChunkedBodyCheck::Fail(std::string why) {
  state_ = State::kFailed;
  error_ = "malformed chunked body: " + std::move(why);
}

size_t ChunkedBodyCheck::Feed(const char* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (state_ == State::kDone || state_ == State::kFailed) return 0;
    if (state_ == State::kData) {  // the chunk's data, as a whole
      const size_t take = size_t(std::min<uint64_t>(left_, n - i));
      left_ -= take;
      i += take;
      if (left_ == 0) state_ = State::kDataCr;
      continue;
    }
    Take(p[i++]);
    if (state_ == State::kFailed) return 0;
    if (state_ == State::kDone) return i;
  }
  return n;
}

void ChunkedBodyCheck::Take(char c) {
  // Chunk sizes up to 15 hex digits: no overflow, and far beyond any body limit.
  constexpr int kMaxDigits = 15;
  constexpr size_t kMaxLine = 4096;  // an extension or a trailer field
  const bool control = (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
  switch (state_) {
    case State::kSize: {
      const int v = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (v >= 0) {
        if (++digits_ > kMaxDigits) return Fail("a chunk size over 15 hex digits");
        left_ = left_ * 16 + uint64_t(v);
      } else if (digits_ == 0) {
        Fail("a chunk size must start with a hex digit");
      } else if (IsOws(c) || c == ';') {
        state_ = c == ';' ? State::kExtension : State::kSizeSpace;
        line_ = 0;
      } else if (c == '\r') {
        state_ = State::kSizeLf;
      } else {
        Fail("a chunk size has a character that is not a hex digit");
      }
      return;
    }
    case State::kSizeSpace:
      if (c == ';') {
        state_ = State::kExtension;
      } else if (!IsOws(c)) {
        Fail("whitespace after a chunk size is followed by something other than ';'");
      }
      return;
    case State::kExtension:
    case State::kTrailer:
      if (c == '\r') {
        state_ = state_ == State::kExtension ? State::kSizeLf : State::kTrailerLf;
      } else if (control) {
        Fail("a control character in a chunk extension or trailer field");
      } else if (++line_ > kMaxLine) {
        Fail("a chunk extension or trailer field over 4096 bytes");
      }
      return;
    case State::kSizeLf:
      if (c != '\n') return Fail("a chunk size line does not end with CRLF");
      digits_ = 0;
      state_ = left_ == 0 ? State::kTrailerStart : State::kData;
      return;
    case State::kDataCr:
    case State::kDataLf:
      if (c != (state_ == State::kDataCr ? '\r' : '\n')) {
        return Fail("chunk data is not followed by CRLF");
      }
      state_ = state_ == State::kDataCr ? State::kDataLf : State::kSize;
      return;
    case State::kTrailerStart:
      if (c == '\r') {
        state_ = State::kEndLf;
      } else if (!IsTchar(static_cast<unsigned char>(c))) {
        Fail("a malformed trailer field");
      } else {
        state_ = State::kTrailer;
        line_ = 1;
      }
      return;
    case State::kTrailerLf:
      if (c != '\n') return Fail("a trailer field does not end with CRLF");
      state_ = State::kTrailerStart;
      return;
    case State::kEndLf:
      if (c != '\n') return Fail("the body does not end with CRLF");
      state_ = State::kDone;
      return;
    case State::kData:
    case State::kDone:
    case State::kFailed:
      return;
  }
}

}  // namespace promptcache
