// Finite automata over Unicode code points, for the string keywords of JSON Schema (json_schema.h):
// `pattern` (an ECMAScript regular expression, parsed here), `format` (each written as such an
// expression, json_formats.cc), `minLength`/`maxLength` (a counter), and the property names an
// object may add. Each is an automaton over the string's code points; the automata of one
// string's keywords are intersected (a product: exact), trimmed of states that cannot reach an
// end, and written as right-linear GBNF whose characters are JSON-encoded, so that the grammar
// accepts exactly the JSON strings whose value is in every language.
//
// Regular expressions follow ECMAScript's syntax and meaning with the `u` flag (as ajv compiles
// `pattern`): classes with ranges and negation, \d \w \s \D \W \S, escapes (\n \t \xHH \uHHHH
// \u{...} \cX ...), `.` (any code point but line terminators), quantifiers * + ? {m} {m,} {m,n}
// with their lazy forms (the same language), alternation, groups (capturing, non-capturing,
// named), and the anchors ^ and $ anywhere they may stand. A pattern is unanchored (JSON Schema:
// "abc" matches any string containing abc). Back-references, lookaround, \b \B and \p{...} are
// refused, naming the construct. Sizes are bounded: an automaton over kMaxNfaStates is refused.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace promptcache::grammar_internal {

// Sorted, disjoint, non-adjacent inclusive code point ranges.
using CharSet = std::vector<std::pair<uint32_t, uint32_t>>;

CharSet Intersect(const CharSet& a, const CharSet& b);
CharSet Union(const CharSet& a, const CharSet& b);
CharSet Complement(const CharSet& a);  // within 0..0x10FFFF
bool Contains(const CharSet& a, uint32_t cp);

// The largest automaton built (states); an intersection or pattern past it is refused.
inline constexpr size_t kMaxNfaStates = 20000;
inline constexpr size_t kMaxNfaEdges = 60000;

// An automaton without empty moves: from each state, edges on sets of code points.
struct Nfa {
  struct Edge {
    CharSet chars;
    int to;
  };
  std::vector<std::vector<Edge>> edges;
  std::vector<bool> accept;
  int start = 0;

  size_t size() const { return edges.size(); }
  size_t EdgeCount() const;
  // Whether the whole of `text` (UTF-8) is in the language.
  bool Matches(std::string_view text) const;
  // Whether no string is in the language (after Trim, the start cannot reach an accepting state).
  bool Empty() const;
};

// The automaton of the strings an ECMAScript regular expression matches somewhere (JSON
// Schema's unanchored `pattern`). InvalidArgument names what is refused ("lookahead '(?='").
Result<Nfa> PatternNfa(std::string_view pattern);
// The strings of a JSON Schema `format` (json_formats.cc): date-time, date, time, duration, email,
// hostname, ipv4, ipv6, uuid, uri. InvalidArgument for another format. Built once, then shared.
Result<const Nfa*> FormatNfa(std::string_view format);
// Strings of min to max code points (max < 0: no upper bound).
Nfa LengthNfa(int min, int max);
// Any string but the given ones (each UTF-8).
Nfa ExcludeNfa(const std::vector<std::string>& words);
// The strings in both languages (trimmed). InvalidArgument when the product grows past the
// bounds above (`what` names the keywords in the message).
Result<Nfa> IntersectNfa(const Nfa& a, const Nfa& b, const std::string& what);
// The minimal deterministic automaton of the same language (subset construction over the
// classes of code points the edges distinguish, then Moore's partition refinement), or `nfa`
// itself when the deterministic one would have more than `limit` states.
Nfa Minimal(const Nfa& nfa, size_t limit = kMaxNfaStates);
// Without states unreachable from the start or from which no accepting state can be reached.
Nfa Trim(const Nfa& nfa);

// Where generated rules go: reserve() names a rule whose body comes later (rules refer to each
// other in cycles), define(name, body) gives it.
struct RuleSink {
  std::function<std::string()> reserve;
  std::function<void(const std::string&, std::string)> define;
};

// The GBNF of a JSON string (quotes included) whose value is in the language of `nfa` (not
// empty). Characters are written raw, except '"', '\' and the control characters, written as
// JSON escapes (\" \\ \n \u001f ...); '/' may also be written \/.
std::string NfaToJsonString(const Nfa& nfa, const RuleSink& sink);

// A JSON-encoded character whose value is in `set` (not empty), as a GBNF expression.
std::string JsonCharGbnf(const CharSet& set);

}  // namespace promptcache::grammar_internal
