#include "server/schema_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "pml/pml_fake_encoder.h"

namespace promptcache {
namespace {

using json = nlohmann::json;

// One token per word, BOS first: positions are easy to count by hand.
constexpr const char* kSchema = R"(<schema name="support">
  Always here.
  <union scaffold="en">
    <module name="en">one two three</module>
    <module name="fr">un deux</module>
  </union>
  <module name="greeting" length="6">Hello <parameter name="who" length="2" scaffold="friend"/> there</module>
  <scaffold>
    <module name="q">question</module>
    <module name="a">answer here</module>
  </scaffold>
  <module name="outer">outer text <module name="inner">inner</module></module>
  <module name="ticket" cache="false" requires="greeting" excludes="fr">Ticket</module>
</schema>)";

SchemaLayout Layout() {
  FakePmlEncoder enc(FakePmlEncoder::Mode::kWords, /*bos=*/1);
  Result<SchemaLayout> layout = ParseSchema(kSchema, "request", enc);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  return std::move(layout).value();
}

SchemaInfo Info(const SchemaLayout& layout) {
  SchemaInfo info;
  info.name = layout.name;
  info.file = layout.file;
  info.total_length = layout.total_length;
  info.modules = static_cast<int>(layout.modules.size());
  info.cached_modules = 7;
  info.cached_tokens = 14;
  info.encoded_tokens = 14;
  info.reused_tokens = 3;
  info.encode_ms = 1.5;
  info.persisted = true;
  info.layout = "layout text";
  return info;
}

const json& Module(const json& body, const std::string& name) {
  for (const json& m : body["modules"]) {
    if (m["name"] == name) return m;
  }
  ADD_FAILURE() << "no module " << name;
  static const json kNull;
  return kNull;
}

TEST(SchemaApi, BodyAcceptsRawXmlAndJson) {
  std::string xml;
  EXPECT_FALSE(ParseSchemaBody("  <schema name=\"s\">x</schema>", &xml).has_value());
  EXPECT_EQ(xml, "  <schema name=\"s\">x</schema>");
  xml.clear();
  EXPECT_FALSE(ParseSchemaBody(R"({"schema": "<schema name=\"t\">y</schema>"})", &xml));
  EXPECT_EQ(xml, "<schema name=\"t\">y</schema>");
}

TEST(SchemaApi, BadBodiesAreBadRequests) {
  std::string xml;
  for (const char* body : {"", "  \n", "{", R"({"schema": 3})", R"({"text": "<schema/>"})",
                           R"({"schema": "<schema/>", "extra": 1})", "[1]"}) {
    std::optional<ApiError> err = ParseSchemaBody(body, &xml);
    if (std::string(body) == "[1]") {
      // Not JSON-object-looking: read as XML text, which the PML parser then refuses.
      EXPECT_FALSE(err.has_value());
      continue;
    }
    ASSERT_TRUE(err.has_value()) << body;
    EXPECT_EQ(err->http_status, 400) << body;
    EXPECT_FALSE(err->message.empty());
  }
  EXPECT_EQ(ParseSchemaBody(R"({"schema": "<schema/>", "extra": 1})", &xml)->param, "extra");
}

TEST(SchemaApi, LayoutBody) {
  const SchemaLayout layout = Layout();
  const json j = json::parse(SchemaBody(Info(layout), layout));
  EXPECT_EQ(j["object"], "schema");
  EXPECT_EQ(j["name"], "support");
  EXPECT_EQ(j["file"], "request");
  EXPECT_EQ(j["total_length"], layout.total_length);
  EXPECT_EQ(j["module_count"], 8);
  EXPECT_EQ(j["persisted"], true);
  EXPECT_EQ(j["layout"], "layout text");
  EXPECT_EQ(j["load"]["encoded_tokens"], 14);
  EXPECT_EQ(j["load"]["reused_tokens"], 3);
  // BOS + "Always here." (two words) at [0, 3).
  EXPECT_EQ(j["always"]["tokens"], 3);
  EXPECT_EQ(j["always"]["ranges"], json::parse("[{\"start\":0,\"end\":3}]"));

  const json& en = Module(j, "en");
  const json& fr = Module(j, "fr");
  EXPECT_EQ(en["start"], 3);
  EXPECT_EQ(en["end"], 6);
  EXPECT_EQ(en["tokens"], 3);
  EXPECT_EQ(fr["start"], 3);  // union members share their start
  EXPECT_EQ(fr["tokens"], 2);
  EXPECT_EQ(en["union"], 0);
  EXPECT_EQ(en["union_default"], true);
  EXPECT_EQ(fr["union_default"], false);
  EXPECT_EQ(en["cached"], true);
  EXPECT_EQ(en["attends_to"], json::parse("[{\"module\":null,\"start\":0,\"end\":3}]"));

  const json& greeting = Module(j, "greeting");
  EXPECT_EQ(greeting["start"], 6);  // after the union's 3 positions
  EXPECT_EQ(greeting["length"], 6);
  EXPECT_EQ(greeting["fixed_length"], true);
  ASSERT_EQ(greeting["parameters"].size(), 1u);
  EXPECT_EQ(greeting["parameters"][0]["name"], "who");
  EXPECT_EQ(greeting["parameters"][0]["start"], 7);
  EXPECT_EQ(greeting["parameters"][0]["length"], 2);
  EXPECT_EQ(greeting["parameters"][0]["default"], "friend");

  // A scaffold member attends to the earlier member; the inner module to its parent's text.
  const json& a = Module(j, "a");
  EXPECT_EQ(a["scaffold"], 0);
  ASSERT_EQ(a["attends_to"].size(), 2u);
  EXPECT_EQ(a["attends_to"][1]["module"], "q");
  const json& inner = Module(j, "inner");
  EXPECT_EQ(inner["parent"], "outer");
  EXPECT_EQ(Module(j, "outer")["modules"], json::parse("[\"inner\"]"));
  ASSERT_EQ(inner["attends_to"].size(), 2u);
  EXPECT_EQ(inner["attends_to"][1]["module"], "outer");

  const json& ticket = Module(j, "ticket");
  EXPECT_EQ(ticket["cached"], false);
  EXPECT_EQ(ticket["requires"], json::parse("[\"greeting\"]"));
  EXPECT_EQ(ticket["excludes"], json::parse("[\"fr\"]"));

  ASSERT_EQ(j["unions"].size(), 1u);
  EXPECT_EQ(j["unions"][0]["members"], json::parse("[\"en\",\"fr\"]"));
  EXPECT_EQ(j["unions"][0]["default"], "en");
  EXPECT_EQ(j["unions"][0]["length"], 3);
  ASSERT_EQ(j["scaffolds"].size(), 1u);
  EXPECT_EQ(j["scaffolds"][0]["members"], json::parse("[\"q\",\"a\"]"));
}

TEST(SchemaApi, ListAndDeletedBodies) {
  const SchemaLayout layout = Layout();
  const json list = json::parse(SchemaListBody({Info(layout)}));
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["name"], "support");
  EXPECT_EQ(list["data"][0]["cached_tokens"], 14);
  EXPECT_FALSE(list["data"][0].contains("modules"));  // summaries only
  EXPECT_EQ(json::parse(SchemaListBody({}))["data"].size(), 0u);
  const json del = json::parse(SchemaDeletedBody("support"));
  EXPECT_EQ(del["deleted"], true);
  EXPECT_EQ(del["name"], "support");
}

