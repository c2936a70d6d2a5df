// Python's string operations on Text, keeping the marks of user-written bytes: each output byte
// is marked as the input byte it came from (a case change or an escape sequence stands for its
// source character), and text the operation itself writes (padding, separators) is the template's.
// Indices and lengths count code points, as Python does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "jinja/text.h"
#include "jinja/value.h"

namespace promptcache::jinja {

// The first occurrence of `needle` in `hay` at or after byte `from`, or npos; linear time for
// long needles too.
size_t FindBytes(std::string_view hay, std::string_view needle, size_t from);
// The code point index of byte offset `byte` of `s`.
int64_t CodePointIndex(std::string_view s, size_t byte);

// str.strip/lstrip/rstrip: `chars` (a set of code points) or, when absent, whitespace.
Text Strip(const Text& t, const std::optional<std::string>& chars, bool left, bool right);
// str.split (from_right: str.rsplit); maxsplit < 0: no limit. InvalidArgument for an empty sep.
Result<std::vector<Text>> Split(const Text& t, const std::optional<std::string>& sep,
                                int64_t maxsplit, bool from_right);
// str.splitlines.
std::vector<Text> SplitLines(const Text& t, bool keepends);
// str.replace, up to `count` replacements (< 0: all), capped at `cap` bytes (nullopt past it).
std::optional<Text> Replace(const Text& t, std::string_view old, const Text& repl, int64_t count,
                            size_t cap);

enum class CaseChange {
  kUpper,
  kLower,
  kSwap,
  kCapitalize,  // str.capitalize
  kTitle,       // str.title
  kJinjaTitle,  // Jinja2's title filter: words start after spaces, -, (, {, [ and <
};
Text ChangeCase(const Text& t, CaseChange change);

// markupsafe.escape: & < > " ' as HTML entities; the result is Markup.
Text HtmlEscape(const Text& t);

// str.center/ljust/rjust with a one-character fill; InvalidArgument past `cap` bytes.
Result<Text> Pad(const Text& t, int64_t width, char32_t fill, char align, size_t cap);

// `format % args` (printf-style: %s %r %d %i %f %e %g %x %o %c %%, flags, width, precision,
// %(name)s with a dict).
Result<Text> PercentFormat(Interpreter& in, const Text& format, const Value& args);
// str.format: {} {0} {name} {0.attr} {0[key]}, !r/!s, and [[fill]align][sign][0][width]
// [.precision][type] specs.
Result<Text> StrFormat(Interpreter& in, const Text& format, const CallArgs& args);

}  // namespace promptcache::jinja
