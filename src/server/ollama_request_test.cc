#include "server/ollama_request.h"

#include <gtest/gtest.h>

#include <string>

namespace promptcache {
namespace {

OllamaRequest Chat(const std::string& body) {
  OllamaRequest r;
  std::optional<ApiError> err = ParseOllamaChat(body, {}, &r);
  EXPECT_FALSE(err.has_value()) << body << " -> " << (err ? err->message : "");
  return r;
}

ApiError ChatError(const std::string& body) {
  OllamaRequest r;
  std::optional<ApiError> err = ParseOllamaChat(body, {}, &r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError());
}

OllamaRequest Generate(const std::string& body) {
  OllamaRequest r;
  std::optional<ApiError> err = ParseOllamaGenerate(body, {}, &r);
  EXPECT_FALSE(err.has_value()) << body << " -> " << (err ? err->message : "");
  return r;
}

TEST(OllamaRequest, ChatStreamsByDefaultAndMapsOptions) {
  const OllamaRequest r = Chat(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"keep_alive":"5m",
          "options":{"temperature":0.5,"top_k":7,"seed":3,"num_predict":9,"stop":["x"],
          "repeat_penalty":1.1,"num_ctx":4096,"mirostat":2,"mirostat_tau":4,
          "mirostat_eta":0.2,"typical_p":0.7}})");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.api.kind, ApiKind::kChat);
  ASSERT_EQ(r.api.messages.size(), 1u);
  EXPECT_EQ(r.api.messages[0].content, "hi");
  EXPECT_FLOAT_EQ(r.api.sampling.temperature, 0.5f);
  EXPECT_EQ(r.api.sampling.top_k, 7);
  EXPECT_EQ(r.api.sampling.mirostat, 2);
  EXPECT_FLOAT_EQ(r.api.sampling.mirostat_tau, 4.0f);
  EXPECT_FLOAT_EQ(r.api.sampling.mirostat_eta, 0.2f);
  EXPECT_FLOAT_EQ(r.api.sampling.typical_p, 0.7f);
  EXPECT_EQ(r.api.max_tokens, 9);
  EXPECT_EQ(r.api.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(
      Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":false})").stream);
  // No bound: num_predict -1.
  EXPECT_FALSE(
      Chat(
          R"({"model":"m","messages":[{"role":"user","content":"x"}],"options":{"num_predict":-1}})")
          .api.max_tokens);
}

TEST(OllamaRequest, NoMessagesLoadsTheModel) {
  EXPECT_TRUE(Chat(R"({"model":"m","messages":[]})").load_only);
  EXPECT_TRUE(Chat(R"({"model":"m"})").load_only);
}

TEST(OllamaRequest, FormatBecomesAGrammar) {
  EXPECT_FALSE(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}]})").api.grammar);
  EXPECT_TRUE(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"format":"json"})")
                  .api.grammar);
  EXPECT_TRUE(
      Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"format":{"type":"object",
                       "properties":{"a":{"type":"integer"}}}})")
          .api.grammar);
  EXPECT_EQ(ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"format":"yaml"})")
                .param,
            "format");
}

TEST(OllamaRequest, ToolCallsAndResultsGetTheChatRoutesShape) {
  const OllamaRequest r = Chat(
      R"({"model":"m","messages":[{"role":"user","content":"w?"},
          {"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather",
            "arguments":{"city":"Paris"}}}]},
          {"role":"tool","tool_name":"get_weather","content":"sunny"}]})");
  ASSERT_EQ(r.api.messages.size(), 3u);
  EXPECT_EQ(r.api.messages[1].tool_calls.dump(),
            R"([{"id":"call_0","type":"function","function":{"name":"get_weather",)"
            R"("arguments":{"city":"Paris"}}}])");
  EXPECT_EQ(r.api.messages[2].role, "tool");
  EXPECT_EQ(r.api.messages[2].tool_call_id, "call_0");
  EXPECT_EQ(r.api.messages[2].name, "get_weather");
}

TEST(OllamaRequest, GenerateIsOneTurnOrRawText) {
  const OllamaRequest t = Generate(R"({"model":"m","prompt":"p","system":"s"})");
  EXPECT_FALSE(t.chat);
  ASSERT_EQ(t.api.messages.size(), 2u);
  EXPECT_EQ(t.api.messages[0].role, "system");
  EXPECT_EQ(t.api.messages[1].content, "p");
  const OllamaRequest raw = Generate(R"({"model":"m","prompt":"<prompt x","raw":true})");
  EXPECT_EQ(raw.api.kind, ApiKind::kCompletion);
  EXPECT_EQ(raw.api.prompt_text, "<prompt x");
  EXPECT_FALSE(raw.api.modular());  // the text as it is, never a PML prompt
  EXPECT_TRUE(Generate(R"({"model":"m"})").load_only);
}

