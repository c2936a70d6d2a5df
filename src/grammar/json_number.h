// Numbers within bounds, for JSON Schema's minimum, maximum, exclusiveMinimum and
// exclusiveMaximum (json_schema.h): a digit-wise grammar that accepts exactly the decimal numerals
// whose value is within the bounds, compared as exact decimals (no floating point), at any
// magnitude (integers past 64 bits included).
//
// What is generated: integers as -?(0|[1-9][0-9]*), numbers as that with an optional fraction,
// never an exponent. Where a side is unbounded, integers have at most 16 digits (or as many as
// the other bound has) and numbers at most 15 before the point. A number has at most 15
// significant digits (the integer part's digits count, and the fraction takes what is left; a
// zero integer part leaves 15): decimals of at most 15 significant digits map to distinct
// doubles in the same order, so a validator that compares doubles (JavaScript's, ajv) agrees with
// the exact comparison, exclusive bounds included. Within those lengths the grammar is exact: it
// accepts every numeral in range and no other. "-0" is not generated.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/regex_nfa.h"

namespace promptcache::grammar_internal {

// An exact decimal: sign, integer digits (no leading zeros; "0" for zero), fraction digits (no
// trailing zeros).
struct Decimal {
  bool neg = false;
  std::string ip = "0";
  std::string fp;

  // JSON number text (with a fraction and an exponent, as a schema writes a bound); an exponent
  // beyond +-400 is refused.
  static Result<Decimal> Parse(std::string_view text);
  bool IsZero() const { return ip == "0" && fp.empty(); }
  std::string ToString() const;
};

// <0, 0, >0 as a < b, a == b, a > b.
int Compare(const Decimal& a, const Decimal& b);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

// The GBNF expression of the numbers (integers when `integer`) within the bounds, its rules
// added to `sink`; "" when no number is within them.
std::string NumberRangeGbnf(const std::optional<NumberBound>& lo,
                            const std::optional<NumberBound>& hi, bool integer,
                            const RuleSink& sink);

}  // namespace promptcache::grammar_internal
