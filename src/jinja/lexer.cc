#include "jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "jinja/code_points.h"

namespace promptcache::jinja {
namespace {

// Jinja2 reads newlines as "\n", "\r\n" or "\r" and writes "\n"; it drops one final newline.
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The end of the whitespace run (Python's \s) starting at pos.
size_t SkipSpace(std::string_view s, size_t pos) {
  char32_t c;
  while (pos < s.size()) {
    const size_t len = DecodeUtf8(s, pos, &c);
    if (!IsSpace(c)) break;
    pos += len;
  }
  return pos;
}

// Python's s.rstrip(): the length without trailing whitespace.
size_t RStripLength(std::string_view s) {
  size_t end = 0;
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    if (!IsSpace(c)) end = pos + len;
  }
  return end;
}

bool AllSpace(std::string_view s) { return !s.empty() && SkipSpace(s, 0) == s.size(); }

bool IsNameStart(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool IsNameChar(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options)
      : src_(std::move(source)), options_(options) {}

  Result<std::vector<Token>> Run();

 private:
  Status Fail(const std::string& message) const {
    return InvalidArgument("line " + std::to_string(line_) + ": " + message);
  }
  bool At(size_t pos, std::string_view s) const {
    return pos <= src_.size() && src_.compare(pos, s.size(), s) == 0;
  }
  void Emit(TokenType type, std::string value = {}) {
    tokens_.push_back({type, std::move(value), 0, 0, line_});
  }
  // Advances over src_[pos_, end), counting lines.
  void Consume(size_t end) {
    for (size_t i = pos_; i < end; ++i) line_ += src_[i] == '\n';
    pos_ = end;
  }
  void EmitData(std::string_view data, char sign, bool lstrip_candidate);
  // The length of the tag end matched at `pos` ("%}", "-%}  ", "%}\n", ...), or 0.
  size_t MatchEnd(size_t pos, std::string_view end) const;
  Status LexComment();
  Status LexRaw();
  Status LexTag(bool block);
  Status LexToken();
  size_t MatchFloat(size_t pos) const;
  size_t MatchInteger(size_t pos) const;
  Status LexString();

  std::string src_;
  LexOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
  std::string brackets_;  // the closing brackets expected inside a tag
};

void Lexer::EmitData(std::string_view data, char sign, bool lstrip_candidate) {
  if (sign == '-') {
    data = data.substr(0, RStripLength(data));
  } else if (sign != '+' && lstrip_candidate && options_.lstrip_blocks) {
    const size_t nl = data.rfind('\n');
    const size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
    if ((line_start > 0 || line_starting_) && AllSpace(data.substr(line_start))) {
      data = data.substr(0, line_start);
    }
  }
  if (!data.empty()) Emit(TokenType::kData, std::string(data));
}

size_t Lexer::MatchEnd(size_t pos, std::string_view end) const {
  const bool block = end != "}}";
  if (block && At(pos, "+") && At(pos + 1, end)) return 1 + end.size();
  if (At(pos, "-") && At(pos + 1, end)) return SkipSpace(src_, pos + 1 + end.size()) - pos;
  if (At(pos, end)) {
    size_t n = end.size();
    if (block && options_.trim_blocks && At(pos + n, "\n")) ++n;
    return n;
  }
  return 0;
}

Result<std::vector<Token>> Lexer::Run() {
  while (pos_ < src_.size()) {
    size_t tag = pos_;
    while ((tag = src_.find('{', tag)) != std::string::npos) {
      if (tag + 1 < src_.size() &&
          (src_[tag + 1] == '{' || src_[tag + 1] == '%' || src_[tag + 1] == '#')) {
        break;
      }
      ++tag;
    }
    if (tag == std::string::npos) {
      Emit(TokenType::kData, src_.substr(pos_));
      Consume(src_.size());
      break;
    }
    const char kind = src_[tag + 1];
    const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                          ? src_[tag + 2]
                          : '\0';
    EmitData(std::string_view(src_).substr(pos_, tag - pos_), sign, kind != '{');
    Consume(tag + 2 + (sign ? 1 : 0));
    if (kind == '#') {
      PC_RETURN_IF_ERROR(LexComment());
    } else if (kind == '{') {
      PC_RETURN_IF_ERROR(LexTag(/*block=*/false));
    } else {
      PC_RETURN_IF_ERROR(LexRaw());
    }
  }
  Emit(TokenType::kEof);
  return std::move(tokens_);
}

Status Lexer::LexComment() {
  for (size_t p = pos_; p < src_.size(); ++p) {
    const size_t n = MatchEnd(p, "#}");
    if (n == 0) continue;
    line_starting_ = src_[p + n - 1] == '\n';
    Consume(p + n);
    return Status::Ok();
  }
  return Fail("missing end of comment tag");
}

// At "{%": either a raw block or a statement.
Status Lexer::LexRaw() {
  size_t p = SkipSpace(src_, pos_);
  if (!At(p, "raw")) return LexTag(/*block=*/true);
  p = SkipSpace(src_, p + 3);
  size_t end_len = 0;
  if (At(p, "-%}")) {
    end_len = SkipSpace(src_, p + 3) - p;
  } else if (At(p, "%}")) {
    end_len = 2;
  } else {
    return LexTag(/*block=*/true);
  }
  line_starting_ = src_[p + end_len - 1] == '\n';
  Consume(p + end_len);
  for (size_t q = pos_; (q = src_.find("{%", q)) != std::string::npos; ++q) {
    const char sign = At(q + 2, "-") || At(q + 2, "+") ? src_[q + 2] : '\0';
    size_t r = SkipSpace(src_, q + 2 + (sign ? 1 : 0));
    if (!At(r, "endraw")) continue;
    r = SkipSpace(src_, r + 6);
    const size_t n = MatchEnd(r, "%}");
    if (n == 0) continue;
    EmitData(std::string_view(src_).substr(pos_, q - pos_), sign, true);
    line_starting_ = src_[r + n - 1] == '\n';
    Consume(r + n);
    return Status::Ok();
  }
  return Fail("missing end of raw directive");
}

Status Lexer::LexTag(bool block) {
  const std::string_view end = block ? "%}" : "}}";
  Emit(block ? TokenType::kBlockBegin : TokenType::kVarBegin);
  brackets_.clear();
  while (true) {
    const size_t p = SkipSpace(src_, pos_);
    Consume(p);
    if (pos_ >= src_.size()) return Status::Ok();  // the parser reports the missing end
    if (brackets_.empty()) {
      if (const size_t n = MatchEnd(pos_, end); n > 0) {
        Emit(block ? TokenType::kBlockEnd : TokenType::kVarEnd);
        line_starting_ = src_[pos_ + n - 1] == '\n';
        Consume(pos_ + n);
        return Status::Ok();
      }
    }
    PC_RETURN_IF_ERROR(LexToken());
  }
}

size_t Lexer::MatchFloat(size_t pos) const {
  if (pos > 0 && src_[pos - 1] == '.') return 0;
  // (\d+_)*\d+ : digits with single underscores between them.
  auto digits = [&](size_t p) -> size_t {
    size_t q = p;
    while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
      ++q;
      if (q + 1 < src_.size() && src_[q] == '_' &&
          std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
        ++q;
      }
    }
    return q - p;
  };
  size_t q = pos + digits(pos);
  if (q == pos) return 0;
  bool fraction = false;
  if (q + 1 < src_.size() && src_[q] == '.') {
    if (const size_t d = digits(q + 1); d > 0) {
      q += 1 + d;
      fraction = true;
    }
  }
  if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
    size_t r = q + 1;
    if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
    if (const size_t d = digits(r); d > 0) return r + d - pos;
  }
  return fraction ? q - pos : 0;
}