// logprobs / top_logprobs: the engine's logprobs (-1 none, else the alternatives); top_logprobs
// alone asks for nothing (as Ollama); wrong types and ranges are refused by name.
TEST(OllamaRequest, LogprobsAndTheirAlternatives) {
  const std::string m = R"("model":"m","messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Chat("{" + m + "}").api.logprobs, -1);
  EXPECT_EQ(Chat("{" + m + R"(,"logprobs":true})").api.logprobs, 0);
  EXPECT_EQ(Chat("{" + m + R"(,"logprobs":true,"top_logprobs":20})").api.logprobs, 20);
  EXPECT_EQ(Chat("{" + m + R"(,"logprobs":false,"top_logprobs":5})").api.logprobs, -1);
  EXPECT_EQ(Chat("{" + m + R"(,"top_logprobs":5})").api.logprobs, -1);
  EXPECT_EQ(Generate(R"({"model":"m","prompt":"x","raw":true,"logprobs":true,"top_logprobs":2})")
                .api.logprobs,
            2);
  EXPECT_EQ(ChatError("{" + m + R"(,"logprobs":1})").param, "logprobs");
  EXPECT_EQ(ChatError("{" + m + R"(,"logprobs":true,"top_logprobs":21})").param, "top_logprobs");
  EXPECT_EQ(ChatError("{" + m + R"(,"logprobs":true,"top_logprobs":-1})").param, "top_logprobs");
  EXPECT_EQ(ChatError("{" + m + R"(,"logprobs":true,"top_logprobs":1.5})").param, "top_logprobs");
}

TEST(OllamaRequest, WhatCannotBeHonouredIsRefusedByName) {
  EXPECT_EQ(
      ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"bogus":1})").param,
      "bogus");
  EXPECT_EQ(
      ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"think":"max"})").param,
      "think");
  EXPECT_EQ(
      ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"think":1})").param,
      "think");
  EXPECT_EQ(ChatError(R"({"model":"m","messages":[{"role":"user","content":"x","images":["AA"]}]})")
                .param,
            "messages[0].images");
  EXPECT_EQ(
      ChatError(
          R"({"model":"m","messages":[{"role":"user","content":"x"}],"options":{"temperature":-1}})")
          .param,
      "options.temperature");
  EXPECT_EQ(ChatError("[1]").http_status, 400);
  EXPECT_EQ(ChatError("{bad").http_status, 400);
  OllamaRequest r;
  std::optional<ApiError> e =
      ParseOllamaGenerate(R"({"model":"m","prompt":"x","suffix":"y"})", {}, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "suffix");
}

// docs/server.md: /api/generate's suffix, template, context and images are accepted empty. An
// empty string was refused (nlohmann's empty() is false for strings). Found by
// fuzz/routes_fuzz.cc's built-in bodies.
TEST(OllamaRequest, EmptyOffFieldsAreAccepted) {
  OllamaRequest r;
  std::optional<ApiError> e = ParseOllamaGenerate(
      R"({"model":"m","prompt":"x","suffix":"","template":"","context":[],"images":[]})", {}, &r);
  ASSERT_FALSE(e) << e->param << ": " << e->message;
  EXPECT_FALSE(r.load_only);
  ASSERT_EQ(r.api.messages.size(), 1u);
  EXPECT_EQ(r.api.messages[0].content, "x");
}

}  // namespace
}  // namespace promptcache

namespace promptcache {
namespace {

// think: true or false is read (levels are refused above); an assistant's thinking sent back is
// its reasoning_content, which must be a string.
TEST(OllamaRequest, ThinkAndThinkingSentBack) {
  const OllamaRequest high =
      Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"think":"high"})");
  EXPECT_EQ(high.think, true);  // a level: gpt-oss's reasoning effort
  EXPECT_EQ(high.think_level, "high");
  EXPECT_EQ(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"think":true})").think,
            std::optional<bool>(true));
  EXPECT_EQ(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"think":false})").think,
            std::optional<bool>(false));
  EXPECT_FALSE(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}]})").think);
  OllamaRequest g;
  ASSERT_FALSE(ParseOllamaGenerate(R"({"model":"m","prompt":"x","think":false})", {}, &g));
  EXPECT_EQ(g.think, std::optional<bool>(false));
  const OllamaRequest r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":"4","thinking":"easy"},{"role":"user","content":"y"}]})");
  EXPECT_EQ(r.api.messages[1].reasoning_content.value_or("unset"), "easy");
  EXPECT_EQ(ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":"4","thinking":5}]})")
                .param,
            "messages[1].thinking");
}

}  // namespace
}  // namespace promptcache
