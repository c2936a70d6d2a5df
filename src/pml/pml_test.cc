// PML layout, spans, keys and prompt plans. Error messages are tested in pml_errors_test.cc.
#include "pml/pml.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "pml/pml_internal.h"
#include "pml/pml_test_util.h"

namespace promptcache {
namespace {

using pml_internal::NormalizeText;

std::vector<int32_t> Words(std::string_view text) { return kWords.Tokenize(text); }

int Mod(const SchemaLayout& s, std::string_view name) {
  const int i = s.FindModule(name);
  EXPECT_GE(i, 0) << name;
  return i;
}

std::vector<std::string> SpanNames(const SchemaLayout& s, std::string_view module) {
  std::vector<std::string> out;
  for (const PmlTextRef& ref : s.modules[Mod(s, module)].span) {
    const PmlTextPiece& p = s.Piece(ref);
    out.push_back((ref.module == kPmlAlways ? std::string("always") : s.modules[ref.module].name) +
                  "@" + std::to_string(p.start));
  }
  return out;
}

TEST(PmlText, NormalizeDropsIndentationKeepsSameLineSpace) {
  EXPECT_EQ(NormalizeText("\n    Hello world.\n  "), "Hello world.");
  EXPECT_EQ(NormalizeText("Greet the customer, whose name is "),
            "Greet the customer, whose name is ");
  EXPECT_EQ(NormalizeText("  a  "), "  a  ");
  EXPECT_EQ(NormalizeText("\n   \n  "), "");
  EXPECT_EQ(NormalizeText(" "), " ");
  EXPECT_EQ(NormalizeText(""), "");
  // Common indentation of the lines is removed; relative indentation is kept.
  EXPECT_EQ(NormalizeText("\n    def f():\n        return 1\n    "), "def f():\n    return 1");
  // Code at column 0 keeps its indentation.
  EXPECT_EQ(NormalizeText("\nclass A:\n    x = 1\n"), "class A:\n    x = 1");
  // Blank lines stay, emptied; they do not count for the common indentation.
  EXPECT_EQ(NormalizeText("\n  one\n\n     \n  two\n"), "one\n\n\ntwo");
  // A first line on the tag's line has no known indentation.
  EXPECT_EQ(NormalizeText("First line\n    second line\n"), "First line\nsecond line");
  EXPECT_EQ(NormalizeText("\tTabbed\n\tlines"), "\tTabbed\nlines");
}

TEST(PmlLayout, SpecExample) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, LoadSchema(PmlTestData() + "/support.xml", kWords));
  EXPECT_EQ(s.name, "support");
  ASSERT_EQ(s.always.size(), 1u);
  EXPECT_EQ(s.always[0].start, 0);
  EXPECT_EQ(s.always[0].tokens,
            Words("[system] You are a support agent for ACME. Answer from the documents only. "
                  "[/system]"));
  ASSERT_EQ(s.modules.size(), 7u);
  const PmlModule& tone = s.modules[Mod(s, "tone")];
  EXPECT_EQ(tone.start, 14);
  EXPECT_EQ(tone.length, 24);
  EXPECT_EQ(tone.token_count, 4);
  EXPECT_TRUE(tone.fixed_length);
  const PmlModule& en = s.modules[Mod(s, "doc-en")];
  const PmlModule& fr = s.modules[Mod(s, "doc-fr")];
  EXPECT_EQ(en.start, 38);
  EXPECT_EQ(fr.start, 38);
  EXPECT_EQ(en.length, 14);
  EXPECT_EQ(fr.length, 20);
  EXPECT_EQ(en.texts[0].tokens,
            Words("ACME device manual. To reset the device, hold the power button for ten "
                  "seconds."));
  ASSERT_EQ(s.unions.size(), 1u);
  EXPECT_EQ(s.unions[0].length, 20);
  EXPECT_EQ(s.unions[0].default_member, Mod(s, "doc-en"));
  EXPECT_EQ(en.union_index, 0);
  const PmlModule& greeting = s.modules[Mod(s, "greeting")];
  EXPECT_EQ(greeting.start, 58);
  EXPECT_EQ(greeting.length, 13);
  ASSERT_EQ(greeting.texts.size(), 2u);
  EXPECT_EQ(greeting.texts[0].start, 58);
  EXPECT_EQ(greeting.texts[0].tokens, Words("Greet the customer, whose name is"));
  EXPECT_EQ(greeting.texts[1].start, 70);
  EXPECT_EQ(greeting.texts[1].tokens, Words("."));
  ASSERT_EQ(greeting.parameters.size(), 1u);
  EXPECT_EQ(greeting.parameters[0].start, 64);
  EXPECT_EQ(greeting.parameters[0].length, 6);
  EXPECT_EQ(greeting.parameters[0].scaffold_tokens, Words("friend"));
  EXPECT_EQ(s.modules[Mod(s, "example-q")].start, 71);
  EXPECT_EQ(s.modules[Mod(s, "example-a")].start, 78);
  EXPECT_EQ(s.modules[Mod(s, "example-a")].scaffold_index, 0);
  const PmlModule& ticket = s.modules[Mod(s, "ticket")];
  EXPECT_EQ(ticket.start, 86);
  EXPECT_EQ(ticket.length, 9);
  EXPECT_FALSE(ticket.cached);
  EXPECT_EQ(ticket.requires_modules, std::vector<int>{Mod(s, "greeting")});
  EXPECT_EQ(ticket.excludes_modules, std::vector<int>{Mod(s, "tone")});
  EXPECT_EQ(s.total_length, 95);
  // Spans: the always text; scaffold peers before; never siblings or uncached modules.
  EXPECT_EQ(SpanNames(s, "doc-fr"), std::vector<std::string>{"always@0"});
  EXPECT_EQ(SpanNames(s, "example-q"), std::vector<std::string>{"always@0"});
  EXPECT_EQ(SpanNames(s, "example-a"), (std::vector<std::string>{"always@0", "example-q@71"}));
  EXPECT_EQ(SpanNames(s, "ticket"), std::vector<std::string>{"always@0"});
}

