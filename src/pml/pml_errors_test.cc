// Every PML error: the message names the file position, the schema and the element at fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "pml/pml.h"
#include "pml/pml_internal.h"
#include "pml/pml_test_util.h"

namespace promptcache {
namespace {

// The message of a failed plan of `prompt_xml` against `schema_xml`.
std::string PromptError(std::string_view schema_xml, std::string_view prompt_xml,
                        const PmlTextEncoder& enc = kWords) {
  auto s = ParseSchema(schema_xml, "s.xml", enc);
  if (!s.ok()) return "schema: " + s.status().message();
  auto p = ParsePrompt(prompt_xml, "p.xml");
  if (!p.ok()) return p.status().message();
  auto plan = PlanPrompt(*s, *p, enc);
  return plan.ok() ? "OK" : plan.status().message();
}

// ---- Schema errors ----

TEST(PmlSchemaErrors, MalformedXml) {
  const std::string msg =
      SchemaError("<schema name='s'>\n  <module name='a'>x</modul>\n</schema>", kWords);
  EXPECT_TRUE(HasText(msg, "s.xml:2:"));
  EXPECT_TRUE(HasText(msg, "malformed XML: Start-end tags mismatch"));
  EXPECT_TRUE(HasText(SchemaError("", kWords), "malformed XML"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'/>\n<schema name='t'/>", kWords),
                      "s.xml:2:1: malformed XML: element <schema> after the root element"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'/>junk", kWords),
                      "malformed XML: text outside the root element"));
}

TEST(PmlSchemaErrors, RootAndSchemaName) {
  EXPECT_TRUE(HasText(SchemaError("<prompt schema='s'/>", kWords),
                      "s.xml:1:1: the root element is <prompt>, expected <schema"));
  EXPECT_TRUE(HasText(SchemaError("<schema/>", kWords), "s.xml:1:1: <schema> without a name"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='9lives'/>", kWords),
                      "s.xml:1:1: schema name '9lives' is not valid"));
  const std::string long_name(129, 'a');
  EXPECT_TRUE(HasText(SchemaError("<schema name='" + long_name + "'/>", kWords),
                      "is not valid (at most 128 letters"));
  EXPECT_EQ(SchemaError("<schema name='" + std::string(128, 'a') + "'/>", kWords), "OK");
  EXPECT_TRUE(HasText(SchemaError("<schema name='s' version='2'/>", kWords),
                      "s.xml:1:1: schema 's': <schema>: unknown attribute 'version'"));
}

TEST(PmlSchemaErrors, UnknownElementAndAttribute) {
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'>\n  <modul name='a'/>\n</schema>", kWords),
                      "s.xml:2:3: schema 's': unknown element <modul>"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'>\n <module name='a' lenght='3'>x</module>"
                                  "</schema>",
                                  kWords),
                      "s.xml:2:2: schema 's': module 'a': unknown attribute 'lenght'"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><union name='u'><module name='a'/></union>"
                                  "</schema>",
                                  kWords),
                      "schema 's': <union>: unknown attribute 'name'"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a'><parameter name='p' "
                                  "length='2' default='x'/></module></schema>",
                                  kWords),
                      "module 'a': parameter 'p': unknown attribute 'default'"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><user role='x'>hi</user></schema>", kWords),
                      "<user>: unknown attribute 'role'"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><scaffold x='1'><module name='a'/>"
                                  "</scaffold></schema>",
                                  kWords),
                      "<scaffold>: unknown attribute 'x'"));
}

TEST(PmlSchemaErrors, DuplicateNames) {
  const std::string msg = SchemaError(
      "<schema name='s'>\n<module name='a'>x</module>\n<module name='b'>\n"
      "   <module name='a'>y</module></module></schema>",
      kWords);
  EXPECT_TRUE(HasText(msg,
                      "s.xml:4:4: schema 's': duplicate module name 'a' (first defined at "
                      "s.xml:2:1)"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a'><parameter name='p' "
                                  "length='1'/>\n<parameter name='p' length='2'/></module>"
                                  "</schema>",
                                  kWords),
                      "s.xml:2:1: schema 's': module 'a': duplicate parameter name 'p'"));
  // Parameters are per module: two modules may both have a `name` parameter, and a parameter
  // may share its module's name.
  EXPECT_EQ(SchemaError("<schema name='s'><module name='a'><parameter name='name' length='1'/>"
                        "</module><module name='b'><parameter name='name' length='1'/>"
                        "<parameter name='b' length='1'/></module></schema>",
                        kWords),
            "OK");
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a' name='b'/></schema>", kWords),
                      "attribute 'name' given twice"));
}

