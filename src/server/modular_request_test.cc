// The modular extension of OpenAI's requests (server/modular_request.cc): PML prompts detected
// in the prompt, "schema" and "modules" read, and the fields only modular prompts take refused
// on plain ones (and the reverse).
#include <gtest/gtest.h>

#include <string>

#include "server/openai_request.h"
#include "server/openai_request_test_util.h"

namespace promptcache {
namespace {

TEST(OpenAiRequest, PmlPromptIsDetected) {
  ApiRequest r = Completion(R"({"model":"m","prompt":"\n  <prompt schema=\"s\"><a/>Hi</prompt>"})");
  EXPECT_TRUE(r.pml_xml);
  EXPECT_TRUE(r.modular());
  EXPECT_TRUE(r.schema.empty());
  EXPECT_TRUE(Completion(R"({"model":"m","prompt":["<prompt>x</prompt>"]})").pml_xml);
  // Not PML: another tag, text before the tag, token ids, or "pml": false.
  for (const char* body :
       {R"({"model":"m","prompt":"<prompts>x</prompts>"})", R"({"model":"m","prompt":"<prompt"})",
        R"({"model":"m","prompt":"say <prompt schema=\"s\"/>"})", R"({"model":"m","prompt":[1,2]})",
        R"({"model":"m","prompt":"<prompt schema=\"s\"/>","pml":false})"}) {
    ApiRequest plain = Completion(body);
    EXPECT_FALSE(plain.pml_xml) << body;
    EXPECT_FALSE(plain.modular()) << body;
  }
}

TEST(OpenAiRequest, SchemaAndModulesExtension) {
  ApiRequest r = Chat(R"({"model":"m","schema":"support",
    "modules":["doc-fr", {"name":"greeting","args":{"name":"Ana"}},
               {"name":"outer","modules":[{"name":"inner","args":{"x":"1","y":"2"}}]}],
    "messages":[{"role":"user","content":"Bonjour"}]})");
  EXPECT_TRUE(r.modular());
  EXPECT_FALSE(r.pml_xml);
  EXPECT_EQ(r.schema, "support");
  ASSERT_EQ(r.modules.size(), 3u);
  EXPECT_EQ(r.modules[0].name, "doc-fr");
  EXPECT_TRUE(r.modules[0].arguments.empty());
  EXPECT_EQ(r.modules[1].name, "greeting");
  ASSERT_EQ(r.modules[1].arguments.size(), 1u);
  EXPECT_EQ(r.modules[1].arguments[0], (std::pair<std::string, std::string>{"name", "Ana"}));
  ASSERT_EQ(r.modules[2].children.size(), 1u);
  EXPECT_EQ(r.modules[2].children[0].name, "inner");
  EXPECT_EQ(r.modules[2].children[0].arguments.size(), 2u);

  // A schema without modules uses its defaults; with a schema, a completion's prompt is text,
  // even one that looks like PML.
  EXPECT_TRUE(
      Chat(R"({"model":"m","schema":"s","messages":[{"role":"user","content":"q"}]})").modular());
  ApiRequest c = Completion(R"({"model":"m","schema":"s","prompt":"<prompt>"})");
  EXPECT_TRUE(c.modular());
  EXPECT_FALSE(c.pml_xml);
  EXPECT_EQ(c.prompt_text, "<prompt>");
  EXPECT_EQ(c.positions, PmlPositions::kDefault);
  EXPECT_EQ(
      Completion(R"({"model":"m","schema":"s","prompt":"x","positions":"contiguous"})").positions,
      PmlPositions::kContiguous);
}

