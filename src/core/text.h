// ASCII text helpers that several parsers share: trimming and the partial-marker test that
// streaming parsers use to hold back text that may be the start of a tag still arriving.
// Unicode-aware whitespace belongs to the Jinja interpreter (jinja/code_points.h); these cover
// the bytes that occur around markers, JSON and configuration values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace promptcache {

// Python's str.strip() whitespace, ASCII only: space, \t, \n, \r, \f, \v.
inline constexpr std::string_view kAsciiSpace = " \t\n\r\f\v";

inline bool IsAsciiSpace(char c) { return kAsciiSpace.find(c) != std::string_view::npos; }

// `s` without leading and trailing characters of `space`.
inline std::string_view Trim(std::string_view s, std::string_view space = kAsciiSpace) {
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

// Where the longest end of `s` that could begin `tag` starts (s.size(): none), so a stream can
// hold those bytes back until it knows whether the tag follows.
inline size_t PartialTagStart(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return s.size() - n;
  }
  return s.size();
}

}  // namespace promptcache