TEST(PmlPlan, SpecExample) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, LoadSchema(PmlTestData() + "/support.xml", kWords));
  std::ifstream in(PmlTestData() + "/prompt.xml");
  const std::string xml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt prompt, ParsePrompt(xml, "prompt.xml"));
  EXPECT_EQ(prompt.schema, "support");
  ASSERT_EQ(prompt.text.size(), 1u);
  EXPECT_EQ(prompt.text[0].role, "user");
  EXPECT_EQ(prompt.text[0].text, "Comment réinitialiser l'appareil ?");
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan, PlanPrompt(s, prompt, kWords));
  EXPECT_EQ(plan.modules, (std::vector<int>{Mod(s, "doc-fr"), Mod(s, "greeting"),
                                            Mod(s, "example-q"), Mod(s, "example-a")}));
  EXPECT_TRUE(plan.defaulted.empty());
  const std::vector<PmlTextRef> cached = {{kPmlAlways, 0},          {Mod(s, "doc-fr"), 0},
                                          {Mod(s, "greeting"), 0},  {Mod(s, "greeting"), 1},
                                          {Mod(s, "example-q"), 0}, {Mod(s, "example-a"), 0}};
  EXPECT_EQ(plan.cached, cached);
  EXPECT_TRUE(plan.computed.empty());
  ASSERT_EQ(plan.arguments.size(), 1u);
  EXPECT_EQ(plan.arguments[0].module, Mod(s, "greeting"));
  EXPECT_EQ(plan.arguments[0].tokens.start, 64);
  EXPECT_EQ(plan.arguments[0].tokens.tokens, Words("Ana"));  // 1 of 6 slots: a gap follows
  EXPECT_FALSE(plan.arguments[0].is_default);
  EXPECT_EQ(plan.new_text.start, 95);
  EXPECT_EQ(plan.new_text.tokens, Words("[user] Comment réinitialiser l'appareil ? [/user]"));
  EXPECT_EQ(plan.end, 101);
}

