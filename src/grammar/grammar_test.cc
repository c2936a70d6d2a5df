// The grammar engine on its own: GBNF parsing and its errors, the recognizer accepting and
// refusing strings (llama.cpp's example grammars in spirit: JSON, arithmetic, lists), JSON
// Schema conversion, and token masks over a small vocabulary.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "grammar/grammar_test_util.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

namespace promptcache {
namespace {

std::shared_ptr<const Grammar> Parse(std::string_view text) {
  auto g = Grammar::Parse(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : nullptr;
}

// A prefix the grammar can still complete.
bool Prefix(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarState st(g);
  return st.Advance(s);
}

constexpr const char* kArithmetic = R"g(
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)g";

constexpr const char* kList = R"g(
root ::= item+
# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
)g";

TEST(Gbnf, Arithmetic) {
  auto g = Parse(kArithmetic);
  EXPECT_TRUE(AcceptsWhole(g, "1+2=3\n"));
  EXPECT_TRUE(AcceptsWhole(g, "(a +b) *c = x1\n1=1\n"));
  EXPECT_FALSE(AcceptsWhole(g, "(a + b)=1\n"));  // no space after an operator
  EXPECT_FALSE(AcceptsWhole(g, "1+2=3"));        // the newline is required
  EXPECT_FALSE(AcceptsWhole(g, "1++2=3\n"));
  EXPECT_TRUE(Prefix(g, "(a +"));
  EXPECT_FALSE(Prefix(g, "A"));
}

TEST(Gbnf, ListWithUnicodeClasses) {
  auto g = Parse(kList);
  EXPECT_TRUE(AcceptsWhole(g, "- milk\n- eggs\n"));
  EXPECT_TRUE(AcceptsWhole(g, "- caf\xc3\xa9 cr\xc3\xa8me\n"));
  EXPECT_FALSE(AcceptsWhole(g, "- a\u2028b\n"));
  EXPECT_FALSE(AcceptsWhole(g, "-\n"));
  // A character split across two pieces (two tokens).
  GrammarState st(g);
  EXPECT_TRUE(st.Advance("- caf\xc3"));
  EXPECT_FALSE(st.Complete());
  EXPECT_TRUE(st.Advance("\xa9\n"));
  EXPECT_TRUE(st.Complete());
}

TEST(Gbnf, RepetitionBoundsAndGroups) {
  auto g = Parse(R"g(root ::= "a"{2,3} ("b" | "c")? [0-9]{2} "x"*)g");
  EXPECT_TRUE(AcceptsWhole(g, "aa12"));
  EXPECT_TRUE(AcceptsWhole(g, "aaab12xx"));
  EXPECT_FALSE(AcceptsWhole(g, "a12"));
  EXPECT_FALSE(AcceptsWhole(g, "aaaa12"));
  EXPECT_FALSE(AcceptsWhole(g, "aa1"));
  auto any = Parse("root ::= . . \"!\"");
  EXPECT_TRUE(AcceptsWhole(any, "x\xe2\x82\xac!"));
  EXPECT_FALSE(AcceptsWhole(any, "x!"));
}

TEST(Gbnf, LiteralsWrittenByCodeMatchExactlyTheirText) {
  for (const std::string text : {"plain", "quote \" and \\ back", "lines\nand\ttabs\r",
                                 "é ∑ 🙂", "[TOOL_CALLS]", "{\"a\": 1}"}) {
    auto g = Grammar::Parse("root ::= " + GbnfLiteral(text));
    ASSERT_TRUE(g.ok()) << text << ": " << g.status().message();
    GrammarState s(*g);
    EXPECT_TRUE(s.Accepts(text)) << text;
    EXPECT_FALSE(s.Accepts(text + "x")) << text;
    ASSERT_TRUE(s.Advance(text));
    EXPECT_TRUE(s.Finished()) << text;
  }
}

TEST(Gbnf, FinishedWhenNothingMayFollow) {
  auto g = Parse(R"g(root ::= "yes" | "no")g");
  GrammarState st(g);
  ASSERT_TRUE(st.Advance("ye"));
  EXPECT_FALSE(st.Complete());
  ASSERT_TRUE(st.Advance("s"));
  EXPECT_TRUE(st.Finished());
  auto open = Parse(R"g(root ::= "a"+)g");
  GrammarState o(open);
  ASSERT_TRUE(o.Advance("a"));
  EXPECT_TRUE(o.Complete());
  EXPECT_FALSE(o.Finished());
}

TEST(Gbnf, ErrorsAreOneLineMessages) {
  const char* bad[] = {
      "",                                         // no root
      "root ::= foo",                             // undefined rule
      "root ::= \"a",                             // unterminated literal
      "root ::= [a-",                             // unterminated class
      "root ::= (\"a\"",                          // missing )
      "root ::= \"a\"{3,1}",                      // bad bounds
      "root ::= \"a\"{5000}",                     // over the bound
      "root ::= root \"a\"",                      // left recursion
      "root ::= x\nx ::= y \"a\"\ny ::= \"\" x",  // left recursion through a nullable rule
      "root ::= \"\\q\"",                         // unknown escape
      "root ::= \"a\"\nroot ::= \"b\"",           // defined twice
      "root ::= @",
  };
  for (const char* text : bad) {
    auto g = Grammar::Parse(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().message().find('\n'), std::string::npos) << g.status().message();
  }
}

// JSON through the schema converter's shared rules (response_format json_object).
TEST(JsonSchema, JsonObjectGrammar) {
  auto g = Parse(JsonObjectGbnf());
  EXPECT_TRUE(AcceptsWhole(g, R"({})"));
  EXPECT_TRUE(AcceptsWhole(g, R"({"a": [1, -2.5e3, true, null, {"b": "c\n\u00e9"}]})"));
  EXPECT_FALSE(AcceptsWhole(g, R"([1])"));  // an object, not any value
  EXPECT_FALSE(AcceptsWhole(g, R"({"a": 01})"));
  EXPECT_FALSE(AcceptsWhole(g, R"({"a": "x)"));
  EXPECT_FALSE(AcceptsWhole(g, "{\"a\": \"\x01\"}"));
}

std::shared_ptr<const Grammar> FromSchema(const std::string& schema) {
  auto text = JsonSchemaToGbnf(schema);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? Parse(*text) : nullptr;
}

TEST(JsonSchema, ObjectsPropertiesRequiredAndTypes) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
      "ok": {"type": ["boolean", "null"]}},
    "required": ["name", "age"], "additionalProperties": false})");
  EXPECT_TRUE(AcceptsWhole(g, R"({"name": "Ann", "age": 3})"));
  EXPECT_TRUE(AcceptsWhole(g, R"({"name":"Ann","age":-3,"tags":["a","b"],"ok":null})"));
  EXPECT_TRUE(AcceptsWhole(g, R"({"name":"Ann","age":3,"ok":true})"));
  EXPECT_FALSE(AcceptsWhole(g, R"({"age": 3, "name": "Ann"})"));      // schema order
  EXPECT_FALSE(AcceptsWhole(g, R"({"name": "Ann"})"));                // age is required
  EXPECT_FALSE(AcceptsWhole(g, R"({"name": "Annabel", "age": 3})"));  // maxLength
  EXPECT_FALSE(AcceptsWhole(g, R"({"name": "A", "age": 1.5})"));
  EXPECT_FALSE(AcceptsWhole(g, R"({"name":"A","age":1,"tags":["a","b","a"]})"));
  EXPECT_FALSE(AcceptsWhole(g, R"({"name":"A","age":1,"tags":["c"]})"));
  EXPECT_FALSE(AcceptsWhole(g, R"({"name":"A","age":1,"x":1})"));
}

