// PML against hostile sizes (issue 28): nesting is refused by depth before any recursive walk
// (pugixml's parser is iterative: a million nested elements parse here on the test thread's
// stack), and a union of 150,000 members registers, its layout listing each member once, in
// order (FormatLayout gathered each module's children by scanning every module: n^2).
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "pml/pml.h"
#include "pml/pml_internal.h"
#include "pml/pml_test_util.h"

namespace promptcache {
namespace {

// One token per word, with room for 2^30 of them.
const FakePmlEncoder kManyWords(FakePmlEncoder::Mode::kWords, std::nullopt, 1 << 30);

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(PmlLimits, DeepNestingIsRefusedByDepth) {
  const int n = 1000000;
  std::string xml = "<schema name='s'>";
  for (int i = 0; i < n; ++i) xml += "<module name='m" + std::to_string(i) + "'>";
  xml += Repeat("</module>", n) + "</schema>";
  EXPECT_TRUE(HasText(SchemaError(xml, kManyWords), "elements nested deeper than 64 levels"));
  // Unions count as levels too.
  std::string unions = "<schema name='s'>";
  for (int i = 0; i < 50000; ++i) unions += "<union><module name='u" + std::to_string(i) + "'>";
  unions += Repeat("</module></union>", 50000) + "</schema>";
  EXPECT_TRUE(HasText(SchemaError(unions, kManyWords), "nested deeper than 64 levels"));
  auto prompt = ParsePrompt("<prompt schema='s'>" + Repeat("<m>", 100000) + Repeat("</m>", 100000) +
                            "</prompt>");
  ASSERT_FALSE(prompt.ok());
  EXPECT_TRUE(HasText(prompt.status().message(), "nested deeper than 64 levels"));
  // At the bound: accepted.
  std::string ok = "<schema name='s'>";
  for (int i = 0; i < 63; ++i) ok += "<module name='m" + std::to_string(i) + "'>";
  ok += "x" + Repeat("</module>", 63) + "</schema>";
  EXPECT_EQ(SchemaError(ok, kManyWords), "OK");
}

TEST(PmlLimits, HugeUnionRegistersAndEveryMemberIsListed) {
  const int n = 150000;
  std::string xml = "<schema name='s'>intro <union>";
  for (int i = 0; i < n; ++i) xml += "<module name='m" + std::to_string(i) + "'>x</module>\n";
  xml += "</union> outro</schema>";
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(xml, "s.xml", kManyWords));
  ASSERT_EQ(s.modules.size(), size_t{n});
  ASSERT_EQ(s.unions.size(), 1u);
  EXPECT_EQ(s.unions[0].members.size(), size_t{n});
  const std::string text = FormatLayout(s);
  size_t at = 0, listed = 0;
  for (int i = 0; i < n; i += 997) {  // in order
    const size_t next = text.find("\n    m" + std::to_string(i) + " ", at);
    ASSERT_NE(next, std::string::npos) << i;
    at = next;
    ++listed;
  }
  EXPECT_EQ(listed, size_t{(n + 996) / 997});
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_GE(lines, size_t{2 * n});  // each member: its line and its "attends to"
  EXPECT_LT(lines, size_t{2 * n + 20});
}

// Text between sibling modules makes each sibling attend to every piece of it before it, and the
// parent's pieces attend to each other: the references grow as the square of the siblings.
// Bounded by kMaxSpanReferences: the parent's P pieces count P(P - 1) / 2, and sibling k's span
// (the k + 1 pieces before it) counts twice, once for its key and once for its one piece.
std::string Siblings(int n) {
  std::string xml = "<schema name='s'><module name='p'>";
  for (int i = 0; i < n; ++i) xml += "t <module name='c" + std::to_string(i) + "'>x</module> ";
  return xml + "</module></schema>";
}

// Each of `pieces` pieces of one owner attends to the ones before it.
int64_t Pairs(int64_t pieces) { return pieces * (pieces - 1) / 2; }

// Its parent's text pieces for n siblings.
int64_t ParentPieces(int n) {
  auto s = ParseSchema(Siblings(n), "s.xml", kManyWords);
  PC_CHECK(s.ok());
  return static_cast<int64_t>(s->modules[0].texts.size());
}

// The references of n siblings after `parent` pieces of their parent.
int64_t SiblingReferences(int64_t parent, int n) { return Pairs(parent) + int64_t(n) * (n + 1); }

TEST(PmlLimits, TextBetweenSiblingsIsBoundedBySpanReferences) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(Siblings(500), "s.xml", kManyWords));
  for (int k : {0, 1, 499}) EXPECT_EQ(s.modules[1 + k].span.size(), size_t(k + 1)) << k;
  // The most siblings within the bound (about 590).
  const int64_t extra = ParentPieces(500) - 500;  // the same for every n
  int n = 500;
  while (SiblingReferences(n + 1 + extra, n + 1) <= pml_internal::kMaxSpanReferences) ++n;
  EXPECT_LE(SiblingReferences(ParentPieces(n), n), pml_internal::kMaxSpanReferences);
  EXPECT_EQ(SchemaError(Siblings(n), kManyWords), "OK");
  const std::string error = SchemaError(Siblings(n + 1), kManyWords);
  EXPECT_TRUE(HasText(error, "the text pieces attend to more than 524288 earlier pieces")) << error;
  // The first sibling whose span passes it, after the parent's pieces for n + 1 siblings.
  int k = 0;
  while (SiblingReferences(n + 1 + extra, k + 1) <= pml_internal::kMaxSpanReferences) ++k;
  EXPECT_TRUE(HasText(error, "module 'c" + std::to_string(k) + "' passes it")) << error;
  // 150,000 siblings (5 MB): refused by the parent's own pieces, before any span is built.
  EXPECT_TRUE(HasText(SchemaError(Siblings(150000), kManyWords), "module 'p' passes it"));
  // Text between top-level modules is always text: its pieces attend to each other.
  std::string top = "<schema name='s'>";
  for (int i = 0; i < 1100; ++i) top += "t <module name='c" + std::to_string(i) + "'>x</module> ";
  EXPECT_TRUE(HasText(SchemaError(top + "</schema>", kManyWords), "the always text passes it"));
}

