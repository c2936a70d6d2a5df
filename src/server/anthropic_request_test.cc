#include "server/anthropic_request.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "grammar/grammar_test_util.h"

namespace promptcache {
namespace {

AnthropicRequest Parse(const std::string& body, RequestLimits limits = {}) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseMessagesRequest(body, limits, &r);
  EXPECT_FALSE(err.has_value()) << body << " -> " << (err ? err->message : "");
  return r;
}

ApiError Error(const std::string& body, RequestLimits limits = {}) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseMessagesRequest(body, limits, &r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError());
}

// A minimal valid request with `extra` fields added.
std::string Body(const std::string& extra = "") {
  return R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}])" +
         (extra.empty() ? "" : "," + extra) + "}";
}

// The sampling a request asks for; min_p, which Anthropic's API does not have, stays off.
void ExpectSampling(const SamplingParams& s, float temperature, float top_p, int top_k) {
  EXPECT_FLOAT_EQ(s.temperature, temperature);
  EXPECT_FLOAT_EQ(s.top_p, top_p);
  EXPECT_EQ(s.top_k, top_k);
  EXPECT_FLOAT_EQ(s.min_p, 0.0f);
}

TEST(AnthropicRequest, MinimalRequestGetsAnthropicDefaults) {
  const AnthropicRequest r = Parse(Body());
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.max_tokens, 8);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  ExpectSampling(r.sampling, 1.0f, 1.0f, 0);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.breakpoints.empty());
}

TEST(AnthropicRequest, SystemBlocksSamplingAndStops) {
  const AnthropicRequest r = Parse(Body(
      R"("system":[{"type":"text","text":"You are "},{"type":"text","text":"terse."}],
         "temperature":0,"top_p":0.5,"top_k":7,"stop_sequences":["END",""],"stream":true,
         "metadata":{"user_id":"u-1"},"service_tier":"auto","tools":[],"tool_choice":{"type":"auto"},
         "thinking":{"type":"disabled"})"));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "You are terse.");
  ExpectSampling(r.sampling, 0.0f, 0.5f, 7);
  EXPECT_EQ(r.stop_sequences, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.stream);
  const AnthropicRequest s = Parse(Body(R"("system":"Be kind.")"));
  EXPECT_EQ(s.messages[0].content, "Be kind.");
}

TEST(AnthropicRequest, CacheControlBreakpointsEndAtTheirBlock) {
  const AnthropicRequest r = Parse(
      R"({"model":"m","max_tokens":4,
          "system":[{"type":"text","text":"abc","cache_control":{"type":"ephemeral","ttl":"1h"}},
                    {"type":"text","text":"de"}],
          "messages":[{"role":"user","content":[
              {"type":"text","text":"xy","cache_control":{"type":"ephemeral"}},
              {"type":"text","text":"z"}]}]})");
  ASSERT_EQ(r.breakpoints.size(), 2u);
  EXPECT_EQ(r.breakpoints[0].message, 0u);
  EXPECT_EQ(r.breakpoints[0].content_end, 3u);
  EXPECT_EQ(r.breakpoints[0].ttl_seconds, 3600);
  EXPECT_EQ(r.breakpoints[1].message, 1u);
  EXPECT_EQ(r.breakpoints[1].content_end, 2u);
  EXPECT_EQ(r.breakpoints[1].ttl_seconds, 300);

  EXPECT_EQ(Error(R"({"model":"m","max_tokens":4,"system":[{"type":"text","text":"a",
                      "cache_control":{"type":"persistent"}}],"messages":[{"role":"user","content":"x"}]})")
                .param,
            "system[0].cache_control.type");
  EXPECT_EQ(Error(R"({"model":"m","max_tokens":4,"system":[{"type":"text","text":"a",
                      "cache_control":{"type":"ephemeral","ttl":"2h"}}],"messages":[{"role":"user","content":"x"}]})")
                .param,
            "system[0].cache_control.ttl");
  std::string five = R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":[)";
  for (int i = 0; i < 5; ++i) {
    five += std::string(i ? "," : "") +
            R"({"type":"text","text":"a","cache_control":{"type":"ephemeral"}})";
  }
  five += "]}]}";
  EXPECT_NE(Error(five).message.find("at most 4"), std::string::npos);

  // A top-level cache_control: a breakpoint at the end of the last message, one of the 4.
  const AnthropicRequest top = Parse(
      R"({"model":"m","max_tokens":4,"cache_control":{"type":"ephemeral","ttl":"1h"},
          "messages":[{"role":"user","content":"abc"},{"role":"assistant","content":"de"},
                      {"role":"user","content":[{"type":"text","text":"fgh"},
                                                {"type":"text","text":"ij"}]}]})");
  ASSERT_EQ(top.breakpoints.size(), 1u);
  EXPECT_EQ(top.breakpoints[0].message, 2u);
  EXPECT_EQ(top.breakpoints[0].content_end, 5u);
  EXPECT_EQ(top.breakpoints[0].ttl_seconds, 3600);
  EXPECT_EQ(Error(R"({"model":"m","max_tokens":4,"cache_control":{"type":"x"},
                      "messages":[{"role":"user","content":"x"}]})")
                .param,
            "cache_control.type");
  std::string four = five;
  four.replace(
      four.rfind(R"(,{"type":"text","text":"a","cache_control":{"type":"ephemeral"}})"),
      std::string(R"(,{"type":"text","text":"a","cache_control":{"type":"ephemeral"}})").size(),
      "");
  EXPECT_EQ(Parse(four).breakpoints.size(), 4u);
  four.insert(1, R"("cache_control":{"type":"ephemeral"},)");
  EXPECT_EQ(Error(four).param, "cache_control");
}