TEST(JsonSchema, AnyOfConstDefsAndRecursiveRefs) {
  auto g = FromSchema(R"({
    "$defs": {"node": {"type": "object", "properties": {
        "v": {"const": 1}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"], "additionalProperties": false}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "number"}]})");
  EXPECT_TRUE(AcceptsWhole(g, R"({"v":1,"kids":[]})"));
  EXPECT_TRUE(AcceptsWhole(g, R"({"v":1,"kids":[{"v":1,"kids":[{"v":1,"kids":[]}]}]})"));
  EXPECT_TRUE(AcceptsWhole(g, "2.5"));
  EXPECT_FALSE(AcceptsWhole(g, R"({"v":2,"kids":[]})"));
  EXPECT_FALSE(AcceptsWhole(g, R"("x")"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  struct Case {
    const char* schema;
    const char* named;
  };
  const Case cases[] = {
      {R"({"type": "string", "pattern": "(a)\\1"})",
       "'pattern' is refused: pattern: back-reference"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "format": "color"}}})",
       "'properties.a.format' is refused: format 'color'"},
      {R"({"type": "number", "multipleOf": 2})", "'multipleOf'"},
      {R"({"not": {"type": "string"}})", "'not'"},
      {R"({"type": "object", "minProperties": 1})", "'minProperties'"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
      {R"({"type": "array", "contains": {"const": 1}})", "'contains'"},
      {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]})", "'oneOf'"},
      {R"({"$ref": "https://example.com/s.json"})", "'$ref'"},
      {R"({"type": "date"})", "'type'"},
      {"[1", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto r = JsonSchemaToGbnf(c.schema);
    ASSERT_FALSE(r.ok()) << c.schema;
    EXPECT_NE(r.status().message().find(c.named), std::string::npos) << r.status().message();
  }
}

// A small vocabulary: the mask agrees with Allows for every token and state along a walk.
TEST(TokenMask, MaskAgreesWithSingleTokenChecks) {
  std::vector<std::string> vocab = {"",   "{",   "}",    "\"",   "a",   "\"a\"", ":",
                                    " ",  "1",   "12",   "{\"",  "\":", ",",     "true",
                                    "tr", "xyz", "\xc3", "\xa9", "\"}", ""};
  auto trie = std::make_shared<VocabTrie>(vocab, std::vector<int32_t>{19});
  auto g = Parse(JsonObjectGbnf());
  GrammarConstraint c(g, trie);
  const std::vector<int32_t> walk = {10, 4, 11, 7, 13, 12, 3, 16, 17, 11, 8, 2};
  for (int32_t next : walk) {
    const std::vector<uint8_t> mask = c.Mask();
    for (int32_t id = 0; id < trie->vocab_size(); ++id) {
      EXPECT_EQ(mask[id] != 0, c.Allows(id)) << "token " << id << " before " << next;
    }
    ASSERT_TRUE(c.Allows(next)) << next;
    c.Accept(next);
  }
  EXPECT_TRUE(c.Complete());
  EXPECT_TRUE(c.Allows(19));  // the end token, once complete
  EXPECT_TRUE(c.Finished());
}

}  // namespace
}  // namespace promptcache