TEST(PmlSchemaErrors, BadNames) {
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='bad name'/></schema>", kWords),
                      "s.xml:1:18: schema 's': module name 'bad name' is not valid"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='-x'/></schema>", kWords),
                      "module name '-x' is not valid"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module/></schema>", kWords),
                      "<module> without a name"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='user'/></schema>", kWords),
                      "module name 'user' is reserved"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a'><parameter name='1p' "
                                  "length='1'/></module></schema>",
                                  kWords),
                      "module 'a': parameter name '1p' is not valid"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a'><parameter length='1'/>"
                                  "</module></schema>",
                                  kWords),
                      "module 'a': <parameter> without a name"));
  EXPECT_EQ(SchemaError("<schema name='s'><module name='unit.py'/><module name='_a-b.c9'/>"
                        "</schema>",
                        kWords),
            "OK");
}

TEST(PmlSchemaErrors, BadLengthsAndFlags) {
  for (const char* bad : {"abc", "0", "-3", "", "1.5", " 4", "+4"}) {
    EXPECT_TRUE(HasText(SchemaError(std::string("<schema name='s'><module name='a' length='") +
                                        bad + "'>x</module></schema>",
                                    kWords),
                        "module 'a': length '" + std::string(bad) + "' is not a positive integer"))
        << bad;
  }
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a' length='99999999999999999'>"
                                  "x</module></schema>",
                                  kWords),
                      "is too large"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a'><parameter name='p' "
                                  "length='zero'/></module></schema>",
                                  kWords),
                      "module 'a': parameter 'p': length 'zero' is not a positive integer"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a'><parameter name='p'/>"
                                  "</module></schema>",
                                  kWords),
                      "module 'a': parameter 'p': no length"));
  EXPECT_TRUE(
      HasText(SchemaError("<schema name='s'><module name='a' cache='no'/></schema>", kWords),
              "module 'a': cache='no' must be \"true\" or \"false\""));
  EXPECT_TRUE(
      HasText(SchemaError("<schema name='s'><module name='a' required='yes'/></schema>", kWords),
              "module 'a': required='yes' must be \"true\" or \"false\""));
}

TEST(PmlSchemaErrors, ModuleTextLongerThanLength) {
  const std::string msg = SchemaError(
      "<schema name='support'>\n\n  <module name='doc-fr' length='3'>one two three four</module>"
      "\n</schema>",
      kWords, "support.xml");
  EXPECT_EQ(msg,
            "support.xml:3:3: schema 'support': module 'doc-fr': text is 4 tokens, longer than "
            "its length 3");
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a' length='4'>x "
                                  "<parameter name='p' length='4'/></module></schema>",
                                  kWords),
                      "module 'a': content needs 5 positions (1 text tokens"));
  EXPECT_EQ(
      SchemaError("<schema name='s'><module name='a' length='4'>a b c d</module></schema>", kWords),
      "OK");
}

TEST(PmlSchemaErrors, ParameterScaffoldLongerThanLength) {
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='g'>\n<parameter name='who' "
                                  "length='2' scaffold='dear old friend'/></module></schema>",
                                  kWords),
                      "s.xml:2:1: schema 's': module 'g': parameter 'who': scaffold 'dear old "
                      "friend' is 3 tokens, longer than its length 2"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='g'><parameter name='p' "
                                  "length='2'>text</parameter></module></schema>",
                                  kWords),
                      "parameter 'p': <parameter> must be empty"));
  EXPECT_TRUE(
      HasText(SchemaError("<schema name='s'>\n<parameter name='p' length='2'/></schema>", kWords),
              "s.xml:2:1: schema 's': <parameter> outside any module"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><system><parameter name='p' length='2'/>"
                                  "</system></schema>",
                                  kWords),
                      "<parameter> outside any module"));
}

class PmlSrcErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    root_ = fs::temp_directory_path() / ("pml_src_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "schemas" / "docs");
    std::ofstream(root_ / "secret.txt") << "top secret";
    std::ofstream(root_ / "schemas" / "docs" / "ok.txt") << "fine";
    fs::create_symlink(root_ / "secret.txt", root_ / "schemas" / "escape.txt");
    fs::create_directories(root_ / "schemas" / "adir");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string Load(const std::string& module_xml) {
    std::ofstream(root_ / "schemas" / "s.xml")
        << "<schema name='s'>\n  " << module_xml << "\n</schema>";
    auto r = LoadSchema((root_ / "schemas" / "s.xml").string(), kWords);
    return r.ok() ? "OK" : r.status().message();
  }

  std::filesystem::path root_;
};

