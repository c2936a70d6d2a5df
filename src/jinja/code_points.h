// Python's view of a string for the Jinja interpreter: a sequence of code points. Lengths,
// indices, slices, iteration and case changes count code points, while promptcache keeps strings
// as UTF-8 bytes. Bytes that are not valid UTF-8 (a template file may hold any) count as one code
// point each (Python's "surrogateescape"), so every byte string has a well-defined length and
// nothing is lost. (Strict UTF-8 validation, which refuses such bytes, is tokenizer/utf8.h.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace promptcache::jinja {

// The code point starting at s[pos] (pos < s.size()) and its length in bytes (1 to 4). An invalid
// or truncated sequence gives its first byte alone, as the code point 0xDC00 + byte (Python's
// "surrogateescape" convention), so it never compares equal to a real character.
size_t DecodeUtf8(std::string_view s, size_t pos, char32_t* cp);
void AppendUtf8(std::string& out, char32_t cp);

// The byte offset of every code point of s, followed by s.size().
std::vector<size_t> CodePointOffsets(std::string_view s);
size_t CodePointCount(std::string_view s);

// Python's str.isspace, str.isdigit, ... for one code point. Letters and case cover ASCII,
// Latin-1, Latin Extended-A, Greek and Cyrillic, one code point to one (str_ops.cc adds the
// two special cases Python has there: "ß" upper-cased is "SS", and the final sigma).
bool IsSpace(char32_t c);
bool IsDigit(char32_t c);
bool IsAlpha(char32_t c);
bool IsUpper(char32_t c);
bool IsLower(char32_t c);
char32_t ToUpper(char32_t c);
char32_t ToLower(char32_t c);
// Python's str.splitlines line boundaries (\n, \r, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029; a
// "\r\n" pair is one boundary).
bool IsLineBreak(char32_t c);

}  // namespace promptcache::jinja