TEST(PmlPlan, SpecExampleDefaultsAndUncachedModule) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, LoadSchema(PmlTestData() + "/support.xml", kWords));
  // No doc picked: the union's scaffold doc-en comes in; greeting's name defaults to "friend";
  // the uncached ticket's text is computed at request time.
  PML_ASSERT_OK_AND_ASSIGN(
      PmlPrompt prompt,
      ParsePrompt("<prompt schema='support'><ticket id='A-17'/><greeting/>Hi</prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan, PlanPrompt(s, prompt, kWords));
  EXPECT_EQ(plan.modules,
            (std::vector<int>{Mod(s, "doc-en"), Mod(s, "greeting"), Mod(s, "ticket")}));
  EXPECT_EQ(plan.defaulted, std::vector<int>{Mod(s, "doc-en")});
  EXPECT_EQ(plan.computed, (std::vector<PmlTextRef>{{Mod(s, "ticket"), 0}}));
  ASSERT_EQ(plan.arguments.size(), 2u);
  EXPECT_EQ(plan.arguments[0].tokens.start, 64);
  EXPECT_EQ(plan.arguments[0].tokens.tokens, Words("friend"));
  EXPECT_TRUE(plan.arguments[0].is_default);
  EXPECT_EQ(plan.arguments[1].tokens.start, 87);
  EXPECT_EQ(plan.arguments[1].tokens.tokens, Words("A-17"));
  EXPECT_EQ(plan.new_text.start, 95);
  EXPECT_EQ(plan.new_text.tokens, Words("Hi"));
}

TEST(PmlLayout, BosAtZeroAndNewTextAtSchemaEnd) {
  const FakePmlEncoder bos_enc(FakePmlEncoder::Mode::kWords, 1);
  PML_ASSERT_OK_AND_ASSIGN(
      SchemaLayout s,
      ParseSchema("<schema name='s'><module name='a'>x y</module>tail</schema>", "s.xml", bos_enc));
  ASSERT_EQ(s.always.size(), 2u);
  EXPECT_EQ(s.always[0].start, 0);
  EXPECT_EQ(s.always[0].tokens, std::vector<int32_t>{1});  // BOS alone: no leading text
  EXPECT_EQ(s.modules[0].start, 1);
  EXPECT_EQ(s.always[1].start, 3);
  EXPECT_EQ(s.total_length, 4);
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p, ParsePrompt("<prompt schema='s'><a/>q r</prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan, PlanPrompt(s, p, bos_enc));
  EXPECT_EQ(plan.new_text.start, 4);
  EXPECT_EQ(plan.end, 6);
  // Leading text: BOS is its first token.
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout t,
                           ParseSchema("<schema name='t'>hello there</schema>", "t.xml", bos_enc));
  ASSERT_EQ(t.always.size(), 1u);
  EXPECT_EQ(t.always[0].tokens, (std::vector<int32_t>{1, Words("hello")[0], Words("there")[0]}));
  EXPECT_EQ(t.total_length, 3);
}

TEST(PmlLayout, UnionMembersShareStart) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(R"(<schema name="s">
      intro
      <union>
        <module name="a">one two three</module>
        <module name="b">one</module>
        <module name="c" length="5">x</module>
      </union>
      <module name="after">z</module>
    </schema>)",
                                                       "s.xml", kWords));
  EXPECT_EQ(s.modules[Mod(s, "a")].start, 1);
  EXPECT_EQ(s.modules[Mod(s, "b")].start, 1);
  EXPECT_EQ(s.modules[Mod(s, "c")].start, 1);
  EXPECT_EQ(s.unions[0].length, 5);  // the longest member, reserved length included
  EXPECT_EQ(s.unions[0].default_member, -1);
  EXPECT_EQ(s.modules[Mod(s, "after")].start, 6);
  // Members never attend to each other.
  EXPECT_EQ(SpanNames(s, "b"), std::vector<std::string>{"always@0"});
}

// Builds a schema whose module "m" has the given text, for edit-and-compare tests.
std::string EditSchema(std::string_view m_text, bool fixed) {
  return std::string("<schema name='e'>sys <module name='first'>f1 f2</module>") +
         "<module name='m'" + (fixed ? " length='10'" : "") + ">" + std::string(m_text) +
         "<module name='inner'>i1</module> mtail</module>" + "<module name='sib'>s1 s2</module>" +
         "<scaffold><module name='p'>p1</module><module name='q'>q1</module></scaffold>" +
         " end</schema>";
}