TEST_F(PmlSrcErrors, UnreadableOrOutsideFolder) {
  EXPECT_EQ(Load("<module name='a' src='docs/ok.txt'/>"), "OK");
  std::string msg = Load("<module name='a' src='docs/missing.txt'/>");
  EXPECT_TRUE(HasText(msg,
                      "s.xml:2:3: schema 's': module 'a': cannot read src "
                      "'docs/missing.txt': No such file or directory"))
      << msg;
  msg = Load("<module name='a' src='../secret.txt'/>");
  EXPECT_TRUE(HasText(msg,
                      "s.xml:2:3: schema 's': module 'a': src '../secret.txt' leaves the "
                      "schema's folder"))
      << msg;
  msg = Load("<module name='a' src='docs/../../secret.txt'/>");
  EXPECT_TRUE(HasText(msg, "leaves the schema's folder")) << msg;
  msg = Load("<module name='a' src='" + (root_ / "secret.txt").string() + "'/>");
  EXPECT_TRUE(HasText(msg, "module 'a': src '")) << msg;
  EXPECT_TRUE(HasText(msg, "is an absolute path")) << msg;
  msg = Load("<module name='a' src='escape.txt'/>");
  EXPECT_TRUE(HasText(msg, "module 'a': src 'escape.txt' resolves outside the schema's folder"))
      << msg;
  msg = Load("<module name='a' src='adir'/>");
  EXPECT_TRUE(HasText(msg, "module 'a': src 'adir' is not a regular file")) << msg;
  msg = Load("<module name='a' src=''/>");
  EXPECT_TRUE(HasText(msg, "module 'a': src is empty")) << msg;
  msg = Load("<module name='a' src='docs/ok.txt'>inline</module>");
  EXPECT_TRUE(HasText(msg, "module 'a': has both src and content")) << msg;
}

TEST_F(PmlSrcErrors, SrcTextLongerThanLength) {
  std::ofstream(root_ / "schemas" / "docs" / "long.txt") << "a b c d e f";
  EXPECT_EQ(Load("<module name='doc' length='5' src='docs/long.txt'/>"),
            (root_ / "schemas" / "s.xml").string() +
                ":2:3: schema 's': module 'doc': text is 6 tokens, longer than its length 5");
}

TEST(PmlSchemaErrors, MissingSchemaFile) {
  auto r = LoadSchema("/nonexistent/dir/s.xml", kWords);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(HasText(r.status().message(), "/nonexistent/dir/s.xml: cannot open schema file"));
}

TEST(PmlSchemaErrors, UnionProblems) {
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'>\n<union>\n  hello <module name='a'/>"
                                  "</union></schema>",
                                  kWords),
                      "s.xml:2:8: schema 's': text 'hello ' inside <union>"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><union>\n<parameter name='p' length='1'/>"
                                  "</union></schema>",
                                  kWords),
                      "s.xml:2:1: schema 's': <parameter> inside <union>"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'>\n<union/></schema>", kWords),
                      "s.xml:2:1: schema 's': <union> without any <module>"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'>\n<union scaffold='c'><module name='a'/>"
                                  "<module name='b'/></union></schema>",
                                  kWords),
                      "s.xml:2:1: schema 's': union scaffold 'c' is not one of its modules "
                      "(a, b)"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><union><module name='a' required='true'/>"
                                  "</union></schema>",
                                  kWords),
                      "module 'a': a union member cannot be required"));
}

TEST(PmlSchemaErrors, ScaffoldAndRoleProblems) {
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><scaffold>\n  text<module name='a'/>"
                                  "</scaffold></schema>",
                                  kWords),
                      "s.xml:1:28: schema 's': text 'text' inside <scaffold>"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><scaffold><union><module name='a'/></union>"
                                  "</scaffold></schema>",
                                  kWords),
                      "<union> inside <scaffold> (only <module> elements"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><scaffold/></schema>", kWords),
                      "<scaffold> without any <module>"));
  EXPECT_TRUE(
      HasText(SchemaError("<schema name='s'><user>\n <system>x</system></user></schema>", kWords),
              "s.xml:2:2: schema 's': <system> inside <user>: chat turns do not nest"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><user><module name='a'><user>x</user>"
                                  "</module></user></schema>",
                                  kWords),
                      "<user> inside <module>: chat turns do not nest"));
}