// output_config: the effort levels, and the format's schema as a grammar; wrong shapes refused by
// name.
TEST(AnthropicRequest, OutputConfig) {
  const std::string m = R"("model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}])";
  EXPECT_TRUE(Parse("{" + m + "}").effort.empty());
  EXPECT_EQ(Parse("{" + m + R"(,"output_config":{"effort":"xhigh"}})").effort, "xhigh");
  const AnthropicRequest f =
      Parse("{" + m +
            R"(,"output_config":{"format":{"type":"json_schema","schema":{"type":"object",
          "properties":{"a":{"type":"boolean"}},"required":["a"]}}}})");
  ASSERT_TRUE(f.output_format);
  EXPECT_TRUE(AcceptsWhole(f.output_format, R"({"a": true})"));
  EXPECT_FALSE(AcceptsWhole(f.output_format, R"({"a": 1})"));
  EXPECT_FALSE(Parse("{" + m + "}").output_format);
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("output_config":{"effort":"huge"})", "output_config.effort"},
           {R"("output_config":{"effort":3})", "output_config.effort"},
           {R"("output_config":[])", "output_config"},
           {R"("output_config":{"task_budget":1})", "output_config.task_budget"},
           {R"("output_config":{"format":{"type":"text"}})", "output_config.format.type"},
           {R"("output_config":{"format":{"type":"json_schema","schema":"{}"}})",
            "output_config.format.schema"},
           {R"("output_config":{"format":{"type":"json_schema","schema":{"type":"object"},
               "name":"x"}})",
            "output_config.format.name"},
       }) {
    EXPECT_EQ(Error("{" + m + "," + extra + "}").param, param) << extra;
  }
  // count_tokens reads the effort (it changes the prompt), not the format.
  AnthropicRequest c;
  ASSERT_FALSE(ParseCountTokensRequest(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],
          "output_config":{"effort":"low","format":{"type":"json_schema","schema":{}}}})",
      &c));
  EXPECT_EQ(c.effort, "low");
  EXPECT_FALSE(c.output_format);
}

