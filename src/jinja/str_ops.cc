#include "jinja/str_ops.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "jinja/code_points.h"

namespace promptcache::jinja {

size_t FindBytes(std::string_view hay, std::string_view needle, size_t from) {
  if (from > hay.size()) return std::string_view::npos;
  if (needle.size() <= 16) return hay.find(needle, from);
  // The naive search is quadratic on adversarial input ("aaa...ab" in "aaa...a").
  const auto it = std::search(hay.begin() + from, hay.end(),
                              std::boyer_moore_searcher(needle.begin(), needle.end()));
  return it == hay.end() ? std::string_view::npos : static_cast<size_t>(it - hay.begin());
}

int64_t CodePointIndex(std::string_view s, size_t byte) {
  return static_cast<int64_t>(CodePointCount(s.substr(0, byte)));
}

namespace {

std::vector<char32_t> CodePoints(std::string_view s) {
  std::vector<char32_t> out;
  char32_t c;
  for (size_t pos = 0; pos < s.size();) {
    pos += DecodeUtf8(s, pos, &c);
    out.push_back(c);
  }
  return out;
}

}  // namespace

Text Strip(const Text& t, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<char32_t> set = chars ? CodePoints(*chars) : std::vector<char32_t>();
  const auto strip = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : IsSpace(c);
  };
  const std::string& s = t.str();
  size_t begin = 0, end = 0;
  bool seen = false;
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    if (strip(c)) continue;
    if (!seen) begin = pos;
    seen = true;
    end = pos + len;
  }
  if (!seen) return Text();
  return t.Slice(left ? begin : 0, right ? end : s.size());
}

namespace {

// Splits on runs of whitespace, as str.split() without a separator.
std::vector<Text> SplitSpace(const Text& t, int64_t maxsplit, bool from_right) {
  const std::string& s = t.str();
  std::vector<std::pair<size_t, size_t>> words;  // byte ranges
  char32_t c;
  size_t start = std::string::npos;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    if (IsSpace(c)) {
      if (start != std::string::npos) words.emplace_back(start, pos);
      start = std::string::npos;
    } else if (start == std::string::npos) {
      start = pos;
    }
  }
  if (start != std::string::npos) words.emplace_back(start, s.size());
  std::vector<Text> out;
  const size_t n = words.size();
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= n) {
    for (const auto& [b, e] : words) out.push_back(t.Slice(b, e));
    return out;
  }
  const size_t k = static_cast<size_t>(maxsplit);
  if (!from_right) {
    for (size_t i = 0; i < k; ++i) out.push_back(t.Slice(words[i].first, words[i].second));
    out.push_back(t.Slice(words[k].first, s.size()));  // the rest keeps its trailing space
  } else {
    out.push_back(t.Slice(0, words[n - k - 1].second));
    for (size_t i = n - k; i < n; ++i) out.push_back(t.Slice(words[i].first, words[i].second));
  }
  return out;
}

}  // namespace

Result<std::vector<Text>> Split(const Text& t, const std::optional<std::string>& sep,
                                int64_t maxsplit, bool from_right) {
  if (!sep) return SplitSpace(t, maxsplit, from_right);
  if (sep->empty()) return InvalidArgument("empty separator");
  const std::string& s = t.str();
  std::vector<size_t> cuts;  // start of each separator used
  for (size_t pos = 0; (pos = FindBytes(s, *sep, pos)) != std::string::npos; pos += sep->size()) {
    cuts.push_back(pos);
  }
  if (maxsplit >= 0 && cuts.size() > static_cast<size_t>(maxsplit)) {
    if (from_right) {
      // rsplit matches from the end: recompute non-overlapping matches right to left.
      std::vector<size_t> right;
      for (size_t end = s.size(); right.size() < static_cast<size_t>(maxsplit);) {
        if (end < sep->size()) break;
        const size_t pos = s.rfind(*sep, end - sep->size());
        if (pos == std::string::npos) break;
        right.push_back(pos);
        end = pos;
      }
      cuts.assign(right.rbegin(), right.rend());
    } else {
      cuts.resize(maxsplit);
    }
  }
  std::vector<Text> out;
  size_t at = 0;
  for (size_t cut : cuts) {
    out.push_back(t.Slice(at, cut));
    at = cut + sep->size();
  }
  out.push_back(t.Slice(at, s.size()));
  return out;
}

std::vector<Text> SplitLines(const Text& t, bool keepends) {
  const std::string& s = t.str();
  std::vector<Text> out;
  size_t line = 0;
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    if (!IsLineBreak(c)) continue;
    size_t end = pos + len;
    if (c == '\r' && end < s.size() && s[end] == '\n') end += 1, len += 1;
    out.push_back(t.Slice(line, keepends ? end : pos));
    line = end;
  }
  if (line < s.size()) out.push_back(t.Slice(line, s.size()));
  return out;
}

