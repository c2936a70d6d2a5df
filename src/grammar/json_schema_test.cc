// JSON Schema keywords compiled to grammars, one family at a time: for each, JSON texts the
// grammar must accept and texts it must refuse (fed to GrammarState whole), and the keywords
// still refused with their path. Mutations tried, each caught here: the range builder's top
// digit left free as well as tight, exclusive lower or upper bounds read as inclusive, patterns
// compiled anchored, ^ allowed after a character, `.` matching a newline, February 29 in every
// year or in every century, a surrogate pair counted as two characters, maxLength dropped beside
// a pattern, extra properties allowed to repeat a listed name, items:false ignored beside
// prefixItems, oneOf's overlap not checked, '"' not escapable in a pattern's class, allOf's
// members or anyOf's sibling keywords dropped.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema_test_util.h"

namespace promptcache {
namespace {

// Every `yes` text is accepted and every `no` text refused.
void Check(const std::string& schema, const std::vector<std::string>& yes,
           const std::vector<std::string>& no) {
  auto g = Compile(schema);
  ASSERT_TRUE(g) << schema;
  for (const std::string& s : yes) EXPECT_TRUE(Matches(g, s)) << schema << " should accept " << s;
  for (const std::string& s : no) EXPECT_FALSE(Matches(g, s)) << schema << " should refuse " << s;
}

// A JSON string literal of `s` (the pattern and format tests write the value, not the JSON).
std::string Q(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}
std::vector<std::string> Qs(const std::vector<std::string>& v) {
  std::vector<std::string> out;
  for (const std::string& s : v) out.push_back(Q(s));
  return out;
}

void Refused(const std::string& schema, const std::string& named) {
  auto r = JsonSchemaToGbnf(schema);
  ASSERT_FALSE(r.ok()) << schema;
  EXPECT_NE(r.status().message().find(named), std::string::npos)
      << schema << ": " << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
}

TEST(JsonSchemaNumbers, IntegerRanges) {
  Check(R"({"type": "integer", "minimum": -5, "maximum": 12})",
        {"-5", "-1", "0", "7", "9", "10", "12"}, {"-6", "13", "-0", "05", "1.0", "1e1", "100"});
  // Past 32 and 53 bits, to the edges.
  Check(R"({"type": "integer", "minimum": 4294967296, "maximum": 9007199254740993})",
        {"4294967296", "4294967297", "9007199254740993", "9007199254740992", "123456789012345"},
        {"4294967295", "9007199254740994", "9007199254741000", "-4294967296", "0"});
  Check(R"({"type": "integer", "minimum": -9223372036854775808, "maximum": -9223372036854775800})",
        {"-9223372036854775808", "-9223372036854775800", "-9223372036854775805"},
        {"-9223372036854775809", "-9223372036854775799", "9223372036854775800"});
  Check(R"({"type": "integer", "minimum": 0, "maximum": 18446744073709551615})",
        {"0", "18446744073709551615", "18446744073709551609", "9999999999999999999"},
        {"18446744073709551616", "28446744073709551615", "-1"});
  // zod's .int(): the safe integers.
  Check(R"({"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991})",
        {"-9007199254740991", "9007199254740991", "0", "42"},
        {"-9007199254740992", "9007199254740992", "10000000000000000"});
}

TEST(JsonSchemaNumbers, ExclusiveAndFractionalBoundsAtTheEdges) {
  Check(R"({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 3})", {"-2", "0", "2"},
        {"-3", "3", "-4", "4"});
  Check(R"({"type": "integer", "minimum": 1.5, "maximum": 4.5})", {"2", "3", "4"},
        {"1", "5", "1.5"});
  Refused(R"({"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 2})",
          "no value is valid");
  Check(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})",
        {"0.5", "0.000000000000001", "0.999999999999999", "0.1"},
        {"0", "0.0", "1", "1.0", "-0.5", "0.0000000000000001", "0.9999999999999999"});
  Check(R"({"type": "number", "minimum": 2.5, "maximum": 2.75})",
        {"2.5", "2.50", "2.6", "2.75", "2.7499", "2.7500"},
        {"2.49", "2.751", "2.8", "3", "2", "2.4999999"});
  Check(R"({"type": "number", "minimum": -3.5, "exclusiveMaximum": -1.25})",
        {"-3.5", "-2", "-1.26", "-1.2500001"}, {"-1.25", "-1.2", "-3.51", "0", "-4"});
  // Draft 4's boolean exclusiveMinimum.
  Check(R"({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 10})",
        {"0.1", "10"}, {"0", "-1", "10.5"});
  // Numbers bounded on one side only: up to 15 digits before the point.
  Check(R"({"type": "number", "minimum": 100})", {"100", "100.5", "999999999999999"},
        {"99.99", "1000000000000000", "1e5"});
  Check(R"({"type": "integer", "maximum": -7})", {"-7", "-8", "-1000000000000000"},
        {"-6", "0", "7"});
  // The tighter of two bounds wins; the same bound, exclusive once, is exclusive.
  Check(R"({"allOf": [{"type": "integer", "minimum": 3}, {"exclusiveMinimum": 3, "maximum": 9}]})",
        {"4", "9"}, {"3", "10"});
  Refused(R"({"type": "number", "minimum": 5, "maximum": 4})", "no value is valid");
  Refused(R"({"type": "number", "minimum": "1"})", "'minimum' must be a number");
}

