// The Responses API's pure parts: the request's translation into a chat body
// (server/responses_request.h) and the store's bounds (server/response_store.h).
// Mutations caught: the LRU touch in Get removed (the recently read entry is evicted),
// the byte bound not counted (the third entry fits), Erase ignoring the tenant.
#include <gtest/gtest.h>

#include <map>
#include <string>

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

TEST(ResponseStore, EraseForgetsOnlyItsTenantsResponse) {
  ResponseStore store(10, 1 << 20);
  store.Put("a", Sized(10, "team"));
  store.Put("b", Sized(10));
  EXPECT_FALSE(store.Erase("a", ""));  // another tenant's: left alone
  EXPECT_TRUE(store.Get("a", "team"));
  EXPECT_TRUE(store.Erase("a", "team"));
  EXPECT_FALSE(store.Get("a", "team"));
  EXPECT_FALSE(store.Erase("a", "team"));
  EXPECT_FALSE(store.Erase("missing", ""));
  EXPECT_EQ(store.size(), 1u);
  // Its bytes are given back: two entries of 600 fit a bound of 1300 once one is erased.
  ResponseStore small(10, 1300);
  small.Put("x", Sized(600));
  small.Put("y", Sized(600));
  ASSERT_TRUE(small.Erase("y", ""));
  small.Put("z", Sized(600));
  EXPECT_TRUE(small.Get("x", ""));
  EXPECT_TRUE(small.Get("z", ""));
}

TEST(ResponsesRequest, KeepsTheInputAsItems) {
  ResponsesRequest r;
  ASSERT_FALSE(ParseResponsesRequest(R"({"input": "Tell me a story."})", &r));
  EXPECT_EQ(r.input_items.dump(),
            R"([{"type":"message","role":"user","content":[{"type":"input_text",)"
            R"("text":"Tell me a story."}],"status":"completed"}])");
  ASSERT_FALSE(ParseResponsesRequest(R"({"input": [
      {"role": "user", "content": "hi"},
      {"type": "message", "id": "msg_mine", "role": "assistant", "content": "hello"},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "42"}]})",
                                     &r));
  ASSERT_EQ(r.input_items.size(), 4u);
  EXPECT_EQ(r.input_items[0].dump(),
            R"({"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}],)"
            R"("status":"completed"})");
  EXPECT_EQ(r.input_items[1]["id"], "msg_mine");
  EXPECT_EQ(r.input_items[1]["content"][0]["type"], "output_text");
  EXPECT_EQ(r.input_items[2]["type"], "function_call");
  EXPECT_EQ(r.input_items[3]["output"], "42");
}

std::string Ids(const ojson& page) {
  std::string out;
  for (const ojson& item : page["data"]) out += item["id"].get<std::string>();
  return out;
}

TEST(ResponsesRequest, PagesInputItems) {
  ojson items = ojson::array();
  for (const char* id : {"a", "b", "c", "d", "e"}) items.push_back({{"id", id}, {"type", "x"}});
  using Query = std::multimap<std::string, std::string>;
  ojson page;
  ASSERT_FALSE(InputItemsPage(items, {}, &page));
  EXPECT_EQ(Ids(page), "edcba");  // newest first by default
  EXPECT_EQ(page["object"], "list");
  EXPECT_EQ(page["first_id"], "e");
  EXPECT_EQ(page["last_id"], "a");
  EXPECT_EQ(page["has_more"], false);
  ASSERT_FALSE(InputItemsPage(items, Query{{"order", "asc"}, {"limit", "2"}}, &page));
  EXPECT_EQ(Ids(page), "ab");
  EXPECT_EQ(page["has_more"], true);
  ASSERT_FALSE(
      InputItemsPage(items, Query{{"order", "asc"}, {"limit", "2"}, {"after", "b"}}, &page));
  EXPECT_EQ(Ids(page), "cd");
  EXPECT_EQ(page["has_more"], true);
  ASSERT_FALSE(InputItemsPage(items, Query{{"limit", "2"}, {"after", "b"}}, &page));
  EXPECT_EQ(Ids(page), "a");
  EXPECT_EQ(page["has_more"], false);
  ASSERT_FALSE(InputItemsPage(items, Query{{"after", "a"}, {"include[]", "x"}}, &page));
  EXPECT_EQ(page["data"].size(), 0u);
  EXPECT_TRUE(page["first_id"].is_null());
  ASSERT_FALSE(InputItemsPage(items, Query{{"limit", "100"}, {"order", "desc"}}, &page));
  EXPECT_EQ(Ids(page), "edcba");
  const struct {
    Query query;
    const char* param;
  } bad[] = {{{{"limit", "0"}}, "limit"},   {{{"limit", "101"}}, "limit"},
             {{{"limit", "x"}}, "limit"},   {{{"limit", "-1"}}, "limit"},
             {{{"order", "up"}}, "order"},  {{{"after", "zz"}}, "after"},
             {{{"before", "a"}}, "before"}, {{{"limit", "1"}, {"limit", "2"}}, "limit"}};
  for (const auto& c : bad) {
    std::optional<ApiError> err = InputItemsPage(items, c.query, &page);
    ASSERT_TRUE(err) << c.param;
    EXPECT_EQ(err->http_status, 400);
    EXPECT_EQ(err->param, c.param) << err->message;
  }
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
  EXPECT_FALSE(r.chat.contains("logprobs"));
}