TEST(PmlSchemaErrors, RequiresAndExcludesReferences) {
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'>\n<module name='a' requires='b zz'/>"
                                  "<module name='b'/></schema>",
                                  kWords),
                      "s.xml:2:1: schema 's': module 'a': requires unknown module 'zz'"));
  EXPECT_TRUE(
      HasText(SchemaError("<schema name='s'><module name='a' excludes='a'/></schema>", kWords),
              "module 'a': excludes itself"));
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a' requires='b' excludes='b'/>"
                                  "<module name='b'/></schema>",
                                  kWords),
                      "module 'a': both requires and excludes 'b'"));
}

TEST(PmlSchemaErrors, CacheTrueInsideUncached) {
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='a' cache='false'>\n"
                                  "<module name='b' cache='true'/></module></schema>",
                                  kWords),
                      "s.xml:2:1: schema 's': module 'b': cache=\"true\" inside module 'a', "
                      "which is not cached"));
}

TEST(PmlSchemaErrors, LongerThanContext) {
  const FakePmlEncoder small(FakePmlEncoder::Mode::kWords, std::nullopt, 10);
  auto r = ParseSchema(
      "<schema name='big'>a b c<module name='m'>d e f g h i j k</module>"
      "</schema>",
      "big.xml", small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message(),
            "big.xml:1:1: schema 'big': total length 11 positions exceeds the model's context of "
            "10 (module 'm' at [3, 11) is the first to pass it)");
  EXPECT_EQ(SchemaError("<schema name='fits'>a b<module name='m'>c d e f g h i j</module>"
                        "</schema>",
                        small),
            "OK");
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'><module name='m'><parameter name='p' "
                                  "length='20'/></module></schema>",
                                  small),
                      "total length 20 positions exceeds the model's context of 10"));
}

TEST(PmlSchemaErrors, NestingTooDeep) {
  std::string xml = "<schema name='s'>";
  for (int i = 0; i < 70; ++i) xml += "<module name='m" + std::to_string(i) + "'>";
  for (int i = 0; i < 70; ++i) xml += "</module>";
  xml += "</schema>";
  EXPECT_TRUE(HasText(SchemaError(xml, kWords), "elements nested deeper than 64 levels"));
}

TEST(PmlSchemaErrors, LineAndColumnCountCharacters) {
  // "é" is two bytes but one column.
  EXPECT_TRUE(HasText(SchemaError("<schema name='s'>\né <bad/></schema>", kWords),
                      "s.xml:2:3: schema 's': unknown element <bad>"));
}

// Columns come from a cursor that continues along a line (linear time on one-line schemas); asked
// for out of order, on other lines, or again, they are the same as counted from scratch.
TEST(PmlSchemaErrors, PositionsInAnyOrder) {
  auto src = pml_internal::XmlSource::Parse("<a>\né é é<b/>é\nxyz</a>", "x.xml");
  ASSERT_TRUE(src.ok());
  const pml_internal::XmlSource& x = **src;
  // Byte offsets: line 2 starts at 4; "é " is 3 bytes, 2 columns.
  auto at = [&](ptrdiff_t off) {
    const PmlSourcePos p = x.PosAt(off);
    return std::to_string(p.line) + ":" + std::to_string(p.column);
  };
  const std::vector<std::pair<ptrdiff_t, std::string>> cases = {
      {4, "2:1"}, {7, "2:3"},  {13, "2:7"}, {7, "2:3"},
      {0, "1:1"}, {13, "2:7"}, {21, "3:3"}, {10, "2:5"}};
  for (const auto& [off, want] : cases) EXPECT_EQ(at(off), want) << off;
}

// ---- Prompt errors ----

constexpr std::string_view kSchema = R"(<schema name="support">
  <system>Be helpful.</system>
  <module name="tone" length="24">Answer briefly.</module>
  <union scaffold="doc-en">
    <module name="doc-en">English manual.</module>
    <module name="doc-fr">Manuel.</module>
  </union>
  <module name="greeting">Greet <parameter name="name" length="2"/>.</module>
  <module name="outer">o <module name="inner">i</module></module>
  <module name="ticket" cache="false" requires="greeting" excludes="tone">Ticket: <parameter name="id" length="8"/></module>
  <module name="legal" required="true">Legal.</module>
</schema>)";