TEST(JsonSchemaStrings, LengthsCountCodePoints) {
  Check(R"({"type": "string", "minLength": 2, "maxLength": 3})",
        {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xf0\x9f\x99\x82\"", "\"\\ud83d\\ude00a\"", "\"\\n\\t\"",
         "\"\\u00e9x\""},
        {"\"a\"", "\"abcd\"", "\"\\ud83d\"", "\"\\ude00a\"", "\"\xf0\x9f\x99\x82\""});
  Refused(R"({"type": "string", "minLength": 3, "maxLength": 2})", "no value is valid");
}

TEST(JsonSchemaStrings, PatternsAreUnanchoredEcmaScript) {
  struct Case {
    const char* pattern;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {"abc", {"abc", "xxabcyy", "abcabc"}, {"ab", "acb", ""}},
      {"^abc$", {"abc"}, {"xabc", "abcx", "ab"}},
      {"^a|b$", {"a", "ax", "xb", "ab"}, {"xa", "bx", ""}},
      {"^[A-Z]{3}-\\d{2}$", {"ABC-12"}, {"AB-12", "ABC-123", "abc-12", "ABC-1x"}},
      {"^(?:ab)+$", {"ab", "abab"}, {"aba", ""}},
      {"^(a|bc)*?$", {"", "a", "bca", "abcbc"}, {"b", "ac"}},
      {"^[^\\d\\s]+$", {"abc", "-_"}, {"a1", "a b", ""}},
      {"^.$", {"\xc3\xa9", "x", "\""}, {"\n", "ab", ""}},
      {"^\\.\\*\\x41\\u00e9\\u{1F642}$", {".*A\xc3\xa9\xf0\x9f\x99\x82"}, {"x*A\xc3\xa9"}},
      {"^[\\-a]+$", {"-a-"}, {"b"}},
      {"^\"\\\\$", {"\"\\"}, {"\"", "\\"}},
      {"\\n", {"a\nb"}, {"ab"}},
      {"^$", {""}, {"a"}},
      {"x*", {"", "abc"}, {}},
      {"^\\w+@\\w+\\.com$", {"a_1@b.com"}, {"a@b.org", "a-b@c.com"}},
      {"^a{2,3}b{2}c{1,}$", {"aabbc", "aaabbccc"}, {"abbc", "aaaabbc", "aabbb", "aabb"}},
      {"(^|,)x(,|$)", {"x", "a,x", "x,b", "a,x,b"}, {"ax", "xb", "a,xb"}},
      {"^[a-c]?[^a-c]$", {"ad", "d"}, {"aa", "a"}},
      {"^(?<year>\\d{4})$", {"2024"}, {"24"}},
      {"\\S\\s\\S", {"a b", "xx\ty"}, {"ab", " a "}},
      {"^[\\s\\S]{2}$", {"\n\n", "ab"}, {"a"}},
  };
  for (const Case& c : cases) {
    const std::string schema =
        "{\"type\": \"string\", \"pattern\": " + nlohmann::json(c.pattern).dump() + "}";
    Check(schema, Qs(c.yes), Qs(c.no));
  }
}