TEST(AnthropicRequest, RequiredFieldsAndRanges) {
  ApiError e = Error(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_NE(e.message.find("required"), std::string::npos);
  EXPECT_EQ(Error(R"({"max_tokens":3,"messages":[{"role":"user","content":"hi"}]})").param,
            "model");
  EXPECT_EQ(Error(R"({"model":"m","max_tokens":3})").param, "messages");
  EXPECT_EQ(Error(R"({"model":"m","max_tokens":3,"messages":[]})").param, "messages");
  EXPECT_EQ(Error(Body(R"("temperature":1.5)")).param, "temperature");  // Anthropic: 0 to 1
  EXPECT_EQ(Error(Body(R"("top_k":-1)")).param, "top_k");
  EXPECT_EQ(Error(Body(R"("stream":"yes")")).param, "stream");
  EXPECT_EQ(Error(Body(R"("stop_sequences":"END")")).param, "stop_sequences");
  EXPECT_EQ(
      Error(R"({"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]})").param,
      "max_tokens");
  RequestLimits limits;
  limits.max_tokens_limit = 5;
  EXPECT_EQ(Error(Body(), limits).param, "max_tokens");
  EXPECT_EQ(Error("[1]").http_status, 400);
  EXPECT_EQ(Error("{bad").http_status, 400);
}

// The user turn's content with `blocks` (a JSON array's elements) as its content.
std::string UserBlocks(const std::string& blocks) {
  return R"({"model":"m","max_tokens":3,"messages":[{"role":"user","content":[)" + blocks + "]}]}";
}

TEST(AnthropicRequest, DocumentBlocksWithTextSourcesAreRendered) {
  AnthropicRequest r = Parse(UserBlocks(
      R"({"type":"document","source":{"type":"text","media_type":"text/plain","data":"The sky is blue."},
          "title":"Facts","context":"From a book.","citations":{"enabled":false}},
         {"type":"text","text":"What colour is the sky?"})"));
  ASSERT_EQ(r.messages.size(), 1u);
  const std::string doc =
      "<document>\n<source>Facts</source>\n<document_context>From a book.</document_context>\n"
      "<document_content>\nThe sky is blue.\n</document_content>\n</document>\n";
  EXPECT_EQ(r.messages[0].content, doc + "What colour is the sky?");
  ASSERT_EQ(r.messages[0].parts.size(), 2u);
  EXPECT_EQ(r.messages[0].parts[0], (std::pair<size_t, size_t>{0, doc.size()}));
  // A content source: its text blocks one per line; no title or context, no such lines.
  r = Parse(UserBlocks(
      R"({"type":"document","source":{"type":"content","content":[{"type":"text","text":"One."},
          {"type":"text","text":"Two."}]},"cache_control":{"type":"ephemeral"}})"));
  EXPECT_EQ(r.messages[0].content,
            "<document>\n<document_content>\nOne.\nTwo.\n</document_content>\n</document>\n");
  ASSERT_EQ(r.breakpoints.size(), 1u);
  r = Parse(UserBlocks(R"({"type":"document","source":{"type":"content","content":"Plain."}})"));
  EXPECT_EQ(r.messages[0].content,
            "<document>\n<document_content>\nPlain.\n</document_content>\n</document>\n");
  r = Parse(UserBlocks(R"({"type":"document","source":{"type":"text","data":""}})"));
  EXPECT_EQ(r.messages[0].content,
            "<document>\n<document_content>\n\n</document_content>\n</document>\n");
}