size_t Lexer::MatchInteger(size_t pos) const {
  auto run = [&](size_t p, auto is_digit) -> size_t {  // (_?D)+
    size_t q = p;
    while (true) {
      size_t r = q;
      if (r < src_.size() && src_[r] == '_') ++r;
      if (r < src_.size() && is_digit(src_[r])) {
        q = r + 1;
      } else {
        return q - p;
      }
    }
  };
  const char c = src_[pos];
  if (c == '0' && pos + 1 < src_.size()) {
    const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos + 1])));
    size_t n = 0;
    if (b == 'b') n = run(pos + 2, [](char d) { return d == '0' || d == '1'; });
    if (b == 'o') n = run(pos + 2, [](char d) { return d >= '0' && d <= '7'; });
    if (b == 'x') n = run(pos + 2, [](char d) { return HexValue(d) >= 0; });
    if (n > 0) return n + 2;
  }
  if (c >= '1' && c <= '9') {
    return 1 + run(pos + 1, [](char d) { return d >= '0' && d <= '9'; });
  }
  if (c == '0') return 1 + run(pos + 1, [](char d) { return d == '0'; });
  return 0;
}

Status Lexer::LexToken() {
  const unsigned char c = src_[pos_];
  if (const size_t n = MatchFloat(pos_); n > 0) {
    std::string digits;
    for (size_t i = pos_; i < pos_ + n; ++i) {
      if (src_[i] != '_') digits += src_[i];
    }
    Emit(TokenType::kFloat, digits);
    tokens_.back().number = std::strtod(digits.c_str(), nullptr);
    Consume(pos_ + n);
    return Status::Ok();
  }
  if (const size_t n = MatchInteger(pos_); n > 0) {
    std::string digits;
    for (size_t i = pos_; i < pos_ + n; ++i) {
      if (src_[i] != '_') digits += src_[i];
    }
    int base = 10;
    size_t skip = 0;
    if (digits.size() > 1 && digits[0] == '0' &&
        std::isalpha(static_cast<unsigned char>(digits[1]))) {
      const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[1])));
      base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
      skip = 2;
    }
    errno = 0;
    const long long v = std::strtoll(digits.c_str() + skip, nullptr, base);
    if (errno == ERANGE) return Fail("integer literal " + digits + " is too large");
    Emit(TokenType::kInteger, digits);
    tokens_.back().integer = v;
    Consume(pos_ + n);
    return Status::Ok();
  }
  if (IsNameStart(c)) {
    size_t q = pos_ + 1;
    while (q < src_.size() && IsNameChar(static_cast<unsigned char>(src_[q]))) ++q;
    Emit(TokenType::kName, src_.substr(pos_, q - pos_));
    Consume(q);
    return Status::Ok();
  }
  if (c == '\'' || c == '"') return LexString();
  static constexpr std::string_view kOps[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/",
                                              "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                              ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
  for (std::string_view op : kOps) {
    if (!At(pos_, op)) continue;
    if (op == "(" || op == "[" || op == "{") {
      brackets_ += op == "(" ? ')' : op == "[" ? ']' : '}';
    } else if (op == ")" || op == "]" || op == "}") {
      if (brackets_.empty()) return Fail("unexpected '" + std::string(op) + "'");
      if (brackets_.back() != op[0]) {
        return Fail("unexpected '" + std::string(op) + "', expected '" + brackets_.back() + "'");
      }
      brackets_.pop_back();
    }
    Emit(TokenType::kOperator, std::string(op));
    Consume(pos_ + op.size());
    return Status::Ok();
  }
  std::string shown(1, static_cast<char>(c));
  return Fail("unexpected char '" + shown + "'");
}