TEST(JsonSchemaStrings, PatternConstructsRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "back-reference '\\1'"},
      {"(?<n>a)\\k<n>", "named back-reference"},
      {"(?=a)", "lookahead '(?='"},
      {"a(?!b)", "negative lookahead"},
      {"(?<=a)b", "lookbehind"},
      {"(?<!a)b", "negative lookbehind"},
      {"\\bfoo", "word boundary"},
      {"\\Bfoo", "'\\B'"},
      {"\\p{L}", "Unicode property"},
      {"a{2000}", "repetition count over 1000"},
      {"(a", "missing ')'"},
      {"a)", "unmatched ')'"},
      {"*a", "nothing to repeat"},
      {"[b-a]", "out of order"},
      {"\\q", "unknown escape"},
  };
  for (const auto& [pattern, named] : cases) {
    Refused("{\"type\": \"string\", \"pattern\": " + nlohmann::json(pattern).dump() + "}", named);
  }
  // A pattern no string matches ("^" after a character) leaves no valid value.
  Refused(R"({"type": "string", "pattern": "a^b"})", "no value is valid");
}

TEST(JsonSchemaStrings, Formats) {
  struct Case {
    const char* format;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {"date",
       {"2024-06-30", "2000-02-29", "2024-02-29", "1999-12-31", "0000-01-01"},
       {"2024-06-31", "1900-02-29", "2023-02-29", "2024-13-01", "2024-00-10", "2024-1-01",
        "24-01-01", "2024-01-01T00:00:00Z"}},
      {"time",
       {"23:59:59Z", "00:00:00+05:30", "12:30:45.123-08:00"},
       {"24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00Z", "12:00:00z", "12:00:00+5:30"}},
      {"date-time",
       {"2024-02-29T12:30:45Z", "2024-02-28T12:30:45.123+05:30"},
       {"2023-02-29T12:30:45Z", "2024-02-28t12:30:45Z", "2024-02-28 12:30:45Z",
        "2024-02-28T12:30:45", "2024-04-31T00:00:00Z"}},
      {"duration",
       {"P1Y2M3DT4H5M6S", "PT1H", "P1W", "P3D", "PT36H", "P1M", "PT0S", "P1Y"},
       {"P", "PT", "P1H", "1Y", "P1YT", "P1Y1W", "PT1H1S", "P1D1M"}},
      {"email",
       {"a.b+c@example.co", "x_y@sub.example.org", "o'neil@a-b.io"},
       {"a..b@x.com", ".a@x.com", "a.@x.com", "a@b", "a@-b.com", "a@b-.com", "a@b.c", "a b@x.com",
        "@x.com", "a@x.c0m"}},
      {"hostname",
       {"example.com", "a-b.c", "localhost", "x1", std::string(63, 'a') + ".com"},
       {"-a.com", "a-.com", "a..b", "a.b.", std::string(64, 'a') + ".com", "a_b.com", ""}},
      {"ipv4",
       {"192.168.0.1", "0.0.0.0", "255.255.255.255"},
       {"256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1", "1.1.1.-1"}},
      {"ipv6",
       {"::", "::1", "1::", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "::ffff:192.0.2.1",
        "1:2:3:4:5:6:1.2.3.4", "FE80::0202:B3FF:FE1E:8329"},
       {"1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1", "1:2:3:4:5:6:7", "::1.2.3.256",
        "fe80::1%eth0", ""}},
      {"uuid",
       {"123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
        "ABCDEF01-2345-6789-ABCD-EF0123456789"},
       {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g",
        "123e4567-e89b-12d3-a456-4266141740000"}},
      {"uri",
       {"https://example.com/a?b=c#d", "mailto:a@b.co", "urn:isbn:0451450523", "http://[::1]:8080/",
        "ftp://user:pw@host/%7Efile", "a+b.c-d:x", "file:///etc/hosts"},
       {"example.com", "a:", "http://a b", "1http://x", "http://[::1/", "http://%zz", "/path", ""}},
  };
  for (const Case& c : cases) {
    Check(std::string("{\"type\": \"string\", \"format\": \"") + c.format + "\"}", Qs(c.yes),
          Qs(c.no));
  }
  Refused(R"({"type": "string", "format": "ends_with"})", "format 'ends_with' is not supported");
}