TEST(AnthropicRequest, DocumentBlocksOtherThanTextAreRefusedByName) {
  const struct {
    const char* block;
    const char* param;
    const char* says;
  } cases[] = {
      {R"({"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"AA=="}})",
       "messages[0].content[0].source.type", "'base64'"},
      {R"({"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}})",
       "messages[0].content[0].source.type", "'url'"},
      {R"({"type":"document","source":{"type":"file","file_id":"f"}})",
       "messages[0].content[0].source.type", "'file'"},
      {R"({"type":"image","source":{"type":"url","url":"https://example.com/a.png"}})",
       "messages[0].content[0].type", "'image' with a 'url' source"},
      {R"({"type":"document","source":{"type":"text","media_type":"text/html","data":"x"}})",
       "messages[0].content[0].source.media_type", "text/html"},
      {R"({"type":"document","source":{"type":"text","media_type":"text/plain"}})",
       "messages[0].content[0].source.data", "required"},
      {R"({"type":"document","source":{"type":"text","data":5}})",
       "messages[0].content[0].source.data", "a string"},
      {R"({"type":"document"})", "messages[0].content[0].source", "required"},
      {R"({"type":"document","source":{"type":"content","content":[{"type":"image","source":{}}]}})",
       "messages[0].content[0].source.content[0].type", "other than text"},
      {R"({"type":"document","source":{"type":"text","data":"x"},"citations":{"enabled":true}})",
       "messages[0].content[0].citations.enabled", "citations"},
      {R"({"type":"document","source":{"type":"text","data":"x"},"title":3})",
       "messages[0].content[0].title", "a string"},
      {R"({"type":"document","source":{"type":"text","data":"x"},"author":"me"})",
       "messages[0].content[0].author", "author"},
  };
  for (const auto& c : cases) {
    const ApiError e = Error(UserBlocks(c.block));
    EXPECT_EQ(e.http_status, 400) << c.block;
    EXPECT_EQ(e.param, c.param) << c.block << ": " << e.message;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << e.message;
  }
  // Only a user's turn holds documents.
  const ApiError e = Error(
      R"({"model":"m","max_tokens":3,"system":[{"type":"document","source":{"type":"text","data":"x"}}],
          "messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(e.param, "system[0].type");
}

TEST(AnthropicRequest, UnknownFieldsAndBlocksAreRefusedByName) {
  for (const char* field :
       {"\"temprature\":1", "\"n\":2", "\"container\":\"c\"", "\"mcp_servers\":[{}]",
        "\"tools\":[{\"name\":\"t\"}]", "\"tool_choice\":{\"type\":\"any\"}",
        "\"thinking\":{\"type\":\"between_tools\"}", "\"metadata\":{\"other\":1}"}) {
    const ApiError e = Error(Body(field));
    EXPECT_EQ(e.http_status, 400) << field;
    const std::string name = std::string(field).substr(1, std::string(field).find('"', 1) - 1);
    EXPECT_EQ(e.param.substr(0, name.size()), name) << field;
    EXPECT_NE(e.message.find(name), std::string::npos) << e.message;
  }
  for (const char* block :
       {R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}})",
        // tool_use is an assistant's block: in a user message it is refused like any other.
        R"({"type":"tool_use","id":"t","name":"n","input":{}})"}) {
    const ApiError e =
        Error(R"({"model":"m","max_tokens":3,"messages":[{"role":"user","content":[)" +
              std::string(block) + "]}]}");
    EXPECT_EQ(e.param, "messages[0].content[0].type") << block;
    EXPECT_NE(e.message.find("only text"), std::string::npos) << e.message;
  }
  EXPECT_EQ(
      Error(R"({"model":"m","max_tokens":3,"messages":[{"role":"system","content":"x"}]})").param,
      "messages[0].role");
  EXPECT_EQ(
      Error(R"({"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x","name":"a"}]})")
          .param,
      "messages[0].name");
}