TEST(SchemaApi, ModularPromptFromXml) {
  ApiRequest r;
  r.kind = ApiKind::kCompletion;
  r.pml_xml = true;
  r.prompt_text = R"(<prompt schema="support"><fr/><greeting who="Ana"/>Why?</prompt>)";
  Result<PmlPrompt> p = ModularPrompt(r);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->schema, "support");
  ASSERT_EQ(p->modules.size(), 2u);
  EXPECT_EQ(p->modules[1].name, "greeting");
  ASSERT_EQ(p->modules[1].arguments.size(), 1u);
  EXPECT_EQ(p->modules[1].arguments[0].second, "Ana");
  ASSERT_EQ(p->text.size(), 1u);
  EXPECT_EQ(p->text[0].text, "Why?");

  r.prompt_text = "<prompt schema=\"support\"><fr>";
  Result<PmlPrompt> bad = ModularPrompt(r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("prompt:", 0), 0u) << bad.status().message();
}

TEST(SchemaApi, ModularPromptFromFields) {
  ApiRequest chat;
  chat.kind = ApiKind::kChat;
  chat.schema = "support";
  chat.modules.push_back(PmlModuleRef{"fr", {}, {}, {}});
  chat.messages.resize(2);
  chat.messages[0].role = "system";
  chat.messages[0].content = "Be brief.";
  chat.messages[1].role = "user";
  chat.messages[1].content = "Bonjour";
  Result<PmlPrompt> p = ModularPrompt(chat);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->file, "request");
  EXPECT_EQ(p->schema, "support");
  ASSERT_EQ(p->modules.size(), 1u);
  ASSERT_EQ(p->text.size(), 2u);
  EXPECT_EQ(p->text[0].role, "system");
  EXPECT_EQ(p->text[1].role, "user");
  EXPECT_EQ(p->text[1].text, "Bonjour");

  ApiRequest completion;
  completion.kind = ApiKind::kCompletion;
  completion.schema = "support";
  completion.prompt_text = " and then";
  p = ModularPrompt(completion);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->text.size(), 1u);
  EXPECT_EQ(p->text[0].role, "");
  EXPECT_EQ(p->text[0].text, " and then");
  completion.prompt_text.clear();
  EXPECT_TRUE(ModularPrompt(completion)->text.empty());
}

}  // namespace
}  // namespace promptcache