TEST(PmlLayout, FixedLengthKeepsLaterPositions) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout a, ParseSchema(EditSchema("m1 m2", true), "e", kWords));
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout b,
                           ParseSchema(EditSchema("m1 m2 m3 m4", true), "e", kWords));
  EXPECT_EQ(a.modules[Mod(a, "m")].length, 10);
  EXPECT_EQ(b.modules[Mod(b, "m")].length, 10);
  for (const char* later : {"sib", "p", "q"}) {
    EXPECT_EQ(a.modules[Mod(a, later)].start, b.modules[Mod(b, later)].start) << later;
  }
  EXPECT_EQ(a.total_length, b.total_length);
  // Without length="10" the edit moves everything after it.
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout c, ParseSchema(EditSchema("m1 m2", false), "e", kWords));
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout d,
                           ParseSchema(EditSchema("m1 m2 m3 m4", false), "e", kWords));
  EXPECT_EQ(d.modules[Mod(d, "sib")].start, c.modules[Mod(c, "sib")].start + 2);
  EXPECT_EQ(d.total_length, c.total_length + 2);
}

TEST(PmlLayout, ContentKeysChangeOnlyForDependents) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout a, ParseSchema(EditSchema("m1 m2", true), "e", kWords));
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout b,
                           ParseSchema(EditSchema("m1 CHANGED", true), "e", kWords));
  auto key = [](const SchemaLayout& s, std::string_view n) { return s.modules[Mod(s, n)].key; };
  EXPECT_NE(key(a, "m"), key(b, "m"));
  EXPECT_NE(key(a, "inner"), key(b, "inner"));  // attends to m's text before it
  for (const char* same : {"first", "sib", "p", "q"}) {
    EXPECT_EQ(key(a, same), key(b, same)) << same;
  }
  EXPECT_EQ(a.always[0].key, b.always[0].key);
  EXPECT_EQ(a.always[1].key, b.always[1].key);  // " end": attends to always text only
  // m's text after `inner` changes: inner does not attend to it, so its key stays.
  const std::string c_xml = EditSchema("m1 m2", true);
  std::string d_xml = c_xml;
  d_xml.replace(d_xml.find(" mtail"), 6, " mTAIL");
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout c, ParseSchema(c_xml, "e", kWords));
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout d, ParseSchema(d_xml, "e", kWords));
  EXPECT_NE(key(c, "m"), key(d, "m"));
  EXPECT_EQ(key(c, "inner"), key(d, "inner"));
  // A scaffold member's edit reaches its later peers only.
  std::string e_xml = c_xml;
  e_xml.replace(e_xml.find(">p1<"), 4, ">P1<");
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout e, ParseSchema(e_xml, "e", kWords));
  EXPECT_NE(key(c, "p"), key(e, "p"));
  EXPECT_NE(key(c, "q"), key(e, "q"));
  EXPECT_EQ(key(c, "sib"), key(e, "sib"));
  EXPECT_EQ(key(c, "m"), key(e, "m"));
  // Leading always text reaches everything.
  std::string f_xml = c_xml;
  f_xml.replace(f_xml.find("sys "), 4, "SYS ");
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout f, ParseSchema(f_xml, "e", kWords));
  for (const PmlModule& m : c.modules) EXPECT_NE(m.key, key(f, m.name)) << m.name;
  // Same text at other positions is other K/V.
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout g, ParseSchema(EditSchema("m1 m2 m3", false), "e", kWords));
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout h, ParseSchema(EditSchema("m1 m2", false), "e", kWords));
  EXPECT_NE(key(g, "sib"), key(h, "sib"));
  // Keys are deterministic.
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout c2, ParseSchema(c_xml, "e", kWords));
  for (const PmlModule& m : c.modules) EXPECT_EQ(m.key, key(c2, m.name));
  EXPECT_EQ(c.modules[0].key.size(), 32u);
}

