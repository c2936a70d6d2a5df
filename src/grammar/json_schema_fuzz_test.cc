// Property tests of the JSON Schema keywords: random values against random bounds, the compiled
// grammar's verdict checked against a direct check written here apart from the compiler (integer
// range membership in 128-bit arithmetic, decimal bounds as scaled integers, code points
// counted, and patterns against std::regex's ECMAScript engine with regex_search: JSON Schema's
// unanchored meaning). Mutations caught: an off-by-one in the range builder's lower digit, an
// exclusive bound read as inclusive, patterns compiled anchored, `.` matching a newline.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_test_util.h"

namespace promptcache {
namespace {

using i128 = __int128;

std::string Str(i128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  std::string out;
  for (; v != 0; v /= 10)
    out.insert(out.begin(), static_cast<char>('0' + (neg ? -(v % 10) : v % 10)));
  return (neg ? "-" : "") + out;
}

// A random int64 of a random magnitude (small and huge ones both).
int64_t RandomInt(std::mt19937_64& rng) {
  const int bits = static_cast<int>(rng() % 63) + 1;
  int64_t v = static_cast<int64_t>(rng() >> (64 - bits));
  return rng() % 2 ? -v : v;
}

TEST(JsonSchemaFuzz, IntegerRangesAgreeWithMembership) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 60; ++round) {
    i128 lo = RandomInt(rng), hi = RandomInt(rng);
    if (lo > hi) std::swap(lo, hi);
    const bool xlo = rng() % 3 == 0, xhi = rng() % 3 == 0;
    if (hi - lo < 2 + xlo + xhi) hi = lo + 3;
    const std::string schema = std::string("{\"type\": \"integer\", \"") +
                               (xlo ? "exclusiveMinimum" : "minimum") + "\": " + Str(lo) + ", \"" +
                               (xhi ? "exclusiveMaximum" : "maximum") + "\": " + Str(hi) + "}";
    auto g = Compile(schema);
    ASSERT_TRUE(g);
    // The edges, their neighbours, and random values near and far.
    std::vector<i128> probes = {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -1, 1};
    for (int i = 0; i < 40; ++i) {
      probes.push_back(lo + static_cast<i128>(rng() % 1000) - 500);
      probes.push_back(hi + static_cast<i128>(rng() % 1000) - 500);
      probes.push_back(RandomInt(rng));
    }
    for (const i128 v : probes) {
      const bool in = (xlo ? v > lo : v >= lo) && (xhi ? v < hi : v <= hi);
      EXPECT_EQ(Matches(g, Str(v)), in) << schema << " value " << Str(v);
    }
  }
}

// Decimals with up to 6 fraction digits as integers scaled by 10^6.
std::string Fixed(i128 scaled, int digits) {
  const bool neg = scaled < 0;
  const i128 a = neg ? -scaled : scaled;
  std::string frac = Str(a % 1000000);
  frac.insert(0, 6 - frac.size(), '0');
  frac = frac.substr(0, digits);
  std::string out = (neg ? "-" : "") + Str(a / 1000000);
  if (!frac.empty()) out += "." + frac;
  return out == "-0" ? "0" : out;
}

