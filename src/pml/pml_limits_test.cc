// PML against hostile sizes (issue 28): nesting is refused by depth before any recursive walk
// (pugixml's parser is iterative: a million nested elements parse here on the test thread's
// stack), and a union of 150,000 members registers, its layout listing each member once, in
// order (FormatLayout gathered each module's children by scanning every module: n^2).
#include <gtest/gtest.h>

#include <string>

#include "pml/pml.h"
#include "pml/pml_internal.h"
#include "pml/pml_test_util.h"

namespace promptcache {
namespace {

const FakePmlEncoder kWords(FakePmlEncoder::Mode::kWords, std::nullopt, 1 << 30);

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
  EXPECT_TRUE(HasText(SchemaError(xml, kWords), "elements nested deeper than 64 levels"));
  // Unions count as levels too.
  std::string unions = "<schema name='s'>";
  for (int i = 0; i < 50000; ++i) unions += "<union><module name='u" + std::to_string(i) + "'>";
  unions += Repeat("</module></union>", 50000) + "</schema>";
  EXPECT_TRUE(HasText(SchemaError(unions, kWords), "nested deeper than 64 levels"));
  auto prompt = ParsePrompt("<prompt schema='s'>" + Repeat("<m>", 100000) + Repeat("</m>", 100000) +
                            "</prompt>");
  ASSERT_FALSE(prompt.ok());
  EXPECT_TRUE(HasText(prompt.status().message(), "nested deeper than 64 levels"));
  // At the bound: accepted.
  std::string ok = "<schema name='s'>";
  for (int i = 0; i < 63; ++i) ok += "<module name='m" + std::to_string(i) + "'>";
  ok += "x" + Repeat("</module>", 63) + "</schema>";
  EXPECT_EQ(SchemaError(ok, kWords), "OK");
}

TEST(PmlLimits, HugeUnionRegistersAndEveryMemberIsListed) {
  const int n = 150000;
  std::string xml = "<schema name='s'>intro <union>";
  for (int i = 0; i < n; ++i) xml += "<module name='m" + std::to_string(i) + "'>x</module>\n";
  xml += "</union> outro</schema>";
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(xml, "s.xml", kWords));
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

// Text between sibling modules makes each sibling attend to every piece of it before it: the
// spans' references grow as the square of the siblings. Bounded by kMaxSpanReferences, each
// module's span counted once and again for each piece of its own text: here sibling k's span is
// the k + 1 pieces before it and it has one piece, so k siblings count k(k + 1) in all.
std::string Siblings(int n) {
  std::string xml = "<schema name='s'><module name='p'>";
  for (int i = 0; i < n; ++i) xml += "t <module name='c" + std::to_string(i) + "'>x</module> ";
  return xml + "</module></schema>";
}

TEST(PmlLimits, TextBetweenSiblingsIsBoundedBySpanReferences) {
  static_assert(724 * 725 > pml_internal::kMaxSpanReferences &&
                723 * 724 <= pml_internal::kMaxSpanReferences);
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(Siblings(723), "s.xml", kWords));
  ASSERT_EQ(s.modules.size(), 724u);
  for (int k : {0, 1, 722}) EXPECT_EQ(s.modules[1 + k].span.size(), size_t(k + 1)) << k;
  const std::string error = SchemaError(Siblings(724), kWords);
  EXPECT_TRUE(HasText(error, "the modules attend to more than 524288 text pieces")) << error;
  EXPECT_TRUE(HasText(error, "module 'c723' passes it")) << error;
  // 150,000 siblings (5 MB): refused at the bound, without building the rest.
  EXPECT_TRUE(HasText(SchemaError(Siblings(150000), kWords), "module 'c723' passes it"));
}

// A module's span is hashed again for each piece of its own text: 1,000 pieces before a module
// with 600 of its own (parameters between them) pass the bound, though its span alone is small.
TEST(PmlLimits, ASpanCountsOnceForEachPieceOfTheModulesText) {
  auto pieces = [](const std::string& prefix, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
      out += "t <parameter name='" + prefix + std::to_string(i) + "' length='1'/>";
    }
    return out;
  };
  const std::string over = "<schema name='s'><module name='p'>" + pieces("a", 1000) +
                           "<module name='c'>" + pieces("b", 600) + "x</module></module></schema>";
  EXPECT_TRUE(HasText(SchemaError(over, kWords), "module 'c' passes it"));
  const std::string under = "<schema name='s'><module name='p'>" + pieces("a", 1000) +
                            "<module name='c'>" + pieces("b", 400) + "x</module></module></schema>";
  EXPECT_EQ(SchemaError(under, kWords), "OK");
}

}  // namespace
}  // namespace promptcache