// A quoted literal, decoded as Python's "unicode_escape" codec decodes it (which is what Jinja2
// does): \n \t \\ \' \" \xhh \uhhhh \Uhhhhhhhh \ooo and line continuations; any other escape
// keeps its backslash.
Status Lexer::LexString() {
  const char quote = src_[pos_];
  std::string out;
  size_t q = pos_ + 1;
  for (; q < src_.size() && src_[q] != quote; ++q) {
    if (src_[q] != '\\') {
      out += src_[q];
      continue;
    }
    if (++q >= src_.size()) break;
    const char e = src_[q];
    static constexpr std::string_view kSimple = "\\'\"abfnrtv\n";
    static constexpr std::string_view kValue = "\\'\"\a\b\f\n\r\t\v";
    if (const size_t k = kSimple.find(e); k != std::string_view::npos) {
      if (e != '\n') out += kValue[k];  // backslash-newline continues the line
      continue;
    }
    if (e >= '0' && e <= '7') {
      char32_t v = 0;
      size_t n = 0;
      for (; n < 3 && q + n < src_.size() && src_[q + n] >= '0' && src_[q + n] <= '7'; ++n) {
        v = v * 8 + (src_[q + n] - '0');
      }
      q += n - 1;
      AppendUtf8(out, v);
      continue;
    }
    if (e == 'x' || e == 'u' || e == 'U') {
      const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      char32_t v = 0;
      for (size_t i = 1; i <= n; ++i) {
        const int h = q + i < src_.size() ? HexValue(src_[q + i]) : -1;
        if (h < 0) return Fail(std::string("truncated \\") + e + " escape in a string literal");
        v = v * 16 + h;
      }
      if (v > 0x10FFFF) return Fail("escape outside the Unicode range in a string literal");
      q += n;
      AppendUtf8(out, v);
      continue;
    }
    if (e == 'N') return Fail("\\N{...} escapes are not supported");
    out += '\\';
    out += e;
  }
  if (q >= src_.size()) return Fail("unterminated string literal");
  Emit(TokenType::kString, std::move(out));
  Consume(q + 1);
  return Status::Ok();
}

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& options) {
  Lexer lexer(NormalizeNewlines(source), options);
  return lexer.Run();
}

}  // namespace promptcache::jinja