std::optional<Text> Replace(const Text& t, std::string_view old, const Text& repl, int64_t count,
                            size_t cap) {
  const std::string& s = t.str();
  TextBuilder out(cap);
  int64_t done = 0;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    char32_t c;
    size_t pos = 0;
    for (size_t len = 0; pos < s.size() && (count < 0 || done < count); pos += len, ++done) {
      len = DecodeUtf8(s, pos, &c);
      out.Append(repl);
      out.Append(t, pos, pos + len);
    }
    if (count < 0 || done < count) out.Append(repl);
    out.Append(t, pos, s.size());
  } else {
    size_t at = 0;
    for (size_t pos;
         (count < 0 || done < count) && (pos = FindBytes(s, old, at)) != std::string::npos;
         ++done) {
      out.Append(t, at, pos);
      out.Append(repl);
      at = pos + old.size();
      if (out.overflow()) break;
    }
    out.Append(t, at, s.size());
  }
  if (out.overflow()) return std::nullopt;
  return out.Finish();
}

namespace {

bool IsCased(char32_t c) { return IsUpper(c) || IsLower(c); }

std::string Utf8(char32_t c) {
  std::string out;
  AppendUtf8(out, c);
  return out;
}

// Python's upper- and title-casing of one character: "ß" becomes "SS" / "Ss".
std::string UpperOf(char32_t c, bool title) {
  if (c == 0xDF) return title ? "Ss" : "SS";
  return Utf8(ToUpper(c));
}

// Python's lower-casing, with the final sigma: "Σ" after a letter and not before one is "ς".
std::string LowerOf(char32_t c, bool after_cased, bool before_cased) {
  if (c == 0x3A3 && after_cased && !before_cased) return Utf8(0x3C2);
  return Utf8(ToLower(c));
}

}  // namespace

Text ChangeCase(const Text& t, CaseChange change) {
  const std::string& s = t.str();
  TextBuilder out;
  bool previous_cased = false;  // the character before is a letter with case
  bool word_start = true;       // kJinjaTitle
  size_t index = 0;
  char32_t c, next = 0;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len, ++index) {
    len = DecodeUtf8(s, pos, &c);
    if (pos + len < s.size()) DecodeUtf8(s, pos + len, &next);
    const bool next_cased = pos + len < s.size() && IsCased(next);
    const std::string lower = LowerOf(c, previous_cased, next_cased);
    std::string m;
    switch (change) {
      case CaseChange::kUpper:
        m = UpperOf(c, false);
        break;
      case CaseChange::kLower:
        m = lower;
        break;
      case CaseChange::kSwap:
        m = IsUpper(c) ? lower : IsLower(c) ? UpperOf(c, false) : Utf8(c);
        break;
      case CaseChange::kCapitalize:
        m = index == 0 ? UpperOf(c, true) : lower;
        break;
      case CaseChange::kTitle:
        m = previous_cased ? lower : UpperOf(c, true);
        break;
      case CaseChange::kJinjaTitle: {
        const bool separator =
            IsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        m = separator ? Utf8(c) : word_start ? UpperOf(c, false) : lower;
        word_start = separator;
        break;
      }
    }
    previous_cased = IsCased(c);
    if (m == std::string_view(s).substr(pos, len)) {
      out.Append(t, pos, pos + len);
    } else {
      out.AppendLike(m, t, pos);
    }
  }
  return out.Finish();
}

Text HtmlEscape(const Text& t) {
  if (t.markup()) return t;
  const std::string& s = t.str();
  TextBuilder out;
  size_t at = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char* entity = nullptr;
    switch (s[i]) {
      case '&':
        entity = "&amp;";
        break;
      case '<':
        entity = "&lt;";
        break;
      case '>':
        entity = "&gt;";
        break;
      case '"':
        entity = "&#34;";
        break;
      case '\'':
        entity = "&#39;";
        break;
      default:
        continue;
    }
    out.Append(t, at, i);
    out.AppendLike(entity, t, i);
    at = i + 1;
  }
  out.Append(t, at, s.size());
  Text result = out.Finish();
  result.set_markup(true);
  return result;
}

Result<Text> Pad(const Text& t, int64_t width, char32_t fill, char align, size_t cap) {
  const int64_t n = static_cast<int64_t>(CodePointCount(t.str()));
  if (width <= n) return t;
  if (static_cast<uint64_t>(width) > cap) {
    return ResourceExhausted("padding to " + std::to_string(width) + " is past the limit");
  }
  const int64_t total = width - n;
  int64_t left = 0;
  if (align == '>') left = total;
  // str.center puts the odd space on the right for even widths and the left for odd ones.
  if (align == '^') left = total / 2 + (total & width & 1);
  std::string fill_text;
  AppendUtf8(fill_text, fill);
  TextBuilder out;
  for (int64_t i = 0; i < left; ++i) out.AppendTrusted(fill_text);
  out.Append(t);
  for (int64_t i = left; i < total; ++i) out.AppendTrusted(fill_text);
  return out.Finish();
}

}  // namespace promptcache::jinja
