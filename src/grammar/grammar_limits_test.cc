// The grammar engine's bounds against hostile input (issue 28): nested repeats that used to
// hold the decoding thread for minutes are counted and refused at parse time, naming the rule;
// ambiguity that only grows while text is read ends in overflowed() (and a constraint's
// error()), never a long step; JSON nested past the bounds is refused before it is parsed. And
// the recognizer, which now deduplicates stacks as it expands them, still accepts exactly the
// grammar's language (checked against a separate, memoized matcher on random grammars).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "grammar/grammar.h"
#include "grammar/grammar_test_util.h"
#include "grammar/json_depth.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

namespace promptcache {
namespace {

std::string Nested3(int n) {
  const std::string r = "{0," + std::to_string(n) + "}";
  return "root ::= (((\"a\"" + r + ")" + r + ")" + r + ")";
}

// The issue's 36-byte grammar: 55 s in GrammarState's constructor before. Its start state is
// computed by Parse now, and its language is a{0,512}.
TEST(GrammarLimits, NestedRepeatsOfEightAreAcceptedAndExact) {
  auto g = Grammar::Parse(Nested3(8));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_GT((*g)->start().size(), 0u);
  EXPECT_TRUE(AcceptsWhole(*g, ""));
  EXPECT_TRUE(AcceptsWhole(*g, std::string(512, 'a')));
  EXPECT_FALSE(AcceptsWhole(*g, std::string(513, 'a')));
  EXPECT_FALSE(AcceptsWhole(*g, "ab"));
  auto ten = Grammar::Parse(Nested3(10));
  ASSERT_TRUE(ten.ok()) << ten.status().message();
  EXPECT_TRUE(AcceptsWhole(*ten, std::string(1000, 'a')));
  EXPECT_FALSE(AcceptsWhole(*ten, std::string(1001, 'a')));
}

// {0,1000} nested three deep would hold about a million stacks at once: refused by counting,
// naming the rule the text wrote (not the generated one).
TEST(GrammarLimits, ExplodingRepeatsAreRefusedNamingTheRule) {
  auto g = Grammar::Parse(Nested3(1000));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("rule 'root'"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("4096"), std::string::npos) << g.status().message();
  // After a character, in a rule of its own: the count covers every point, not only the start.
  auto later = Grammar::Parse("root ::= \"x\" body\nbody ::= ((\"a\"{0,100}){0,100}){0,100}");
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("rule 'body'"), std::string::npos)
      << later.status().message();
  EXPECT_EQ(later.status().message().find('\n'), std::string::npos);
  // Many alternatives count too (4097 literals at once).
  std::string alts = "root ::= \"z0\"";
  for (int i = 1; i <= 4096; ++i) alts += " | \"z" + std::to_string(i) + "\"";
  EXPECT_FALSE(Grammar::Parse(alts).ok());
  EXPECT_TRUE(Grammar::Parse(alts.substr(0, alts.rfind(" |"))).ok());  // 4096: within
}

// Ambiguity that accumulates over characters cannot be counted ahead: each step's bounds end it.
TEST(GrammarLimits, AmbiguityGrowingWithTheTextOverflows) {
  // After n a's, 3 * 2^n distinct stacks (which of b or c closes each level, times what comes
  // next: either "a", or the innermost closing letter).
  auto g = Grammar::Parse("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"");
  ASSERT_TRUE(g.ok()) << g.status().message();
  GrammarState st(*g);
  int taken = 0;
  while (taken < 20 && st.Advance("a")) ++taken;
  EXPECT_EQ(taken, 10);  // 3 * 2^10 = 3072 stacks fit; 3 * 2^11 do not
  EXPECT_TRUE(st.overflowed());
  EXPECT_FALSE(st.Accepts("a"));
  // Two nested repeats of a nullable item: each a can belong to any outer iteration.
  auto two = Grammar::Parse("root ::= ((\"a\"{0,1000}){0,1000})");
  ASSERT_TRUE(two.ok()) << two.status().message();
  GrammarState s2(*two);
  int n = 0;
  while (n < 100 && s2.Advance("a")) ++n;
  EXPECT_LT(n, 100);
  EXPECT_TRUE(s2.overflowed());
}

// Advances a fresh state over '(' until it overflows, `most` of them at the most; expects the
// overflow and returns how many it took.
int ParensUntilOverflow(std::shared_ptr<const Grammar> g, int most) {
  GrammarState st(std::move(g));
  int depth = 0;
  while (depth < most && st.Advance("(")) ++depth;
  EXPECT_TRUE(st.overflowed());
  return depth;
}

TEST(GrammarLimits, StacksDeeperThanTheBoundOverflow) {
  auto g = Grammar::Parse("root ::= \"(\" root \")\" | \"x\"");
  ASSERT_TRUE(g.ok());
  const int depth = ParensUntilOverflow(*g, 5000);
  EXPECT_GE(depth, 4000);
  EXPECT_LT(depth, 5000);
  GrammarState ok(*g);
  EXPECT_TRUE(ok.Advance(std::string(100, '(') + "x" + std::string(100, ')')));
  EXPECT_TRUE(ok.Finished());
  EXPECT_FALSE(ok.overflowed());
}

// A constraint whose state outgrows the bounds stops allowing anything and says why.
TEST(GrammarLimits, ConstraintReportsTheOverflow) {
  auto g = Grammar::Parse("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"");
  ASSERT_TRUE(g.ok());
  auto trie = std::make_shared<VocabTrie>(std::vector<std::string>{"a", "b", "c", ""},
                                          std::vector<int32_t>{3});
  GrammarConstraint c(*g, trie);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(c.Allows(0)) << i;
    EXPECT_TRUE(c.Mask()[0]) << i;
    c.Accept(0);
  }
  EXPECT_TRUE(c.error().ok());
  EXPECT_FALSE(c.Allows(0));
  const std::vector<uint8_t> mask = c.Mask();
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 0);
  ASSERT_FALSE(c.error().ok());
  EXPECT_NE(c.error().message().find("ambiguous"), std::string::npos) << c.error().message();
}

// The work a step may take is bounded too: 4001 ways to go on, each a stack as deep as the
// parentheses so far, pass 2^20 units past about 190 levels, before 4096 stacks or levels.
TEST(GrammarLimits, StepWorkIsBounded) {
  std::string alts = "z ::= \"z0\"";
  for (int i = 1; i < 4000; ++i) alts += " | \"z" + std::to_string(i) + "\"";
  auto g = Grammar::Parse("root ::= \"(\" root \")\" | z\n" + alts);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const int depth = ParensUntilOverflow(*g, 1000);
  EXPECT_GT(depth, 100);
  EXPECT_LT(depth, 300);
}

// A mask's walk over the vocabulary has a budget of its own: run out, nothing is allowed.
TEST(GrammarLimits, MaskWalkIsBounded) {
  auto g = Grammar::Parse("root ::= [a-z]{0,50}");
  ASSERT_TRUE(g.ok());
  std::vector<std::string> vocab;
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) vocab.push_back(std::string{a, b, a});
  }
  VocabTrie trie(vocab, {});
  GrammarState st(*g);
  std::vector<uint8_t> allowed;
  ASSERT_TRUE(trie.Allowed(st, &allowed));
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), 1), 26 * 26);
  EXPECT_FALSE(trie.Allowed(st, &allowed, /*budget=*/10000));
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), 1), 0);
}