TEST(PmlLayout, NestedModulesAndSpans) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(R"(<schema name="n">
  <user>Read these. <module name="outer">o1 o2
      <module name="child">c1</module>
      o3
      <union scaffold="u2">
        <module name="u1">x1 x2 x3</module>
        <module name="u2">y1<module name="deep">d1</module></module>
      </union>
      o4
    </module> between <module name="sibling">s1</module></user>
</schema>)",
                                                       "n.xml", kWords));
  // always: "[user] Read these." = 3 tokens at 0.
  const PmlModule& outer = s.modules[Mod(s, "outer")];
  EXPECT_EQ(outer.start, 3);
  ASSERT_EQ(outer.texts.size(), 3u);
  EXPECT_EQ(outer.texts[0].start, 3);  // o1 o2
  EXPECT_EQ(s.modules[Mod(s, "child")].start, 5);
  EXPECT_EQ(outer.texts[1].start, 6);  // o3
  EXPECT_EQ(s.modules[Mod(s, "u1")].start, 7);
  EXPECT_EQ(s.modules[Mod(s, "u2")].start, 7);
  EXPECT_EQ(s.modules[Mod(s, "deep")].start, 8);
  EXPECT_EQ(s.modules[Mod(s, "deep")].parent, Mod(s, "u2"));
  EXPECT_EQ(s.unions[0].parent, Mod(s, "outer"));
  EXPECT_EQ(s.unions[0].length, 3);
  EXPECT_EQ(outer.texts[2].start, 10);  // o4
  EXPECT_EQ(outer.length, 8);
  EXPECT_EQ(outer.children, (std::vector<int>{Mod(s, "child"), Mod(s, "u1"), Mod(s, "u2")}));
  EXPECT_EQ(s.always[1].start, 11);  // " between"
  EXPECT_EQ(s.modules[Mod(s, "sibling")].start, 12);
  EXPECT_EQ(s.always[2].start, 13);  // "[/user]"
  EXPECT_EQ(s.total_length, 14);
  // Enclosing text before it, not after; always text before it, not after; no siblings.
  EXPECT_EQ(SpanNames(s, "child"), (std::vector<std::string>{"always@0", "outer@3"}));
  EXPECT_EQ(SpanNames(s, "u1"), (std::vector<std::string>{"always@0", "outer@3", "outer@6"}));
  EXPECT_EQ(SpanNames(s, "deep"),
            (std::vector<std::string>{"always@0", "outer@3", "outer@6", "u2@7"}));
  EXPECT_EQ(SpanNames(s, "sibling"), (std::vector<std::string>{"always@0", "always@11"}));
  EXPECT_TRUE(s.modules[Mod(s, "outer")].span.size() == 1);

  // Plans: union default inside an included parent; none when the parent is left out.
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p1, ParsePrompt("<prompt schema='n'><outer/></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan1, PlanPrompt(s, p1, kWords));
  EXPECT_EQ(plan1.modules, (std::vector<int>{Mod(s, "outer"), Mod(s, "u2")}));
  EXPECT_EQ(plan1.defaulted, std::vector<int>{Mod(s, "u2")});
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p2, ParsePrompt("<prompt schema='n'><sibling/></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan2, PlanPrompt(s, p2, kWords));
  EXPECT_EQ(plan2.modules, std::vector<int>{Mod(s, "sibling")});
  PML_ASSERT_OK_AND_ASSIGN(
      PmlPrompt p3,
      ParsePrompt("<prompt schema='n'><sibling/><outer><u2><deep/></u2><child/></outer></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan3, PlanPrompt(s, p3, kWords));
  EXPECT_EQ(plan3.modules, (std::vector<int>{Mod(s, "outer"), Mod(s, "child"), Mod(s, "u2"),
                                             Mod(s, "deep"), Mod(s, "sibling")}));
  EXPECT_TRUE(plan3.defaulted.empty());
}

TEST(PmlLayout, ParametersReserveSlots) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(R"(<schema name="p">
  <module name="m">Dear <parameter name="first" length="3"/> <parameter name="last" length="4" scaffold="Doe"/>, hello</module>
  <module name="n">after</module>
</schema>)",
                                                       "p.xml", kWords));
  const PmlModule& m = s.modules[0];
  ASSERT_EQ(m.parameters.size(), 2u);
  EXPECT_EQ(m.texts[0].tokens, Words("Dear"));
  EXPECT_EQ(m.parameters[0].start, 1);
  EXPECT_EQ(m.parameters[1].start, 4);  // the space between them is no token here
  ASSERT_EQ(m.texts.size(), 2u);
  EXPECT_EQ(m.texts[1].start, 8);
  EXPECT_EQ(m.length, 10);
  EXPECT_EQ(m.token_count, 3);
  EXPECT_EQ(s.modules[1].start, 10);
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p,
                           ParsePrompt("<prompt schema='p'><m first='Ana Maria'/></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan, PlanPrompt(s, p, kWords));
  ASSERT_EQ(plan.arguments.size(), 2u);
  EXPECT_EQ(plan.arguments[0].tokens.start, 1);
  EXPECT_EQ(plan.arguments[0].tokens.tokens, Words("Ana Maria"));
  EXPECT_EQ(plan.arguments[1].tokens.start, 4);
  EXPECT_EQ(plan.arguments[1].tokens.tokens, Words("Doe"));
  EXPECT_TRUE(plan.arguments[1].is_default);
}

TEST(PmlPlan, OrderOfReferencesDoesNotMatter) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, LoadSchema(PmlTestData() + "/support.xml", kWords));
  PML_ASSERT_OK_AND_ASSIGN(
      PmlPrompt a,
      ParsePrompt("<prompt schema='support'><example-a/><greeting name='Bo'/><doc-fr/></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(
      PmlPrompt b,
      ParsePrompt("<prompt schema='support'><doc-fr/><example-a/><greeting name='Bo'/></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan pa, PlanPrompt(s, a, kWords));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan pb, PlanPrompt(s, b, kWords));
  EXPECT_EQ(pa.modules, pb.modules);
  EXPECT_EQ(pa.cached, pb.cached);
  ASSERT_EQ(pa.arguments.size(), pb.arguments.size());
  EXPECT_EQ(pa.arguments[0].tokens.tokens, pb.arguments[0].tokens.tokens);
  // A scaffold member may be used alone.
  EXPECT_EQ(pa.modules,
            (std::vector<int>{Mod(s, "doc-fr"), Mod(s, "greeting"), Mod(s, "example-a")}));
}

TEST(PmlLayout, RoleTagsAndCdata) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s,
                           ParseSchema(R"(<schema name="r">
  <system>
    Be kind.
  </system>
  <module name="q"><user>How?</user></module>
  <module name="code"><![CDATA[
  keep   this
]]></module>
</schema>)",
                                       "r.xml", FakePmlEncoder(FakePmlEncoder::Mode::kBytes)));
  const FakePmlEncoder bytes(FakePmlEncoder::Mode::kBytes);
  EXPECT_EQ(s.always[0].tokens, bytes.Tokenize("[system]\nBe kind.\n[/system]\n"));
  EXPECT_EQ(s.modules[0].texts[0].tokens, bytes.Tokenize("[user]\nHow?\n[/user]\n"));
  EXPECT_EQ(s.modules[1].texts[0].tokens, bytes.Tokenize("\n  keep   this\n"));
  // The prompt's text: role tags rendered, normalized the same way.
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p, ParsePrompt(R"(<prompt schema="r">
  <q/>
  <user>
    Why?
  </user>
  <assistant>Because.</assistant>
</prompt>)"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan, PlanPrompt(s, p, bytes));
  // A final <assistant> turn is left open: generation continues the prefilled answer.
  EXPECT_EQ(plan.new_text.tokens, bytes.Tokenize("[user]\nWhy?\n[/user]\n[assistant]\nBecause."));
  // Any other turn is closed.
  PML_ASSERT_OK_AND_ASSIGN(
      PmlPrompt p2,
      ParsePrompt("<prompt schema='r'><assistant>Hi.</assistant><user>Why?</user></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan2, PlanPrompt(s, p2, bytes));
  EXPECT_EQ(plan2.new_text.tokens,
            bytes.Tokenize("[assistant]\nHi.\n[/assistant]\n[user]\nWhy?\n[/user]\n"));
}

TEST(PmlLayout, UncachedModulesAndInheritance) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(R"(<schema name="c">
  <scaffold>
    <module name="a" cache="false">a1<module name="a-child">ac</module></module>
    <module name="b">b1</module>
  </scaffold>
</schema>)",
                                                       "c.xml", kWords));
  EXPECT_FALSE(s.modules[Mod(s, "a")].cached);
  EXPECT_FALSE(s.modules[Mod(s, "a-child")].cached);  // computed with its parent
  EXPECT_TRUE(s.modules[Mod(s, "b")].cached);
  EXPECT_TRUE(SpanNames(s, "b").empty());  // the uncached peer is not in the cached span
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p,
                           ParsePrompt("<prompt schema='c'><a><a-child/></a><b/></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan, PlanPrompt(s, p, kWords));
  EXPECT_EQ(plan.computed, (std::vector<PmlTextRef>{{Mod(s, "a"), 0}, {Mod(s, "a-child"), 0}}));
  EXPECT_EQ(plan.cached, (std::vector<PmlTextRef>{{Mod(s, "b"), 0}}));
}