// include ["message.output_text.logprobs"], or top_logprobs above 0, asks the chat route for
// every token's log-probability (the route keeps the message's); top_logprobs is 0 to 20.
TEST(ResponsesRequest, LogprobsAskTheChatRoute) {
  ResponsesRequest r;
  ASSERT_FALSE(ParseResponsesRequest(
      R"({"input": "x", "include": ["message.output_text.logprobs"]})", &r));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.chat["logprobs"], true);
  EXPECT_EQ(r.chat["top_logprobs"], 0);
  ASSERT_FALSE(ParseResponsesRequest(R"({"input": "x", "top_logprobs": 20})", &r));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  EXPECT_EQ(r.chat["top_logprobs"], 20);
  for (const char* body : {R"({"input": "x", "top_logprobs": 21})",
                           R"({"input": "x", "top_logprobs": -1})",
                           R"({"input": "x", "top_logprobs": "2"})"}) {
    std::optional<ApiError> err = ParseResponsesRequest(body, &r);
    ASSERT_TRUE(err.has_value()) << body;
    EXPECT_EQ(err->param, "top_logprobs");
  }
}

// include ["reasoning.encrypted_content"] asks for reasoning items' blobs, and a blob reads
// back as the thinking; reasoning.summary "auto" is accepted (none is written).
TEST(ResponsesRequest, EncryptedReasoningAndAutoSummary) {
  ResponsesRequest r;
  std::optional<ApiError> err = ParseResponsesRequest(
      R"({"input": "x", "include": ["reasoning.encrypted_content"],
          "reasoning": {"summary": "auto", "effort": "low"}})",
      &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  EXPECT_TRUE(r.encrypted_reasoning);
  EXPECT_EQ(r.chat["reasoning_effort"], "low");
  ASSERT_FALSE(ParseResponsesRequest(R"({"input": "x"})", &r));
  EXPECT_FALSE(r.encrypted_reasoning);
  const std::string blob = ReasoningContentBlob("Think: 2+2 \xe2\x86\x92 4");
  EXPECT_EQ(blob.rfind(kReasoningContentPrefix, 0), 0u);
  EXPECT_EQ(ReasoningFromBlob(blob), "Think: 2+2 \xe2\x86\x92 4");
  EXPECT_FALSE(ReasoningFromBlob("gAAAAABoOpaque").has_value());
  EXPECT_FALSE(ReasoningFromBlob(std::string(kReasoningContentPrefix) + "!!").has_value());
  // A reasoning item with only a blob: the blob's text is the turn's reasoning_content.
  ASSERT_FALSE(ParseResponsesRequest(
      R"({"input": [{"role": "user", "content": "q"},
                    {"type": "reasoning", "summary": [], "encrypted_content": ")" +
          blob + R"("}, {"role": "assistant", "content": "a"}]})",
      &r));
  EXPECT_EQ(r.input_messages[1]["reasoning_content"], "Think: 2+2 \xe2\x86\x92 4");
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input": "x", "include": ["message.input_image.image_url"]})", "include[0]"},
           {R"({"input": "x", "include": "reasoning.encrypted_content"})", "include"},
           {R"({"input": "x", "reasoning": {"summary": "detailed"}})", "reasoning.summary"},
           {R"({"input": [{"type": "reasoning", "summary": [], "encrypted_content": 7}]})",
            "input[0].encrypted_content"}}) {
    err = ParseResponsesRequest(body, &r);
    ASSERT_TRUE(err.has_value()) << body;
    EXPECT_EQ(err->param, param) << body;
  }
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