TEST(JsonSchemaFuzz, DecimalBoundsAgreeWithExactComparison) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 60; ++round) {
    // Bounds with up to 4 fraction digits, values with up to 6.
    auto bound = [&] { return (static_cast<i128>(rng() % 2000001) - 1000000) * 100; };
    i128 lo = bound(), hi = bound();
    if (lo > hi) std::swap(lo, hi);
    const bool xlo = rng() % 2, xhi = rng() % 2;
    if (hi - lo < 300) hi = lo + 300;
    const bool has_lo = rng() % 5 != 0, has_hi = rng() % 5 != 0;
    std::string schema = "{\"type\": \"number\"";
    if (has_lo)
      schema +=
          std::string(", \"") + (xlo ? "exclusiveMinimum" : "minimum") + "\": " + Fixed(lo, 4);
    if (has_hi)
      schema +=
          std::string(", \"") + (xhi ? "exclusiveMaximum" : "maximum") + "\": " + Fixed(hi, 4);
    schema += "}";
    auto g = Compile(schema);
    ASSERT_TRUE(g);
    std::vector<i128> probes = {lo, hi, lo - 1, lo + 1, hi - 1, hi + 1, lo - 100, hi + 100, 0};
    for (int i = 0; i < 60; ++i) {
      probes.push_back(lo + static_cast<i128>(rng() % 20001) - 10000);
      probes.push_back(hi + static_cast<i128>(rng() % 20001) - 10000);
    }
    for (const i128 v : probes) {
      const bool in =
          (!has_lo || (xlo ? v > lo : v >= lo)) && (!has_hi || (xhi ? v < hi : v <= hi));
      // Written with 6 fraction digits (trailing zeros kept) and, where exact, shorter.
      for (int digits : {6, 4, 0}) {
        const bool exact = digits == 6 || (v % (digits == 4 ? 100 : 1000000)) == 0;
        if (!exact) continue;
        EXPECT_EQ(Matches(g, Fixed(v, digits)), in) << schema << " value " << Fixed(v, digits);
      }
    }
  }
}

TEST(JsonSchemaFuzz, LengthsAgreeWithCodePointCounts) {
  std::mt19937_64 rng(3);
  // Characters of 1 to 4 UTF-8 bytes, and JSON escapes (one code point each, a pair for U+1F642).
  const std::vector<std::pair<std::string, int>> pieces = {
      {"a", 1},   {"\xc3\xa9", 1}, {"\xe2\x82\xac", 1},   {"\xf0\x9f\x99\x82", 1},
      {"\\n", 1}, {"\\u00e9", 1},  {"\\ud83d\\ude42", 1}, {"\\\"", 1}};
  for (int round = 0; round < 20; ++round) {
    const int min = static_cast<int>(rng() % 5), max = min + static_cast<int>(rng() % 5);
    auto g = Compile("{\"type\": \"string\", \"minLength\": " + std::to_string(min) +
                     ", \"maxLength\": " + std::to_string(max) + "}");
    ASSERT_TRUE(g);
    for (int i = 0; i < 50; ++i) {
      std::string text = "\"";
      const int n = static_cast<int>(rng() % 12);
      for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()].first;
      text += "\"";
      EXPECT_EQ(Matches(g, text), n >= min && n <= max) << text << " in " << min << ".." << max;
    }
  }
}

TEST(JsonSchemaFuzz, PatternsAgreeWithStdRegexSearch) {
  // ASCII patterns, where the u flag makes no difference and std::regex (ECMAScript) is a
  // reference; strings over a small alphabet that hits their classes.
  const std::vector<std::string> patterns = {
      "ab",
      "^ab",
      "ab$",
      "^a.b$",
      "a|b$",
      "^(a|b)*c",
      "a{2,3}",
      "^a{2}b?$",
      "[0-9]+-[a-c]",
      "^\\d{2,}$",
      "\\s",
      "^[^ab]*$",
      "(ab|a)(c|bcd)$",
      "^(?:a-)+b",
      "x.?y",
      "^\\w+$",
      "\\.",
      "^$|^a$",
      "(^|b)a",
      "a(b|$)",
      "^[-a]{1,2}[.]",
      "\\W\\w",
      "^(a+|b+)$",
      ".a.",
  };
  const std::string alphabet = "aabbc01-._ \nxy";
  std::mt19937_64 rng(5);
  for (const std::string& p : patterns) {
    auto g = Compile("{\"type\": \"string\", \"pattern\": " + nlohmann::json(p).dump() + "}");
    ASSERT_TRUE(g) << p;
    const std::regex re(p, std::regex::ECMAScript);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      const int n = static_cast<int>(rng() % 7);
      for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(Matches(g, nlohmann::json(s).dump()), std::regex_search(s, re))
          << "pattern " << p << " string " << nlohmann::json(s).dump();
    }
  }
}

}  // namespace
}  // namespace promptcache