TEST(PmlLayout, RequiredDefaultsAndRequires) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, ParseSchema(R"(<schema name="d">
  <union scaffold="x"><module name="x">x</module><module name="y">y</module></union>
  <module name="need-x" requires="x">n</module>
  <module name="r" required="true">r</module>
</schema>)",
                                                       "d.xml", kWords));
  // x comes in by default and satisfies need-x's requires; r is required and given.
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p, ParsePrompt("<prompt schema='d'><r/><need-x/></prompt>"));
  PML_ASSERT_OK_AND_ASSIGN(PmlPlan plan, PlanPrompt(s, p, kWords));
  EXPECT_EQ(plan.modules, (std::vector<int>{Mod(s, "x"), Mod(s, "need-x"), Mod(s, "r")}));
}

TEST(PmlLayout, SrcThroughSymlinkInsideFolderIsFine) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pml_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "doc.txt") << "one two three";
  fs::create_symlink("sub/doc.txt", dir / "link.txt");
  std::ofstream(dir / "s.xml") << "<schema name='s'><module name='m' src='link.txt'/>"
                                  "<module name='n' src='./sub/doc.txt'/></schema>";
  auto s = LoadSchema((dir / "s.xml").string(), kWords);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->modules[0].texts[0].tokens, Words("one two three"));
  EXPECT_EQ(s->modules[1].start, 3);
  fs::remove_all(dir);
}

