// The Responses API's pure parts: the request's translation into a chat body
// (server/responses_request.h) and the store's bounds (server/response_store.h).
// Mutations caught: the LRU touch in Get removed (the recently read entry is evicted),
// and the byte bound not counted (the third entry fits).
#include <gtest/gtest.h>

#include "server/response_store.h"
#include "server/responses_request.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

ResponseStore::Entry Sized(size_t bytes, const std::string& tenant = "") {
  return {ojson::array({std::string(bytes, 'x')}), ojson::object(), tenant};
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsedByCount) {
  ResponseStore store(2, 1 << 20);
  store.Put("a", Sized(10));
  store.Put("b", Sized(10));
  ASSERT_TRUE(store.Get("a", ""));  // a is now the most recent
  store.Put("c", Sized(10));
  EXPECT_TRUE(store.Get("a", ""));
  EXPECT_FALSE(store.Get("b", ""));
  EXPECT_TRUE(store.Get("c", ""));
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponseStore, BoundsTheBytesAndKeepsTenantsApart) {
  ResponseStore store(100, 1000);
  store.Put("a", Sized(400));
  store.Put("b", Sized(400));
  store.Put("c", Sized(400));  // over 1000 bytes with a and b: a goes
  EXPECT_FALSE(store.Get("a", ""));
  EXPECT_TRUE(store.Get("b", ""));
  store.Put("huge", Sized(2000));  // larger than the bound: not kept, nothing evicted for it
  EXPECT_FALSE(store.Get("huge", ""));
  EXPECT_TRUE(store.Get("c", ""));
  store.Put("t", Sized(1, "team"));
  EXPECT_FALSE(store.Get("t", ""));
  EXPECT_TRUE(store.Get("t", "team"));
}

TEST(ResponsesRequest, TranslatesIntoAChatBody) {
  ResponsesRequest r;
  ASSERT_FALSE(ParseResponsesRequest(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 9, "seed": 3,
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "f"},
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "42"}
    ]})",
                                     &r));
  const ojson history = ojson::array({{{"role", "user"}, {"content", "before"}}});
  const ojson chat = SpliceHistory(r, history);
  EXPECT_EQ(chat["max_completion_tokens"], 9);
  EXPECT_EQ(chat["seed"], 3);
  EXPECT_EQ(chat["tools"][0]["function"]["name"], "f");
  EXPECT_EQ(chat["tool_choice"]["function"]["name"], "f");
  const ojson& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[1]["content"], "before");
  EXPECT_EQ(m[2]["content"][0]["text"], "hi");
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(m[4]["role"], "tool");
  EXPECT_EQ(m[4]["name"], "f");
}

// docs/server.md: truncation "disabled", background false, include [], reasoning {} and
// top_logprobs 0 are accepted (top_logprobs is a Responses field too; it was refused as a
// chat-only one, whatever its value). Found by fuzz/routes_fuzz.cc's built-in bodies.
TEST(ResponsesRequest, AcceptsTheOffValues) {
  ResponsesRequest r;
  std::optional<ApiError> err = ParseResponsesRequest(
      R"({"input": "x", "truncation": "disabled", "background": false, "include": [],
          "reasoning": {}, "top_logprobs": 0})",
      &r);
  EXPECT_FALSE(err.has_value()) << err->message;
  EXPECT_FALSE(r.chat.contains("top_logprobs"));
  err = ParseResponsesRequest(R"({"input": "x", "top_logprobs": 2})", &r);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->param, "top_logprobs");
}

TEST(ResponsesRequest, RefusalsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input": "x", "max_tokens": 3})", "max_tokens"},
      {R"({"input": 3})", "input"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}})",
       "text.format.schema"},
      {R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})",
       "input[0].call_id"},
      {R"({"input": "x", "tool_choice": {"type": "allowed_tools"}})", "tool_choice"},
  };
  for (const auto& [body, param] : cases) {
    ResponsesRequest r;
    std::optional<ApiError> err = ParseResponsesRequest(body, &r);
    ASSERT_TRUE(err.has_value()) << body;
    EXPECT_EQ(err->param, param) << body << ": " << err->message;
  }
}

}  // namespace
}  // namespace promptcache