TEST(JsonSchemaStrings, KeywordsCombine) {
  // Format and lengths: the product of both.
  Check(R"({"type": "string", "format": "ipv4", "maxLength": 7})", Qs({"1.2.3.4"}),
        Qs({"1.2.3.45", "10.2.3.4", "1.2.3"}));
  Check(R"({"type": "string", "format": "email", "minLength": 1, "maxLength": 20})",
        Qs({"a@b.co", "abcdefghijklmno@b.co"}), Qs({"abcdefghijklmnop@b.co", "a@b"}));
  // Format and pattern (zod 4 emits both): a date that is also in March.
  Check(R"({"type": "string", "format": "date", "pattern": "^\\d{4}-03-"})",
        Qs({"2024-03-31", "2023-03-01"}), Qs({"2024-04-01", "2024-03-32"}));
  // allOf of patterns (zod 4's startsWith/endsWith), and lengths.
  Check(R"({"type": "string", "minLength": 4, "allOf": [{"pattern": "^ab"}, {"pattern": "z$"}]})",
        Qs({"abcz", "ab_xyz"}), Qs({"abz", "xabz", "abzx"}));
  // A pattern whose strings need a quote, a backslash and control characters as escapes.
  Check(R"({"type": "string", "pattern": "^[\"\\\\\\t\\u0001/]+$"})",
        {R"("\"\\\t\u0001/\/")", R"("\u0001")", R"("\u0009")"}, {R"("a")", "\"\t\""});
  Refused(R"({"type": "string", "format": "uri", "maxLength": 1000})", "too large");
}

TEST(JsonSchemaArrays, CountsPrefixItemsAndItemsFalse) {
  Check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
        {"[1,2]", "[1, 2, 3]"}, {"[]", "[1]", "[1,2,3,4]", "[1,\"a\"]"});
  Check(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
           "items": false, "minItems": 1})",
        {"[\"a\",1]", "[\"a\"]"}, {"[]", "[\"a\",1,2]", "[1]", "[\"a\",\"b\"]"});
  Check(R"({"type": "array", "prefixItems": [{"const": "x"}], "items": {"type": "boolean"},
           "maxItems": 3})",
        {"[]", "[\"x\"]", "[\"x\",true,false]"},
        {"[true]", "[\"x\",true,false,true]", "[\"x\",1]"});
  // Draft 7 tuples: items as an array, additionalItems.
  Check(R"({"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "number"},
           "minItems": 1, "maxItems": 3})",
        {"[\"a\",1,2]", "[\"a\"]"}, {"[\"a\",1,2,3]", "[\"a\",\"b\"]", "[]"});
  Check(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
  Refused(R"({"type": "array", "minItems": 3, "maxItems": 2})", "no value is valid");
  Refused(R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 2})",
          "no value is valid");
}

TEST(JsonSchemaObjects, AdditionalPropertiesRequiredAndNames) {
  // A schema for the others: any name but the listed ones.
  Check(R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
           "additionalProperties": {"type": "integer", "minimum": 0}})",
        {R"({"a":"x"})", R"({"a":"x","b":1})", R"({"a":"x","b":1,"c":2})"},
        {R"({"a":"x","b":-1})", R"({"a":"x","a":1})", R"({"b":1})", R"({"a":"x","b":"y"})"});
  // true: any value; absent: only the listed properties are generated (as before).
  Check(R"({"type": "object", "properties": {"a": {"type": "integer"}},
           "additionalProperties": true})",
        {R"({})", R"({"a":1,"b":[null]})", R"({"zz":{}})"}, {R"({"a":"x"})"});
  Check(R"({"type": "object", "properties": {"a": {"type": "integer"}}})", {R"({"a":1})"},
        {R"({"b":1})"});
  // A record (pydantic Dict[str, int], zod z.record): keys by propertyNames.
  Check(R"({"type": "object", "additionalProperties": {"type": "integer"},
           "propertyNames": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}})",
        {R"({})", R"({"ab":1,"c":2})"}, {R"({"Ab":1})", R"({"abcd":1})", R"({"a":"x"})"});
  // required without properties: validated by additionalProperties.
  Check(R"({"type": "object", "required": ["id"], "additionalProperties": {"type": "integer"}})",
        {R"({"id":1})", R"({"id":1,"x":2})"}, {R"({})", R"({"id":"a"})"});
  Refused(R"({"type": "object", "properties": {"a": {}}, "required": ["b"],
             "additionalProperties": false})",
          "no value is valid");
}