// Tools become the chat route's function tools (key order kept); tool_use blocks an assistant's
// tool_calls, tool_result blocks `tool` messages ahead of the user's text.
TEST(AnthropicRequest, ToolsAndToolBlocksBecomeTheChatRoutesShape) {
  const AnthropicRequest r = Parse(
      R"({"model":"m","max_tokens":8,"tools":[{"name":"get_weather","description":"d",
          "input_schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}],
          "tool_choice":{"type":"tool","name":"get_weather"},
          "messages":[{"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather",
              "input":{"z":"x","a":1}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",
              "content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"thanks"}]}]})");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].dump(),
            R"({"type":"function","function":{"name":"get_weather","description":"d",)"
            R"("parameters":{"type":"object","properties":{"z":{"type":"string"},)"
            R"("a":{"type":"integer"}}}}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r.tool_function, "get_weather");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_TRUE(r.messages[1].content_null);
  EXPECT_EQ(r.messages[1].tool_calls.dump(),
            R"([{"id":"toolu_1","type":"function","function":{"name":"get_weather",)"
            R"("arguments":{"z":"x","a":1}}}])");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(r.messages[2].name, "get_weather");
  EXPECT_EQ(r.messages[2].content, "sunny");
  EXPECT_EQ(r.messages[3].role, "user");
  EXPECT_EQ(r.messages[3].content, "thanks");
  EXPECT_EQ(Parse(Body(R"("tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"any"})"))
                .tool_choice,
            ToolChoice::kRequired);
  EXPECT_FALSE(
      Parse(Body(R"("tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"none"})"))
          .tools_offered());
  EXPECT_EQ(
      Error(
          Body(
              R"("tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"tool","name":"u"})"))
          .param,
      "tool_choice.name");
  EXPECT_EQ(Error(Body(R"("tools":[{"name":"t"}])")).param, "tools[0].input_schema");
  EXPECT_EQ(Error(Body(R"("tools":[{"type":"web_search_20250305","name":"web_search"}])")).param,
            "tools[0].type");
  // Results come first in a user message.
  EXPECT_EQ(Error(R"({"model":"m","max_tokens":3,"messages":[{"role":"user","content":[
                {"type":"text","text":"a"},{"type":"tool_result","tool_use_id":"t"}]}]})")
                .param,
            "messages[0].content[1]");
}

TEST(AnthropicRequest, CountTokensReadsThePromptOnly) {
  AnthropicRequest r;
  EXPECT_FALSE(ParseCountTokensRequest(
      R"({"model":"m","system":"s","messages":[{"role":"user","content":"hi"}]})", &r));
  EXPECT_EQ(r.messages.size(), 2u);
  const std::optional<ApiError> e = ParseCountTokensRequest(
      R"({"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]})", &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "max_tokens");
}

// The prompt is the chat route's rendering; a breakpoint pins what its cut shares with it.
TEST(AnthropicRequest, PromptIsTheChatRenderingAndBreakpointsCoverTheirPrefix) {
  auto file = GgufFile::Open(std::string(PC_SHARED_DIR) + "/models/stories260K.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  PromptEncoder encoder(**tok, "");
  const std::string system = "Once upon a time there was a long story " + std::string(300, 'x');
  const AnthropicRequest r =
      Parse(R"({"model":"m","max_tokens":4,"system":[{"type":"text","text":")" + system +
            R"(","cache_control":{"type":"ephemeral","ttl":"1h"}}],
          "messages":[{"role":"user","content":"A dog."}]})");
  Result<AnthropicPrompt> p = BuildMessagesPrompt(encoder, r, 0.5);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ApiMessage system_message;
  system_message.role = "system";
  system_message.content = system;
  system_message.cache_breakpoint = true;
  ApiMessage user_message;
  user_message.role = "user";
  user_message.content = "A dog.";
  Result<BuiltPrompt> chat = encoder.FromMessages({system_message, user_message}, true);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(p->tokens, chat->tokens);
  ASSERT_EQ(p->pins.size(), 1u);
  EXPECT_EQ(p->pins[0].tokens, chat->pin_tokens);  // as the chat route's breakpoint
  EXPECT_EQ(p->pins[0].ttl_seconds, 1800);
  EXPECT_GT(p->pins[0].tokens, 100);
  EXPECT_LT(p->pins[0].tokens, static_cast<int>(p->tokens.size()));

  // A breakpoint inside a message covers less than one at its end.
  const AnthropicRequest mid = Parse(
      R"({"model":"m","max_tokens":4,"system":[{"type":"text","text":"Once upon a time",
          "cache_control":{"type":"ephemeral"}},{"type":"text","text":")" +
      system + R"("}],
          "messages":[{"role":"user","content":"A dog."}]})");
  Result<AnthropicPrompt> q = BuildMessagesPrompt(encoder, mid);
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->pins.size(), 1u);
  EXPECT_GT(q->pins[0].tokens, 2);
  EXPECT_LT(q->pins[0].tokens, p->pins[0].tokens / 2);
  EXPECT_EQ(q->pins[0].ttl_seconds, 300);
}