TEST(PmlPromptErrors, MalformedAndRoot) {
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support'>\n<legal>"),
                      "p.xml:2:7: malformed XML: Start-end tags mismatch"));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<schema name='support'/>"),
                      "p.xml:1:1: prompt: the root element is <schema>, expected <prompt"));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt/>"),
                      "p.xml:1:1: prompt: <prompt> without a schema attribute"));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support' model='x'/>"),
                      "p.xml:1:1: prompt: <prompt>: unknown attribute 'model'"));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support' positions='packed'/>"),
                      "p.xml:1:1: prompt: <prompt>: positions \"packed\" is neither \"schema\" "
                      "nor \"contiguous\""));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support' recompute='2'/>"),
                      "p.xml:1:1: prompt: <prompt>: recompute \"2\" is not a share from 0 to 1"));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support' recompute='x'/>"),
                      "recompute \"x\" is not a share"));
  auto p =
      ParsePrompt("<prompt schema='support' positions='contiguous' recompute='0.15'/>", "p.xml");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->positions, PmlPositions::kContiguous);
  EXPECT_EQ(p->recompute, 0.15);
}

TEST(PmlPromptErrors, UnknownSchema) {
  auto s = ParseSchema(kSchema, "s.xml", kWords);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto p = ParsePrompt("<prompt schema='billing'><legal/></prompt>", "p.xml");
  ASSERT_TRUE(p.ok());
  auto found = FindPromptSchema(*p, {&*s});
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(found.status().message(),
            "p.xml:1:1: prompt: unknown schema 'billing' (loaded: support)");
  auto plan = PlanPrompt(*s, *p, kWords);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(HasText(plan.status().message(), "p.xml:1:1: prompt: unknown schema 'billing'"));
}

TEST(PmlPromptErrors, UnknownOrMisplacedModule) {
  EXPECT_EQ(PromptError(kSchema, "<prompt schema='support'><legal/>\n  <tnoe/></prompt>"),
            "p.xml:2:3: prompt for schema 'support': unknown module 'tnoe'");
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support'><legal/><inner/></prompt>"),
                      "p.xml:1:34: prompt for schema 'support': module 'inner' is nested in "
                      "module 'outer'; reference it inside <outer>"));
  EXPECT_TRUE(
      HasText(PromptError(kSchema, "<prompt schema='support'><legal><tone/></legal></prompt>"),
              "module 'tone' is not nested in module 'legal'; it is a top-level module"));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support'><legal/>\n<legal/></prompt>"),
                      "p.xml:2:1: prompt for schema 'support': module 'legal' is referenced "
                      "twice (first at p.xml:1:26)"));
}

TEST(PmlPromptErrors, TwoMembersOfOneUnion) {
  EXPECT_EQ(PromptError(kSchema, "<prompt schema='support'><legal/><doc-en/>\n<doc-fr/></prompt>"),
            "p.xml:2:1: prompt for schema 'support': modules 'doc-en' and 'doc-fr' are members "
            "of one union (s.xml:4:3); pick at most one");
}

TEST(PmlPromptErrors, MissingRequiredModule) {
  EXPECT_EQ(PromptError(kSchema, "<prompt schema='support'>\n  <tone/>\n</prompt>"),
            "p.xml:1:1: prompt for schema 'support': missing required module 'legal' "
            "(s.xml:11:3)");
  // A required nested module is required only when its parent is included.
  const std::string nested =
      "<schema name='n'><module name='p'>x<module name='c' required='true'>y</module></module>"
      "</schema>";
  EXPECT_EQ(PromptError(nested, "<prompt schema='n'/>"), "OK");
  EXPECT_TRUE(HasText(PromptError(nested, "<prompt schema='n'><p/></prompt>"),
                      "missing required module 'c' (s.xml:1:36), required inside 'p'"));
}

TEST(PmlPromptErrors, RequiresAndExcludes) {
  EXPECT_EQ(PromptError(kSchema, "<prompt schema='support'><legal/>\n<ticket id='7'/></prompt>"),
            "p.xml:2:1: prompt for schema 'support': module 'ticket' requires module "
            "'greeting', which the prompt does not include");
  EXPECT_EQ(PromptError(kSchema,
                        "<prompt schema='support'><legal/><tone/><greeting name='A'/>\n"
                        "<ticket id='7'/></prompt>"),
            "p.xml:2:1: prompt for schema 'support': module 'ticket' excludes module 'tone', "
            "which the prompt includes");
  EXPECT_EQ(PromptError(kSchema,
                        "<prompt schema='support'><legal/><greeting name='A'/>"
                        "<ticket id='7'/></prompt>"),
            "OK");
}

