// Hostile nesting in request bodies (issue 28): every route refuses JSON nested deeper than
// kMaxJsonNesting with a one-line 400 before parsing it (it used to overflow the stack in the
// schema compiler, tool definitions or nlohmann's ordered_json parse), JSON text inside strings
// (tool-call arguments) is checked where it is parsed, and grammars or schemas past the grammar
// engine's bounds are 400s naming the field. Each body here would crash or stall the old code.
#include <gtest/gtest.h>

#include <string>

#include "grammar/grammar.h"
#include "server/anthropic_request.h"
#include "server/openai_request.h"
#include "server/savings_api.h"
#include "server/schema_api.h"
#include "server/tool_calls.h"

namespace promptcache {
namespace {

constexpr char kTooDeep[] = "nests arrays and objects deeper than 256 levels";

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string ChatWith(const std::string& extra) {
  return R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])" + extra + "}";
}

std::string SchemaField(const std::string& schema) {
  return R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": )" +
         schema + "}}";
}

std::optional<ApiError> Chat(const std::string& body) {
  ApiRequest r;
  return ParseChatRequest(body, RequestLimits{}, &r);
}

std::optional<ApiError> Completion(const std::string& body, ApiRequest* r) {
  return ParseCompletionRequest(body, RequestLimits{}, r);
}

TEST(RequestNesting, DeepBodiesAreRefusedBeforeParsing) {
  const std::string items = Repeat(R"({"items": )", 100000) + "{}" + Repeat("}", 100000);
  const std::string props =
      Repeat(R"({"type": "object", "properties": {"a": )", 50000) + "{}" + Repeat("}}", 50000);
  const std::string params =
      Repeat(R"({"type": "array", "items": )", 60000) + "{}" + Repeat("}", 60000);
  const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "f",
      "parameters": )" + params +
                            "}}]";
  for (const std::string& body :
       {ChatWith(SchemaField(items)), ChatWith(SchemaField(props)), ChatWith(tools)}) {
    std::optional<ApiError> e = Chat(body);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->message, std::string("the request body ") + kTooDeep);
  }
  ApiRequest r;
  std::optional<ApiError> e =
      Completion(R"({"model": "m", "prompt": "x", "n": )" + Repeat("[", 300) + "}", &r);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find(kTooDeep), std::string::npos) << e->message;
  AnthropicRequest a;
  e = ParseMessagesRequest(R"({"model": "m", "max_tokens": 1, "messages": )" + Repeat("[", 1000) +
                               Repeat("]", 1000) + "}",
                           RequestLimits{}, &a);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find(kTooDeep), std::string::npos) << e->message;
  std::string xml;
  e = ParseSchemaBody(R"({"schema": )" + Repeat("[", 100000) + "}", &xml);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find(kTooDeep), std::string::npos) << e->message;
  SavingsRequest s;
  e = ParseSavingsBody(R"({"max_tokens": )" + Repeat("{", 100000) + "}", &s);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find(kTooDeep), std::string::npos) << e->message;
}

// The bound counts brackets, not bytes: brackets inside strings are text, and nesting up to the
// bound is parsed as before (here it reaches the schema compiler, which refuses it by name).
TEST(RequestNesting, BracketsInStringsAndNestingWithinTheBound) {
  ApiRequest r;
  EXPECT_FALSE(Completion(R"({"model": "m", "prompt": ")" + Repeat("[{", 50000) + R"("})", &r));
  const std::string within = Repeat(R"({"items": )", 120) + "{}" + Repeat("}", 120);
  std::optional<ApiError> e = Chat(ChatWith(SchemaField(within)));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "response_format.json_schema.schema");
  EXPECT_NE(e->message.find("more than 64 schemas deep"), std::string::npos) << e->message;
}

// Arguments are JSON text inside a string: checked where they are parsed.
TEST(RequestNesting, DeepToolCallArgumentsAreRefused) {
  const std::string args = Repeat("[", 100000);
  const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
       "function": {"name": "f", "arguments": ")" +
                           args + R"("}}]}]})";
  std::optional<ApiError> e = Chat(body);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "messages[1].tool_calls[0].function.arguments");
  EXPECT_NE(e->message.find(kTooDeep), std::string::npos) << e->message;
}

// Generated text is parsed for tool calls too: nested past the bound it is no call (its text
// stays content) rather than a parse and dump() recursing per level.
TEST(RequestNesting, DeepGeneratedToolCallsAreNotCalls) {
  const std::string deep = Repeat("[", 100000) + Repeat("]", 100000);
  const std::string text = R"(<tool_call>{"name": "f", "arguments": )" + deep + "}</tool_call>";
  ParsedOutput p = ParseToolCalls(ToolCallFormat::kHermes, text);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, text);
  const std::string as_text =
      R"(<tool_call>{"name": "f", "arguments": ")" + Repeat("[", 100000) + R"("}</tool_call>)";
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kHermes, as_text).calls.empty());
  // Within the bound, the same shape is a call.
  const std::string ok = R"(<tool_call>{"name": "f", "arguments": {"a": )" + Repeat("[", 100) +
                         Repeat("]", 100) + "}}</tool_call>";
  EXPECT_EQ(ParseToolCalls(ToolCallFormat::kHermes, ok).calls.size(), 1u);
}

// The issue's grammars: 36 bytes that held the engine for 55 s are parsed on the request's thread
// (start state included); {0,1000} is a 400 naming the rule.
TEST(RequestNesting, GrammarsPastTheBoundsAre400s) {
  ApiRequest r;
  std::optional<ApiError> e = Completion(
      R"j({"model": "m", "prompt": "x", "grammar": "root ::= (((\"a\"{0,8}){0,8}){0,8})"})j", &r);
  ASSERT_FALSE(e.has_value()) << e->message;
  ASSERT_NE(r.grammar, nullptr);
  EXPECT_GT(r.grammar->start().size(), 0u);
  e = Completion(
      R"j({"model": "m", "prompt": "x", "grammar": "root ::= (((\"a\"{0,1000}){0,1000}){0,1000})"})j",
      &r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "grammar");
  EXPECT_NE(e->message.find("rule 'root' can go on in"), std::string::npos) << e->message;
}

}  // namespace
}  // namespace promptcache