TEST(AnthropicRequest, FieldListIsAnthropics) {
  for (const char* f : {"model", "max_tokens", "messages", "system", "temperature", "top_p",
                        "top_k", "stream", "stop_sequences", "metadata", "tools", "tool_choice",
                        "thinking", "output_config", "cache_control"}) {
    EXPECT_EQ(MessagesFieldSupport(f), FieldSupport::kImplemented) << f;
  }
  for (const char* f : {"service_tier", "speed", "inference_geo"}) {
    EXPECT_EQ(MessagesFieldSupport(f), FieldSupport::kIgnored) << f;
  }
  for (const char* f :
       {"container", "mcp_servers", "context_management", "diagnostics", "n", "seed"}) {
    EXPECT_EQ(MessagesFieldSupport(f), FieldSupport::kRefused) << f;
  }
}

}  // namespace
}  // namespace promptcache

namespace promptcache {
namespace {

// `thinking` switches thinking (enabled with a budget below max_tokens, adaptive, disabled), and
// an assistant's thinking blocks are its reasoning_content; everything else a 400 naming it.
TEST(AnthropicRequest, ThinkingConfigAndBlocks) {
  const std::string big =
      R"({"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"hi"}])";
  AnthropicRequest r = Parse(big + R"(,"thinking":{"type":"enabled","budget_tokens":2048}})");
  EXPECT_EQ(r.thinking, std::optional<bool>(true));
  EXPECT_EQ(r.thinking_budget, 2048);
  EXPECT_EQ(Parse(Body(R"("thinking":{"type":"disabled"})")).thinking, std::optional<bool>(false));
  EXPECT_EQ(Parse(Body(R"("thinking":{"type":"adaptive"})")).thinking, std::optional<bool>(true));
  EXPECT_FALSE(Parse(Body()).thinking.has_value());
  r = Parse(Body().substr(0, Body().size() - 3) +
            R"(},{"role":"assistant","content":[{"type":"thinking","thinking":"a","signature":"s"},
               {"type":"redacted_thinking","data":"xyz"},{"type":"thinking","thinking":"b"},
               {"type":"text","text":"hello"}]},{"role":"user","content":"more"}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].reasoning_content.value_or("unset"), "a\nb");
  EXPECT_EQ(r.messages[1].content, "hello");

  const std::pair<std::string, std::string> bad[] = {
      {Body(R"("thinking":{"type":"enabled","budget_tokens":1024})"), "thinking.budget_tokens"},
      {big + R"(,"thinking":{"type":"enabled","budget_tokens":1000}})", "budget_tokens"},
      {big + R"(,"thinking":{"type":"enabled"}})", "thinking.budget_tokens"},
      {Body(R"("thinking":{"type":"adaptive","display":"omitted"})"), "thinking.display"},
      {Body(R"("thinking":{"type":"between_tools"})"), "thinking.type"},
      {Body(R"("thinking":true)"), "thinking"},
      {Body(R"("thinking":{"type":"disabled","budget_tokens":2000})"), "thinking.budget_tokens"},
      {Body().substr(0, Body().size() - 3) +
           R"(},{"role":"assistant","content":[{"type":"thinking","thinking":5}]}]})",
       "messages[1].content[0].thinking"},
      {Body().substr(0, Body().size() - 3) +
           R"(},{"role":"user","content":[{"type":"thinking","thinking":"x"}]}]})",
       "messages[1].content[0].type"},
  };
  for (const auto& [body, param] : bad) {
    const ApiError e = Error(body);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_NE(e.param.find(param), std::string::npos) << body << " -> " << e.param;
  }
}

}  // namespace
}  // namespace promptcache