TEST(PmlPromptErrors, ParameterArguments) {
  EXPECT_EQ(PromptError(kSchema,
                        "<prompt schema='support'><legal/>\n<greeting name='Ana Maria Lopez'/>"
                        "</prompt>"),
            "p.xml:2:1: prompt for schema 'support': module 'greeting': argument 'Ana Maria "
            "Lopez' for parameter 'name' is 3 tokens, longer than its length 2");
  EXPECT_EQ(PromptError(kSchema, "<prompt schema='support'><legal/>\n<greeting/></prompt>"),
            "p.xml:2:1: prompt for schema 'support': module 'greeting': no argument for "
            "parameter 'name', which has no scaffold default");
  EXPECT_EQ(PromptError(kSchema,
                        "<prompt schema='support'><legal/>\n<greeting nmae='A'/>"
                        "</prompt>"),
            "p.xml:2:1: prompt for schema 'support': module 'greeting' has no parameter 'nmae' "
            "(parameters: name)");
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support'><legal x='1'/></prompt>"),
                      "module 'legal' has no parameter 'x' (it has none)"));
  // A union's default member needs its arguments too.
  const std::string with_default =
      "<schema name='u'><union scaffold='a'><module name='a'><parameter name='p' length='1'/>"
      "</module></union></schema>";
  EXPECT_TRUE(HasText(PromptError(with_default, "<prompt schema='u'/>"),
                      "p.xml:1:1: prompt for schema 'u': module 'a' (included as its union's "
                      "default): no argument for parameter 'p'"));
  EXPECT_TRUE(HasText(PromptError(kSchema,
                                  "<prompt schema='support'><legal/><greeting "
                                  "name='A' name='B'/></prompt>"),
                      "attribute 'name' given twice"));
}

TEST(PmlPromptErrors, Structure) {
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support'><legal>hi</legal></prompt>"),
                      "p.xml:1:26: prompt: <legal> holds text: an unknown role tag"));
  // A misspelt role is named as one, also after the new text has started.
  EXPECT_TRUE(
      HasText(PromptError(kSchema, "<prompt schema='support'><narrator>hi</narrator></prompt>"),
              "p.xml:1:26: prompt: <narrator> holds text: an unknown role tag (chat turns are "
              "<system>, <user> and <assistant>)"));
  EXPECT_TRUE(
      HasText(PromptError(kSchema, "<prompt schema='support'><user>a</user><bot>b</bot></prompt>"),
              "prompt: <bot> holds text: an unknown role tag"));
  // Nested text in a reference is still named where it is.
  EXPECT_TRUE(
      HasText(PromptError(kSchema, "<prompt schema='support'><legal><x/>hi</legal></prompt>"),
              "prompt: <legal> holds text"));
  EXPECT_TRUE(HasText(
      PromptError(kSchema, "<prompt schema='support'><legal><user>x</user></legal></prompt>"),
      "p.xml:1:33: prompt: <user> inside module reference <legal>"));
  EXPECT_TRUE(
      HasText(PromptError(kSchema, "<prompt schema='support'><user>x <legal/></user></prompt>"),
              "p.xml:1:34: prompt: <legal> inside <user>"));
  EXPECT_TRUE(HasText(PromptError(kSchema, "<prompt schema='support'>Hello <legal/></prompt>"),
                      "p.xml:1:32: prompt: module reference <legal> after the new text"));
  EXPECT_TRUE(
      HasText(PromptError(kSchema, "<prompt schema='support'><user>a</user><legal/></prompt>"),
              "module reference <legal> after the new text"));
  EXPECT_TRUE(HasText(PromptError(kSchema,
                                  "<prompt schema='support'><user id='1'>a</user>"
                                  "</prompt>"),
                      "<user>: unknown attribute 'id'"));
}

TEST(PmlPromptErrors, LongerThanContext) {
  const FakePmlEncoder small(FakePmlEncoder::Mode::kWords, std::nullopt, 8);
  const std::string schema = "<schema name='s'>a b c <module name='m'>d e</module></schema>";
  EXPECT_EQ(PromptError(schema, "<prompt schema='s'>1 2 3</prompt>", small), "OK");
  const std::string msg = PromptError(schema, "<prompt schema='s'><m/>1 2 3 4</prompt>", small);
  EXPECT_EQ(msg,
            "p.xml:1:1: prompt for schema 's': needs 9 positions (schema 5 + new text 4), more "
            "than the model's context of 8");
}

}  // namespace
}  // namespace promptcache
