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
// the recognizer's state are bounded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace promptcache {

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

class Grammar {
 public:
  // Parses GBNF text. The start rule is `root`.
  static Result<std::shared_ptr<const Grammar>> Parse(std::string_view text);

  // rules()[r] is the list of alternatives of rule r; each ends with a kEnd element.
  const std::vector<std::vector<std::vector<GrammarElement>>>& rules() const { return rules_; }
  int32_t root() const { return root_; }
  const std::string& rule_name(int32_t r) const { return names_[r]; }

 private:
  friend class GbnfParser;
  std::vector<std::vector<std::vector<GrammarElement>>> rules_;
  std::vector<std::string> names_;
  int32_t root_ = -1;
};

// The recognizer's position in the text: every way the grammar can go on.
class GrammarState {
 public:
  explicit GrammarState(std::shared_ptr<const Grammar> grammar);

  // Consumes bytes of UTF-8 (a token's text). False, leaving the state unchanged, when the
  // grammar cannot continue with them. A multi-byte character may be split across calls.
  bool Advance(std::string_view bytes);
  // Whether Advance(bytes) would succeed, without changing the state.
  bool Accepts(std::string_view bytes) const;
  // Advance for a state about to be dropped on failure (no copy kept): false leaves it
  // unspecified.
  bool AdvanceOrSpoil(std::string_view bytes) { return Feed(bytes, &stacks_, &partial_); }
  // The text so far is a complete sentence of the grammar (the model may stop here).
  bool Complete() const;
  // Nothing may follow: complete, and no stack can take another character.
  bool Finished() const;
  // A key identifying the state (equal states, equal keys; for mask caches).
  std::string Key() const;

 private:
  using Stack = std::vector<const GrammarElement*>;
  bool Step(uint32_t cp, std::vector<Stack>* stacks) const;
  bool Feed(std::string_view bytes, std::vector<Stack>* stacks, std::string* partial) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  std::string partial_;  // the leading bytes of a character not complete yet
};

}  // namespace promptcache
