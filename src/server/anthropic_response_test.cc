#include "server/anthropic_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace promptcache {
namespace {

using json = nlohmann::json;

CompletionResult Result(int prompt, int cached, int pinned, int generated,
                        std::string reason = "stop") {
  CompletionResult r;
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  r.pinned_tokens = pinned;
  r.tokens.assign(generated, 7);
  r.text = "Hello";
  r.finish_reason = std::move(reason);
  return r;
}

// Each "event: NAME\ndata: JSON\n\n" as (name, data).
std::vector<std::pair<std::string, json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << sse;
    if (end == std::string::npos) break;
    const std::string ev = sse.substr(at, end - at);
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.substr(0, 7), "event: ") << ev;
    EXPECT_EQ(ev.substr(nl + 1, 6), "data: ") << ev;
    out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7)));
    at = end + 2;
  }
  return out;
}

TEST(AnthropicResponse, UsageAddsUpToThePrompt) {
  // First request with a breakpoint: nothing cached, 96 tokens pinned (written).
  MessagesUsage u = UsageOf(Result(120, 0, 96, 5));
  EXPECT_EQ(u.cache_read_input_tokens, 0);
  EXPECT_EQ(u.cache_creation_input_tokens, 96);
  EXPECT_EQ(u.input_tokens, 24);
  EXPECT_EQ(u.output_tokens, 5);
  // The second: the pinned prefix (and more) read, nothing written.
  u = UsageOf(Result(130, 112, 96, 5));
  EXPECT_EQ(u.cache_read_input_tokens, 112);
  EXPECT_EQ(u.cache_creation_input_tokens, 0);
  EXPECT_EQ(u.input_tokens, 18);
  // Part of the pinned prefix was cached already: only the rest was written.
  u = UsageOf(Result(130, 32, 96, 1));
  EXPECT_EQ(u.cache_creation_input_tokens, 64);
  EXPECT_EQ(u.input_tokens, 34);
  // No breakpoint: a prefix hit is still a cache read.
  u = UsageOf(Result(50, 32, 0, 1));
  EXPECT_EQ(u.cache_read_input_tokens + u.cache_creation_input_tokens + u.input_tokens, 50);
  EXPECT_EQ(u.cache_creation_input_tokens, 0);
}

TEST(AnthropicResponse, StopReasons) {
  EXPECT_EQ(*StopOf(Result(5, 0, 0, 3, "length"), "Hello", {}).reason, "max_tokens");
  StopInfo s = StopOf(Result(5, 0, 0, 3, "stop"), "Hello", {"END"});
  EXPECT_EQ(*s.reason, "end_turn");
  EXPECT_FALSE(s.sequence);
  s = StopOf(Result(5, 0, 0, 3, "stop"), "HelloEND there", {"there", "END", "EN"});
  EXPECT_EQ(*s.reason, "stop_sequence");
  EXPECT_EQ(*s.sequence, "EN");  // complete first
  EXPECT_FALSE(StopOf(Result(5, 0, 0, 3, "cancelled"), "Hello", {}).reason);
}

TEST(AnthropicResponse, MessageBodyHasAnthropicsShape) {
  const json j = json::parse(MessageBody({"msg_abc", "claude-x"}, Result(120, 0, 96, 5),
                                         StopOf(Result(120, 0, 96, 5), "HelloEND", {"END"})));
  EXPECT_EQ(j["id"], "msg_abc");
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_EQ(j["model"], "claude-x");
  EXPECT_EQ(j["content"], json::parse(R"([{"type":"text","text":"Hello"}])"));
  EXPECT_EQ(j["stop_reason"], "stop_sequence");
  EXPECT_EQ(j["stop_sequence"], "END");
  EXPECT_EQ(j["usage"], json::parse(R"({"input_tokens":24,"cache_creation_input_tokens":96,
                                        "cache_read_input_tokens":0,"output_tokens":5})"));
}

TEST(AnthropicResponse, StreamEventsInTheSdksOrder) {
  const CompletionResult r = Result(40, 32, 0, 2, "length");
  const std::string sse = MessageStartEvent({"msg_1", "m"}, 40) + ContentBlockStartEvent() +
                          PingEvent() + TextDeltaEvent("Hel") + TextDeltaEvent("lo") +
                          MessageEndEvents(r, StopOf(r, "Hello", {}));
  const auto events = Events(sse);
  std::vector<std::string> names;
  for (const auto& [name, data] : events) {
    names.push_back(name);
    EXPECT_EQ(data["type"], name);  // the event name repeats the data's type
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(events[0].second["message"]["id"], "msg_1");
  EXPECT_EQ(events[0].second["message"]["content"], json::array());
  EXPECT_EQ(events[0].second["message"]["usage"]["input_tokens"], 40);
  EXPECT_EQ(events[1].second["content_block"], json::parse(R"({"type":"text","text":""})"));
  EXPECT_EQ(events[3].second["delta"], json::parse(R"({"type":"text_delta","text":"Hel"})"));
  EXPECT_EQ(events[6].second["delta"]["stop_reason"], "max_tokens");
  EXPECT_TRUE(events[6].second["delta"]["stop_sequence"].is_null());
  EXPECT_EQ(events[6].second["usage"]["cache_read_input_tokens"], 32);
  EXPECT_EQ(events[6].second["usage"]["input_tokens"], 8);
  EXPECT_EQ(events[6].second["usage"]["output_tokens"], 2);
}

TEST(AnthropicResponse, ErrorsInAnthropicsShape) {
  ApiError e = ApiError::BadRequest("'max_tokens' is required", "max_tokens");
  json j = json::parse(AnthropicErrorBody(e));
  EXPECT_EQ(j["type"], "error");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["message"], "'max_tokens' is required");
  for (const auto& [status, type] :
       std::vector<std::pair<int, std::string>>{{401, "authentication_error"},
                                                {403, "permission_error"},
                                                {404, "not_found_error"},
                                                {413, "request_too_large"},
                                                {429, "rate_limit_error"},
                                                {503, "overloaded_error"},
                                                {529, "overloaded_error"},
                                                {422, "invalid_request_error"},
                                                {500, "api_error"}}) {
    e.http_status = status;
    EXPECT_EQ(json::parse(AnthropicErrorBody(e))["error"]["type"], type) << status;
  }
  const auto events = Events(MessagesErrorEvent(e));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].first, "error");
  EXPECT_EQ(events[0].second["error"]["type"], "api_error");
}

}  // namespace
}  // namespace promptcache
