// The tool fields of chat requests: what is read (in the client's key order), what is refused,
// and what tool_choice does once the template's format is known.
#include "server/tool_request.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"

namespace promptcache {
namespace {

const char kToolsJson[] =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "d",
         "parameters": {"type": "object", "properties": {"unit": {"type": "string"},
                        "city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "now"}}])";

ApiRequest Parse(const std::string& extra,
                 const std::string& messages = R"([{"role": "user", "content": "hi"}])") {
  ApiRequest r;
  const std::string body = R"({"model": "m", "messages": )" + messages + extra + "}";
  std::optional<ApiError> err = ParseChatRequest(body, {}, &r);
  EXPECT_FALSE(err.has_value()) << body << ": " << err->message;
  return r;
}

TEST(ToolRequest, ReadsToolsInTheClientsOrder) {
  ApiRequest r = Parse(std::string(", \"tools\": ") + kToolsJson);
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_TRUE(r.tools_offered());
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  // "unit" before "city", as sent (tojson in templates writes that order).
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].dump(),
            R"({"unit":{"type":"string"},"city":{"type":"string"}})");
  r = Parse(std::string(", \"tools\": ") + kToolsJson + R"(, "tool_choice": "none")");
  EXPECT_FALSE(r.tools_offered());
  r = Parse(std::string(", \"tools\": ") + kToolsJson +
            R"(, "tool_choice": {"type": "function", "function": {"name": "now"}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r.tool_function, "now");
  EXPECT_TRUE(Parse(R"(, "tools": [])").tools.is_null());
}

TEST(ToolRequest, ReadsToolCallsAndResults) {
  const ApiRequest r = Parse("", R"([
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"z\": 1, \"a\": [true]}"}},
        {"id": "c2", "type": "function", "function": {"name": "now", "arguments": "oops"}}]},
      {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"}])");
  ASSERT_EQ(r.messages.size(), 3u);
  const ApiMessage& a = r.messages[1];
  EXPECT_TRUE(a.content_null);
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0]["function"]["arguments"].dump(), R"({"z":1,"a":[true]})");
  EXPECT_EQ(a.tool_calls[1]["function"]["arguments"], "oops");  // not an object: stays text
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r.messages[2].name, "get_weather");
  EXPECT_EQ(r.messages[2].content, "sunny");
}

TEST(ToolRequest, RefusalsNameTheField) {
  const std::string user = R"([{"role": "user", "content": "hi"}])";
  const std::string tools = std::string(", \"tools\": ") + kToolsJson;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(, "tools": {})", "tools"},
      {R"(, "tools": [{"type": "retrieval"}])", "tools[0].type"},
      {R"(, "tools": [{"type": "function", "function": {"name": "a.b"}}])",
       "tools[0].function.name"},
      {R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}])",
       "tools[0].function.parameters"},
      {R"(, "tools": [{"type": "function", "function": {"name": "f", "extra": 1}}])",
       "tools[0].function.extra"},
      {R"(, "tool_choice": "required")", "tool_choice"},
      {tools + R"(, "tool_choice": "always")", "tool_choice"},
      {tools + R"(, "tool_choice": {"type": "function", "function": {"name": "x"}})",
       "tool_choice.function.name"},
      {R"(, "functions": [{"name": "f"}])", "functions"},
  };
  for (const auto& [extra, param] : cases) {
    ApiRequest r;
    std::optional<ApiError> err =
        ParseChatRequest(R"({"model": "m", "messages": )" + user + extra + "}", {}, &r);
    ASSERT_TRUE(err.has_value()) << extra;
    EXPECT_EQ(err->param, param) << extra << ": " << err->message;
  }
  const std::vector<std::pair<std::string, std::string>> messages = {
      {R"([{"role": "tool", "content": "x"}])", "messages[0].tool_call_id"},
      {R"([{"role": "user", "content": "x", "name": 7}])", "messages[0].name"},
      {R"([{"role": "user", "content": "x", "tool_calls": [{"id": "a"}]}])",
       "messages[0].tool_calls"},
      {R"([{"role": "assistant", "tool_calls": [{"type": "function"}]}])",
       "messages[0].tool_calls[0].id"},
      {R"([{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f",
           "arguments": 5}}]}])",
       "messages[0].tool_calls[0].function.arguments"},
  };
  for (const auto& [msgs, param] : messages) {
    ApiRequest r;
    std::optional<ApiError> err =
        ParseChatRequest(R"({"model": "m", "messages": )" + msgs + "}", {}, &r);
    ASSERT_TRUE(err.has_value()) << msgs;
    EXPECT_EQ(err->param, param) << msgs << ": " << err->message;
  }
}

TEST(ToolRequest, ToolChoiceBecomesAGrammar) {
  ApiRequest r =
      Parse(std::string(", \"tools\": ") + kToolsJson + R"(, "tool_choice": "required")");
  std::optional<ApiError> err = ApplyToolChoice(ToolCallFormat::kNone, &r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "tools");
  ASSERT_FALSE(ApplyToolChoice(ToolCallFormat::kHermes, &r).has_value());
  ASSERT_TRUE(r.grammar);
  EXPECT_EQ(r.grammar_field, "tool_choice");
  GrammarState s(r.grammar);
  EXPECT_TRUE(s.Advance("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_TRUE(s.Finished());

  r = Parse(std::string(", \"tools\": ") + kToolsJson +
            R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  ASSERT_FALSE(ApplyToolChoice(ToolCallFormat::kLlama3, &r).has_value());
  EXPECT_FALSE(GrammarState(r.grammar).Accepts("{\"name\": \"now\""));
  EXPECT_TRUE(GrammarState(r.grammar).Accepts("{\"name\": \"get_weather\", \"parameters\": {"));

  r = Parse(std::string(", \"tools\": ") + kToolsJson);  // auto: no grammar
  ASSERT_FALSE(ApplyToolChoice(ToolCallFormat::kMistral, &r).has_value());
  EXPECT_FALSE(r.grammar);

  r = Parse(std::string(", \"tools\": ") + kToolsJson +
            R"(, "tool_choice": "required", "response_format": {"type": "json_object"})");
  err = ApplyToolChoice(ToolCallFormat::kHermes, &r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "tool_choice");
}

}  // namespace
}  // namespace promptcache
