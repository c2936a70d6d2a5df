// libFuzzer target for PML: parses the input as a schema (and, when it is one, formats its
// layout and plans a fixed prompt against it), and as a prompt planned against a fixed schema,
// with the fake word encoder. Whatever the input, this must end in a Status, never a crash, and
// what comes out must be consistent: positions inside the schema, spans before their module.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "pml/pml.h"
#include "pml/pml_fake_encoder.h"

namespace promptcache {
namespace {

// src paths resolve under a folder that does not exist, so fuzzed schemas read no files.
constexpr const char* kSchemaPath = "/nonexistent-pml-fuzz/schema.xml";

constexpr std::string_view kFixedSchema = R"(<schema name="support">
  <system>You are a support agent.</system>
  <module name="tone" length="8">Answer briefly.</module>
  <union scaffold="doc-en">
    <module name="doc-en">English manual text.</module>
    <module name="doc-fr">Manuel en francais.<module name="fr-extra">Plus.</module></module>
  </union>
  <module name="greeting">Greet <parameter name="name" length="4" scaffold="friend"/>.</module>
  <scaffold>
    <module name="q">Q: reset?</module>
    <module name="a">A: hold the button.</module>
  </scaffold>
  <module name="ticket" cache="false" requires="greeting" excludes="tone">Ticket <parameter name="id" length="3"/></module>
  <module name="legal" required="true">Legal text.</module>
</schema>)";

constexpr std::string_view kFixedPrompt =
    "<prompt schema=\"fuzz\"><legal/><greeting name=\"Ana\"/><user>Hello</user></prompt>";

void Check(bool cond) {
  if (!cond) std::abort();
}

void CheckLayout(const SchemaLayout& s) {
  for (const PmlTextPiece& p : s.always) Check(p.start >= 0 && p.end() <= s.total_length);
  for (const PmlModule& m : s.modules) {
    Check(m.start >= 0 && m.end() <= s.total_length && m.length >= 0);
    for (const PmlTextPiece& p : m.texts) Check(p.start >= m.start && p.end() <= m.end());
    for (const PmlParameter& p : m.parameters) Check(p.start >= m.start && p.end() <= m.end());
    for (const PmlTextRef& ref : m.span) Check(s.Piece(ref).end() <= m.start);
  }
  for (const PmlUnion& u : s.unions) {
    for (int m : u.members) Check(s.modules[m].start == u.start && s.modules[m].length <= u.length);
  }
}

void CheckPlan(const SchemaLayout& s, const PmlPlan& plan) {
  Check(plan.new_text.start == s.total_length);
  for (const PmlArgument& a : plan.arguments) {
    const PmlParameter& p = s.modules[a.module].parameters[a.parameter];
    Check(a.tokens.start == p.start && a.tokens.end() <= p.end());
  }
  for (const PmlTextRef& ref : plan.cached) (void)s.Piece(ref);
  for (const PmlTextRef& ref : plan.computed) (void)s.Piece(ref);
}

const SchemaLayout& FixedLayout(const PmlTextEncoder& enc) {
  static const SchemaLayout* layout = [&] {
    auto r = ParseSchema(kFixedSchema, "fixed.xml", enc);
    Check(r.ok());
    return new SchemaLayout(std::move(r).value());
  }();
  return *layout;
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  static const FakePmlEncoder words(FakePmlEncoder::Mode::kWords, 1, 4096);
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  auto schema = ParseSchema(input, kSchemaPath, words);
  if (schema.ok()) {
    CheckLayout(*schema);
    (void)FormatLayout(*schema);
    auto prompt = ParsePrompt(kFixedPrompt, "fixed-prompt.xml");
    Check(prompt.ok());
    prompt->schema = schema->name;
    auto plan = PlanPrompt(*schema, *prompt, words);
    if (plan.ok()) CheckPlan(*schema, *plan);
  } else {
    Check(!schema.status().message().empty());
  }

  auto prompt = ParsePrompt(input, "fuzz-prompt.xml");
  if (prompt.ok()) {
    const SchemaLayout& fixed = FixedLayout(words);
    prompt->schema = fixed.name;  // reach the checks past the schema name
    auto plan = PlanPrompt(fixed, *prompt, words);
    if (plan.ok()) CheckPlan(fixed, *plan);
  }
  return 0;
}
