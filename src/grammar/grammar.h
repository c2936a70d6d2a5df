// Constrained decoding: grammars that restrict which tokens a model may generate.
//
// A Grammar is llama.cpp's GBNF (`root ::= ...`, "literals", [character classes], rule
// references, ( groups ), the postfix operators * + ? {m,n}, `.`, # comments) parsed into rules
// whose alternatives are sequences of character sets and rule references, over Unicode code
// points. A GrammarState is a pushdown recognizer over those rules: a set of stacks, each the
// elements still to match (innermost rule first), advanced one code point at a time; text is
// accepted while some stack survives, and complete once some stack is empty. Left recursion is
// refused when the grammar is parsed (it would expand forever), so every operation terminates.
//
// Input is untrusted (a request's `grammar` field, or a JSON schema turned into GBNF by
// json_schema.h): parse errors are one-line Status messages, and the size of a grammar and of
// the recognizer's state are bounded. Nested or overlapping optional repeats multiply the ways a
// grammar can go on ((("a"{0,8}){0,8}){0,8} has 65 at its start, its {0,1000} form a million), so
// Parse counts, for the start and for every point a character can lead to, how many stacks the
// recognizer would hold there (linear in the grammar's size) and refuses a grammar over
// kMaxGrammarStacks, naming the rule; it also computes the start state, so that none of this
// work is left for the thread that decodes. Stacks are deduplicated as they are expanded, and
// each step has a work budget: a state that would still outgrow it at run time (ambiguity that
// accumulates over characters) makes Advance fail with overflowed() set, never a long step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace promptcache {

// The recognizer's bounds (documented in docs/server.md, "Limits and hostile clients"): the
// stacks it may hold at once, how deep one may grow, and the work one character may cost, in
// units of a stack element copied (a stack created costs its length plus 64: about 1.5-5 ns a
// unit here, so a step takes at most a few milliseconds).
inline constexpr size_t kMaxGrammarStacks = 4096;
inline constexpr size_t kMaxGrammarStackDepth = 4096;
inline constexpr size_t kMaxGrammarStepWork = size_t{1} << 20;

struct GrammarElement {
  enum Kind : uint8_t { kChars, kRule, kEnd };
  Kind kind = kEnd;
  bool negated = false;                               // kChars: any code point outside ranges
  int32_t rule = -1;                                  // kRule
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars: inclusive code point ranges
  bool Matches(uint32_t cp) const;
};

// `text` as a GBNF string literal ("...", with quotes, backslashes and control characters
// escaped), for grammars written by code.
std::string GbnfLiteral(std::string_view text);

// The recognizer's stacks, stored end to end so that a state is two vectors however many stacks
// it holds: stack i is elems[i == 0 ? 0 : ends[i - 1], ends[i]), the elements still to match,
// the next one (innermost) last.
struct GrammarStacks {
  std::vector<const GrammarElement*> elems;
  std::vector<uint32_t> ends;

  size_t size() const { return ends.size(); }
  uint32_t begin(size_t i) const { return i == 0 ? 0 : ends[i - 1]; }
  std::span<const GrammarElement* const> operator[](size_t i) const {
    return {elems.data() + begin(i), elems.data() + ends[i]};
  }
  void clear() {
    elems.clear();
    ends.clear();
  }
};

class Grammar {
 public:
  // Parses GBNF text. The start rule is `root`.
  static Result<std::shared_ptr<const Grammar>> Parse(std::string_view text);

  // rules()[r] is the list of alternatives of rule r; each ends with a kEnd element.
  const std::vector<std::vector<std::vector<GrammarElement>>>& rules() const { return rules_; }
  int32_t root() const { return root_; }
  const std::string& rule_name(int32_t r) const { return names_[r]; }
  // The recognizer's state before any text (computed by Parse, within the bounds).
  const GrammarStacks& start() const { return start_; }

 private:
  friend class GbnfParser;
  std::vector<std::vector<std::vector<GrammarElement>>> rules_;
  std::vector<std::string> names_;
  int32_t root_ = -1;
  GrammarStacks start_;
};

// The recognizer's position in the text: every way the grammar can go on.
class GrammarState {
 public:
  // The start state, which Parse computed: cheap.
  explicit GrammarState(std::shared_ptr<const Grammar> grammar);

  // Consumes bytes of UTF-8 (a token's text). False, leaving the state unchanged, when the
  // grammar cannot continue with them, or when a step would exceed the recognizer's bounds (then
  // overflowed() is true from here on). A multi-byte character may be split across calls.
  bool Advance(std::string_view bytes);
  // Whether Advance(bytes) would succeed, without changing the state (an overflow is still
  // remembered in overflowed()).
  bool Accepts(std::string_view bytes) const;
  // *next = this state after `bytes`, each step's work also taken from *budget (a caller's total
  // over many calls). False: *next is unspecified, and overflowed() (of *next) tells whether a
  // bound or the budget was hit rather than the grammar refusing the text.
  bool AdvanceInto(std::string_view bytes, GrammarState* next, size_t* budget) const;
  // The text so far is a complete sentence of the grammar (the model may stop here).
  bool Complete() const;
  // Nothing may follow: complete, and no stack can take another character.
  bool Finished() const;
  // A key identifying the state (equal states, equal keys; for mask caches).
  std::string Key() const;
  // Some step ran past the recognizer's bounds (kMaxGrammarStacks, kMaxGrammarStackDepth,
  // kMaxGrammarStepWork): the text was refused for that, not by the grammar.
  bool overflowed() const { return overflowed_; }

 private:
  enum class Outcome { kOk, kRefused, kOverflow };
  Outcome Feed(std::string_view bytes, const GrammarStacks& in, std::string_view in_partial,
               GrammarStacks* out, std::string* out_partial, size_t* budget) const;

  std::shared_ptr<const Grammar> grammar_;
  GrammarStacks stacks_;
  std::string partial_;  // the leading bytes of a character not complete yet
  mutable bool overflowed_ = false;
};

}  // namespace promptcache