// One module's pieces (text between its parameters) attend to each other: P(P - 1) / 2.
std::string Parameters(const std::string& prefix, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += "t <parameter name='" + prefix + std::to_string(i) + "' length='1'/>";
  }
  return out;
}

TEST(PmlLimits, TextBetweenParametersIsBounded) {
  auto module = [](int n) {
    return "<schema name='s'><module name='m'>" + Parameters("a", n) + "</module></schema>";
  };
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(module(1000), "s.xml", kManyWords));
  const int64_t pieces = static_cast<int64_t>(s.modules[0].texts.size());
  EXPECT_LE(Pairs(pieces), pml_internal::kMaxSpanReferences);
  EXPECT_GT(Pairs(pieces + 30), pml_internal::kMaxSpanReferences);
  EXPECT_TRUE(HasText(SchemaError(module(1030), kManyWords), "module 'm' passes it"));
}

// A module's span counts again for each piece of its own text (their keys hash it): p's 450
// pieces before c, and c's own 600, pass the bound; with c's span counted once they would not.
TEST(PmlLimits, ASpanCountsOnceForEachPieceOfTheModulesText) {
  auto nested = [](int outer, int inner) {
    return "<schema name='s'><module name='p'>" + Parameters("a", outer) + "<module name='c'>" +
           Parameters("b", inner) + "x</module></module></schema>";
  };
  EXPECT_TRUE(HasText(SchemaError(nested(450, 600), kManyWords), "module 'c' passes it"));
  EXPECT_EQ(SchemaError(nested(400, 500), kManyWords), "OK");
}

}  // namespace
}  // namespace promptcache
