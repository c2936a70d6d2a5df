#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace promptcache {
namespace {

using json = nlohmann::json;

ResponseMeta Meta(ApiKind kind) {
  ResponseMeta m;
  m.kind = kind;
  m.id = kind == ApiKind::kChat ? "chatcmpl-1" : "cmpl-1";
  m.created = 1700000000;
  m.model = "stories260K";
  m.system_fingerprint = "fp_abc";
  return m;
}

CompletionResult Result3() {
  CompletionResult r;
  r.tokens = {5, 6, 7};
  r.text = "a b\"c\n";
  r.finish_reason = "length";
  r.prompt_tokens = 40;
  r.cached_tokens = 32;
  r.computed_tokens = 8;
  r.queue_ms = 1;
  r.prompt_ms = 4;
  r.ttft_ms = 5;
  r.generation_ms = 30;
  return r;
}

// The SSE event's JSON: checks the "data: ...\n\n" framing.
json EventJson(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_GE(event.size(), 8u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
  const std::string body = event.substr(6, event.size() - 8);
  EXPECT_EQ(body.find('\n'), std::string::npos) << "an event's data is one line";
  return json::parse(body);
}

// Usage reports pins only for a request that pinned: how much, and whether the quota cut it.
TEST(OpenAiResponse, UsageSaysWhatWasPinned) {
  json j = json::parse(CompletionBody(Meta(ApiKind::kCompletion), Result3()));
  EXPECT_FALSE(j["usage"].contains("pinned_tokens"));
  CompletionResult r = Result3();
  r.pinned_tokens = 16;
  r.pin_limited = true;
  j = json::parse(CompletionBody(Meta(ApiKind::kChat), r));
  EXPECT_EQ(j["usage"]["pinned_tokens"], 16);
  EXPECT_EQ(j["usage"]["pin_limited"], true);
  r.pinned_tokens = 0;  // the quota left nothing: said so all the same
  j = json::parse(CompletionBody(Meta(ApiKind::kChat), r));
  EXPECT_EQ(j["usage"]["pinned_tokens"], 0);
  EXPECT_EQ(j["usage"]["pin_limited"], true);
}

TEST(OpenAiResponse, ChatCompletionShape) {
  const json j = json::parse(CompletionBody(Meta(ApiKind::kChat), Result3()));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["system_fingerprint"], "fp_abc");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "a b\"c\n");
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 40);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 43);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  const json& t = j["timings"];
  EXPECT_EQ(t["cached_tokens"], 32);
  EXPECT_EQ(t["computed_tokens"], 8);
  EXPECT_DOUBLE_EQ(t["prompt_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(t["ttft_ms"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(t["generation_tokens_per_second"].get<double>(), 100.0);  // 3 in 30 ms
  EXPECT_DOUBLE_EQ(t["prompt_tokens_per_second"].get<double>(), 2000.0);     // 8 in 4 ms
}

TEST(OpenAiResponse, TextCompletionShape) {
  const json j = json::parse(CompletionBody(Meta(ApiKind::kCompletion), Result3()));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "a b\"c\n");
  EXPECT_FALSE(j["choices"][0].contains("message"));
  EXPECT_EQ(j["usage"]["total_tokens"], 43);
}

TEST(OpenAiResponse, ModularTimings) {
  CompletionResult r = Result3();
  EXPECT_FALSE(json::parse(CompletionBody(Meta(ApiKind::kChat), r))["timings"].contains("schema"));
  r.modular = true;
  r.schema = "story";
  r.encoded_tokens = 16;
  r.gather_ms = 0.5;
  r.encode_ms = 2;
  r.prefill_ms = 1.5;
  const json j = json::parse(CompletionBody(Meta(ApiKind::kCompletion), r));
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  const json& t = j["timings"];
  EXPECT_EQ(t["schema"], "story");
  EXPECT_EQ(t["reused_tokens"], 32);
  EXPECT_EQ(t["computed_tokens"], 8);
  EXPECT_EQ(t["encoded_tokens"], 16);
  EXPECT_DOUBLE_EQ(t["gather_ms"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(t["encode_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(t["prefill_ms"].get<double>(), 1.5);
  // A stream's finish chunk carries the same timings.
  const json fin = EventJson(StreamFinishChunk(Meta(ApiKind::kChat), r, false));
  EXPECT_EQ(fin["timings"]["reused_tokens"], 32);
}

// Shared in flight: the tokens and the wait show only for a request that shared.
TEST(OpenAiResponse, InFlightTimingsOnlyWhenShared) {
  CompletionResult r = Result3();
  EXPECT_FALSE(json::parse(CompletionBody(Meta(ApiKind::kChat), r))["timings"].contains("wait_ms"));
  r.shared_tokens = 16;
  r.wait_ms = 4.5;
  const json t = json::parse(CompletionBody(Meta(ApiKind::kChat), r))["timings"];
  EXPECT_EQ(t["shared_tokens"], 16);
  EXPECT_DOUBLE_EQ(t["wait_ms"].get<double>(), 4.5);
}

TEST(OpenAiResponse, ZeroTimesGiveZeroRates) {
  CompletionResult r;
  r.finish_reason = "stop";
  const json j = json::parse(CompletionBody(Meta(ApiKind::kChat), r));
  EXPECT_EQ(j["timings"]["generation_tokens_per_second"], 0.0);
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
}

TEST(OpenAiResponse, ChatStreamChunks) {
  const ResponseMeta m = Meta(ApiKind::kChat);
  json role = EventJson(StreamRoleChunk(m, false));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-1");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(role.contains("usage"));

  json text = EventJson(StreamTextChunk(m, "line\nbreak", true));
  EXPECT_EQ(text["choices"][0]["delta"]["content"], "line\nbreak");
  EXPECT_FALSE(text["choices"][0]["delta"].contains("role"));
  EXPECT_TRUE(text.contains("usage"));
  EXPECT_TRUE(text["usage"].is_null());

  json fin = EventJson(StreamFinishChunk(m, Result3(), true));
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["timings"]["cached_tokens"], 32);

  json usage = EventJson(StreamUsageChunk(m, Result3()));
  EXPECT_TRUE(usage["choices"].is_array());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 32);

  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
}

TEST(OpenAiResponse, CompletionStreamChunks) {
  const ResponseMeta m = Meta(ApiKind::kCompletion);
  json text = EventJson(StreamTextChunk(m, "abc", false));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "abc");
  EXPECT_FALSE(text["choices"][0].contains("delta"));
  json fin = EventJson(StreamFinishChunk(m, Result3(), false));
  EXPECT_EQ(fin["choices"][0]["text"], "");
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
}

TEST(OpenAiResponse, ErrorBodies) {
  ApiError e = ApiError::BadRequest("'n' is 2", "n", "unsupported");
  json j = json::parse(ErrorBody(e));
  EXPECT_EQ(j["error"]["message"], "'n' is 2");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_EQ(j["error"]["code"], "unsupported");
  j = json::parse(ErrorBody(ApiError::BadRequest("bad")));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  json ev = EventJson(StreamErrorEvent(e));
  EXPECT_EQ(ev["error"]["param"], "n");
}

TEST(OpenAiResponse, BrokenUtf8IsReplacedNotThrown) {
  CompletionResult r = Result3();
  r.text = "ok\xff";
  const json j = json::parse(CompletionBody(Meta(ApiKind::kChat), r));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "ok\xEF\xBF\xBD");
}

}  // namespace
}  // namespace promptcache
