// PML against hostile sizes (issue 28): nesting is refused by depth before any recursive walk
// (pugixml's parser is iterative: a million nested elements parse here on the test thread's
// stack), and a union of 150,000 members registers, its layout listing each member once, in
// order (FormatLayout gathered each module's children by scanning every module: n^2).
#include <gtest/gtest.h>

#include <string>

#include "pml/pml.h"
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

}  // namespace
}  // namespace promptcache