TEST(PmlLayout, FormatLayoutShowsRangesFlagsAndSpans) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, LoadSchema(PmlTestData() + "/support.xml", kWords));
  const std::string text = FormatLayout(s);
  const char* const kLines[] = {
      "schema 'support'",
      "total length 95 positions of a 4096 context",
      "always-included text: 14 tokens at [0, 14)",
      "new prompt text starts at 95",
      "union #0 [38, 58), length 20, default doc-en",
      "[14, 38)",
      "reserved 24",
      "cached, length=24",
      "union #0 default, src=docs/manual-en.txt",
      "parameter name [64, 70) length 6, scaffold 'friend'",
      "scaffold #0",
      "attends to: always [0, 14), example-q [71, 78)",
      "not cached, requires greeting, excludes tone",
  };
  for (const char* line : kLines) EXPECT_TRUE(HasText(text, line)) << line;
  // Modules appear in document order.
  EXPECT_LT(text.find("tone"), text.find("doc-en"));
  EXPECT_LT(text.find("example-a"), text.find("ticket"));
}

TEST(PmlPrompt, FindPromptSchema) {
  PML_ASSERT_OK_AND_ASSIGN(SchemaLayout s, LoadSchema(PmlTestData() + "/support.xml", kWords));
  PML_ASSERT_OK_AND_ASSIGN(PmlPrompt p, ParsePrompt("<prompt schema='support'/>"));
  PML_ASSERT_OK_AND_ASSIGN(const SchemaLayout* found, FindPromptSchema(p, {&s}));
  EXPECT_EQ(found, &s);
}

}  // namespace
}  // namespace promptcache