TEST(GrammarLimits, GroupsNestDeeperThanTheBoundAreRefused) {
  auto nest = [](int n) {
    return "root ::= " + std::string(n, '(') + "\"a\"" + std::string(n, ')');
  };
  EXPECT_TRUE(Grammar::Parse(nest(64)).ok());
  auto deep = Grammar::Parse(nest(100000));  // the parser recurses per group: bounded first
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nested too deeply"), std::string::npos);
}

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_EQ(JsonNestingDepth("1"), 0);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(JsonNestingDepth(R"({"a": "[[[{{{"})"), 1);
  EXPECT_EQ(JsonNestingDepth(R"(["\"[[[", "\\", [[]]])"), 3);       // escaped quote, backslash
  EXPECT_EQ(JsonNestingDepth(std::string(100000, '['), 256), 257);  // stops past the limit
  EXPECT_TRUE(CheckJsonNesting(std::string(256, '[') + std::string(256, ']'), "x").ok());
  Status st = CheckJsonNesting(std::string(257, '{'), "the request body");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "the request body nests arrays and objects deeper than 256 levels");
}

std::string NestedItems(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += R"({"items": )";
  s += "{}";
  for (int i = 0; i < n; ++i) s += "}";
  return s;
}

std::string NestedProperties(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += R"({"type": "object", "properties": {"a": )";
  s += "{}";
  for (int i = 0; i < n; ++i) s += "}}";
  return s;
}

// 100,000 nested items overflowed the stack in the compiler before; 10,000 nested properties
// took 64 s (nlohmann's ordered_json copies each level while parsing).
TEST(JsonSchemaLimits, DeepSchemasAreRefusedBeforeParsing) {
  for (const std::string& schema : {NestedItems(100000), NestedProperties(10000)}) {
    auto r = JsonSchemaToGbnf(schema);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("deeper than 256 levels"), std::string::npos)
        << r.status().message();
  }
  // Within the JSON bound but past the schema bound: named where.
  auto r = JsonSchemaToGbnf(NestedItems(100));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 64 schemas deep"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("items.items"), std::string::npos);
  auto ok = JsonSchemaToGbnf(NestedItems(60));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  auto g = Grammar::Parse(*ok);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(AcceptsWhole(*g, std::string(61, '[') + std::string(61, ']')));
}

// A reference for whole-string matching: memoized derivation of spans, straight from the rules.
class Reference {
 public:
  Reference(const Grammar& g, std::string s) : g_(g), s_(std::move(s)) {}
  bool Match() { return Rule(g_.root(), 0, static_cast<int>(s_.size())); }

 private:
  bool Rule(int32_t r, int i, int j) {
    const auto key = std::make_tuple(r, i, j);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    memo_[key] = false;  // a cycle on one span derives nothing new
    bool any = false;
    for (const auto& alt : g_.rules()[r]) any = any || Seq(alt, 0, i, j);
    return memo_[key] = any;
  }
  bool Seq(const std::vector<GrammarElement>& alt, size_t k, int i, int j) {
    const GrammarElement& e = alt[k];
    if (e.kind == GrammarElement::kEnd) return i == j;
    if (e.kind == GrammarElement::kChars) {
      return i < j && e.Matches(static_cast<unsigned char>(s_[i])) && Seq(alt, k + 1, i + 1, j);
    }
    for (int m = i; m <= j; ++m) {
      if (Rule(e.rule, i, m) && Seq(alt, k + 1, m, j)) return true;
    }
    return false;
  }
  const Grammar& g_;
  std::string s_;
  std::map<std::tuple<int32_t, int, int>, bool> memo_;
};

std::string RandomExpr(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth > 2 ? 3 : 8);
  std::string e;
  switch (pick(rng)) {
    case 0:
      e = "\"a\"";
      break;
    case 1:
      e = "\"b\"";
      break;
    case 2:
      e = "[ab]";
      break;
    case 3:
      e = "\"\"";
      break;
    case 4:
      e = "r1";
      break;
    case 5:
      e = "(" + RandomExpr(rng, depth + 1) + " " + RandomExpr(rng, depth + 1) + ")";
      break;
    case 6:
      e = "(" + RandomExpr(rng, depth + 1) + " | " + RandomExpr(rng, depth + 1) + ")";
      break;
    default:
      e = "(" + RandomExpr(rng, depth + 1) + ")";
      break;
  }
  static const char* kPost[] = {"", "", "?", "*", "+", "{0,2}", "{1,3}", "{2}"};
  return e + kPost[std::uniform_int_distribution<int>(0, 7)(rng)];
}

TEST(GrammarLimits, RecognizerAgreesWithAReferenceOnRandomGrammars) {
  std::mt19937 rng(28);
  int checked = 0;
  for (int round = 0; round < 300; ++round) {
    const std::string text = "root ::= " + RandomExpr(rng, 0) + " " + RandomExpr(rng, 0) +
                             "\nr1 ::= \"b\" " + RandomExpr(rng, 1) + " | \"a\"";
    auto g = Grammar::Parse(text);
    if (!g.ok()) continue;  // left recursion, mostly
    ++checked;
    for (int len = 0; len <= 6; ++len) {
      for (int bits = 0; bits < (1 << len); ++bits) {
        std::string s;
        for (int i = 0; i < len; ++i) s += (bits >> i) & 1 ? 'b' : 'a';
        Reference ref(**g, s);
        ASSERT_EQ(AcceptsWhole(*g, s), ref.Match()) << text << "\non '" << s << "'";
      }
    }
  }
  EXPECT_GT(checked, 150);
}

}  // namespace
}  // namespace promptcache