TEST(JsonSchemaCombinators, AnyOfOneOfAllOfAndLiterals) {
  // anyOf beside a type (zod 3's .ip()): both hold.
  Check(R"({"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]})",
        Qs({"1.2.3.4", "::1"}), {"\"x\"", "1"});
  Check(R"({"type": "string", "maxLength": 3, "anyOf": [{"pattern": "^a"}, {"pattern": "b$"}]})",
        Qs({"a", "axy", "xb"}), Qs({"abcd", "xyz", "xxxb"}));
  // oneOf whose branches cannot overlap: a discriminated union.
  Check(R"({"oneOf": [
      {"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
      {"type": "object", "properties": {"k": {"const": "b"}, "v": {"type": "string"}},
       "required": ["k", "v"]}]})",
        {R"({"k":"a"})", R"({"k":"b","v":"x"})"}, {R"({"k":"b"})", R"({"k":"c"})"});
  Check(R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})",
        {"\"a\"", "1", "null"}, {"true"});
  Refused(R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]})",
          "branches 0 and 1 may both match");
  Refused(R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})", "may both match");
  // allOf: object schemas merged (properties of both, required of both).
  Check(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}},
                       "required": ["a"]},
                      {"properties": {"b": {"type": "number"}}, "required": ["b"]}]})",
        {R"({"a":"x","b":1})"}, {R"({"a":"x"})", R"({"b":1})"});
  // allOf where one member closes the object: the other's extra property is not allowed.
  Check(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}},
                       "additionalProperties": false},
                      {"properties": {"b": {"type": "number"}}}]})",
        {R"({"a":"x"})", R"({})"}, {R"({"a":"x","b":1})"});
  // pydantic 1: a description beside a one-member allOf of a reference.
  Check(R"({"definitions": {"C": {"enum": ["r", "g"]}}, "type": "object",
           "properties": {"c": {"allOf": [{"$ref": "#/definitions/C"}], "description": "d"}},
           "required": ["c"]})",
        {R"({"c":"r"})"}, {R"({"c":"b"})"});
  // enum and const: values of the allowed types that the other keywords accept.
  Check(R"({"type": "string", "enum": ["a", "bbbb", 1, null], "maxLength": 2})", {"\"a\""},
        {"\"bbbb\"", "1", "null"});
  Check(R"({"type": ["integer", "null"], "enum": [1, 2.5, null, "x"]})", {"1", "null"},
        {"2.5", "\"x\""});
  Check(R"({"const": {"a": [1, "b"]}})", {R"({"a":[1,"b"]})"}, {R"({"a":[1]})"});
  Refused(R"({"type": "string", "const": 1})", "no value is valid");
  // A $ref beside other keywords: both hold; a JSON pointer with an escaped name.
  Check(R"({"$defs": {"a b": {"type": "integer", "maximum": 3}}, "type": "object",
           "properties": {"x": {"$ref": "#/$defs/a%20b", "minimum": 1}}, "required": ["x"]})",
        {R"({"x":3})", R"({"x":1})"}, {R"({"x":4})", R"({"x":0})"});
}

TEST(JsonSchemaLimits, OrdinarySchemasStayWithinTheRecognizersBudgets) {
  // A date-time inside an array of objects, an IPv6 beside it, and a pattern: fed a long valid
  // text character by character, no step may overflow the recognizer's bounds.
  auto g = Compile(R"({"type": "array", "maxItems": 20, "items": {"type": "object",
      "properties": {"when": {"type": "string", "format": "date-time"},
                     "ip": {"type": "string", "format": "ipv6"},
                     "code": {"type": "string", "pattern": "^[A-Z]{2}\\d{0,6}$"},
                     "n": {"type": "integer", "minimum": -1000000, "maximum": 1000000},
                     "mail": {"type": "string", "format": "email", "maxLength": 40}},
      "required": ["when", "ip", "code", "n", "mail"], "additionalProperties": false}})");
  ASSERT_TRUE(g);
  std::string text = "[";
  for (int i = 0; i < 20; ++i) {
    text += std::string(i ? ", " : "") +
            R"({"when": "2024-02-29T23:59:59.123456+14:00", "ip": "2001:db8:0:0:1:0:0:1",)"
            R"( "code": "AB123456", "n": -999999, "mail": "first.last@sub.example.com"})";
  }
  text += "]";
  GrammarState st(g);
  for (const char c : text) {
    ASSERT_TRUE(st.Advance(std::string_view(&c, 1))) << text.substr(0, &c - text.data() + 1);
    ASSERT_FALSE(st.overflowed());
  }
  EXPECT_TRUE(st.Complete());
}

}  // namespace
}  // namespace promptcache