TEST(OpenAiRequest, SchemaExtensionErrors) {
  const std::string msgs = R"("messages":[{"role":"user","content":"q"}])";
  struct BadCase {
    std::string body;
    std::string param;
  };
  const std::vector<BadCase> cases = {
      {R"({"model":"m","schema":3,)" + msgs + "}", "schema"},
      {R"({"model":"m","schema":"",)" + msgs + "}", "schema"},
      {R"({"model":"m","modules":["a"],)" + msgs + "}", "modules"},
      {R"({"model":"m","schema":"s","modules":"a",)" + msgs + "}", "modules"},
      {R"({"model":"m","schema":"s","modules":[1],)" + msgs + "}", "modules[0]"},
      {R"({"model":"m","schema":"s","modules":[""],)" + msgs + "}", "modules[0]"},
      {R"({"model":"m","schema":"s","modules":[{}],)" + msgs + "}", "modules[0]"},
      {R"({"model":"m","schema":"s","modules":[{"name":2}],)" + msgs + "}", "modules[0].name"},
      {R"({"model":"m","schema":"s","modules":[{"name":"a","arg":{}}],)" + msgs + "}",
       "modules[0].arg"},
      {R"({"model":"m","schema":"s","modules":[{"name":"a","args":[]}],)" + msgs + "}",
       "modules[0].args"},
      {R"({"model":"m","schema":"s","modules":[{"name":"a","args":{"p":1}}],)" + msgs + "}",
       "modules[0].args.p"},
      {R"({"model":"m","schema":"s","modules":[{"name":"a","modules":[3]}],)" + msgs + "}",
       "modules[0].modules[0]"},
      {R"({"model":"m","schema":"s","cache":{"pin":true},)" + msgs + "}", "cache"},
      {R"({"model":"m","schema":"s","messages":[{"role":"user","content":"q",
          "cache_control":{"type":"ephemeral"}}]})",
       "messages[0].cache_control"},
      {R"({"model":"m","schema":"s","pml":"yes",)" + msgs + "}", "pml"},
      {R"({"model":"m","schema":"s","positions":"gapless",)" + msgs + "}", "positions"},
      {R"({"model":"m","schema":"s","positions":1,)" + msgs + "}", "positions"},
      {R"({"model":"m","positions":"contiguous",)" + msgs + "}", "positions"},
      {R"({"model":"m","schema":"s","recompute":1.5,)" + msgs + "}", "recompute"},
      {R"({"model":"m","schema":"s","recompute":"all",)" + msgs + "}", "recompute"},
      {R"({"model":"m","recompute":0.1,"cache_segments":false,)" + msgs + "}", "recompute"},
      {R"({"model":"m","evaluate":true,"cache_segments":false,)" + msgs + "}", "evaluate"},
      {R"({"model":"m","evaluate":true,"stream":true,)" + msgs + "}", "evaluate"},
      {R"({"model":"m","cache_segments":"yes",)" + msgs + "}", "cache_segments"},
      {R"({"model":"m","cache_segments":1,)" + msgs + "}", "cache_segments"},
      {R"({"model":"m","schema":"s","evaluate":1,)" + msgs + "}", "evaluate"},
      {R"({"model":"m","schema":"s","evaluate":true,"stream":true,)" + msgs + "}", "evaluate"},
  };
  for (const BadCase& c : cases) {
    ApiError e = ChatError(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
  }
  // Nesting beyond the bound.
  std::string deep = R"({"name":"m"})";
  for (int i = 0; i < 20; ++i) deep = R"({"name":"m","modules":[)" + deep + "]}";
  EXPECT_EQ(
      ChatError(R"({"model":"m","schema":"s","modules":[)" + deep + "]," + msgs + "}").http_status,
      400);

  EXPECT_EQ(CompletionError(R"({"model":"m","schema":"s","prompt":[1,2]})").param, "prompt");
  EXPECT_EQ(
      CompletionError(R"({"model":"m","prompt":"<prompt schema=\"s\"/>","cache":{"pin":true}})")
          .param,
      "cache");
}

// "recompute" and "evaluate" on a plain prompt wait for the server's segment default: refused
// when segments end up off, accepted (and read) when they are on.
TEST(ModularRequest, RecomputeAndEvaluateApplyToSegments) {
  const std::string body =
      R"({"model":"m","recompute":0.25,"evaluate":true,"messages":[{"role":"user","content":"q"}]})";
  ApiRequest r;
  ASSERT_FALSE(ParseChatRequest(body, RequestLimits(), &r).has_value());
  EXPECT_FALSE(r.cache_segments.has_value());
  EXPECT_DOUBLE_EQ(r.recompute, 0.25);
  EXPECT_TRUE(r.evaluate);
  EXPECT_FALSE(CheckSegmentFields(r, /*segments=*/true).has_value());
  std::optional<ApiError> off = CheckSegmentFields(r, /*segments=*/false);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(off->param, "recompute");
  ApiRequest on;
  ASSERT_FALSE(
      ParseChatRequest(
          R"({"model":"m","cache_segments":true,"messages":[{"role":"user","content":"q"}]})",
          RequestLimits(), &on)
          .has_value());
  EXPECT_EQ(on.cache_segments, std::optional<bool>(true));
}

}  // namespace
}  // namespace promptcache
