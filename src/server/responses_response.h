// The Responses API's bodies (POST /v1/responses): the response object, its output items (an
// assistant message with output_text, function_call items read from the text by the chat
// route's tool-call parser, server/tool_calls.h) and the typed Server-Sent Events a stream sends
// ("event: response.output_text.delta\ndata: {...}"). Pure functions of the request and the
// engine's result, so that the stream and the single body are built from the same items.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "promptcache/engine.h"
#include "server/openai_response.h"
#include "server/responses_request.h"

namespace promptcache {

// What a response shares with its stream's events.
struct ResponsesMeta {
  std::string id;  // "resp_" + hex
  int64_t created = 0;
  std::string model;
  const ResponsesRequest* request = nullptr;
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // kNone: tools not offered
  // A model that thinks (server/reasoning.h): its thinking is a reasoning item before the
  // message; token_bytes counts its tokens (usage's reasoning_tokens).
  ReasoningMode reasoning;
  std::function<std::string(int32_t)> token_bytes;
};

// A generated text split as the output shows it: the thinking (a model that thinks), the
// message's text (what precedes the calls in the answer; all of it without calls) and the calls.
struct ResponsesOutput {
  std::string reasoning;     // empty: no reasoning item
  size_t reasoning_end = 0;  // ReasoningSplit::reasoning_end
  std::string text;
  size_t text_begin = 0;    // where `text` starts in the generated text (its bytes)
  bool has_message = true;  // false: only calls, no text beside them
  std::vector<ToolCall> calls;
  // Where the message is in the output: after the reasoning item when there is one.
  int message_index() const { return reasoning.empty() ? 0 : 1; }
};
ResponsesOutput SplitOutput(const ResponsesMeta& meta, const std::string& text);

// {"type": "reasoning", "id": "rs_...", "summary": [], "content": [{"type": "reasoning_text",
// "text"}], "status"} (content empty while in progress): the thinking as the open-weight
// reasoning models' items carry it; no summary is generated.
nlohmann::ordered_json ReasoningItem(const ResponsesMeta& meta, const std::string& text,
                                     const char* status);
std::string ReasoningItemId(const ResponsesMeta& meta);

// The output items: {"type": "message", ...} (when has_message) then one
// {"type": "function_call", ...} per call. Item ids derive from the response's id. The
// message's output_text lists `logprobs` (empty when null or not asked for).
nlohmann::ordered_json MessageItem(const ResponsesMeta& meta, const std::string& text,
                                   const char* status,
                                   const nlohmann::ordered_json* logprobs = nullptr);
nlohmann::ordered_json FunctionCallItem(const ResponsesMeta& meta, int i, const ToolCall& call,
                                        const char* status);
std::string MessageItemId(const ResponsesMeta& meta);

// include ["message.output_text.logprobs"] (or top_logprobs > 0): the log-probabilities of the
// message's tokens as output_text lists them, [{"token", "logprob", "bytes", "top_logprobs":
// [{"token", "logprob", "bytes"}]}]. A token is the message's when its bytes start within the
// message's text (`out`, split from the result's text); the thinking's and the calls' tokens
// are in no output_text.
nlohmann::ordered_json OutputTextLogprob(const ResponsesMeta& meta, const TokenLogprob& lp);
nlohmann::ordered_json MessageLogprobs(const ResponsesMeta& meta, const CompletionResult& result,
                                       const ResponsesOutput& out);

// The response object. `result` null: in progress (no output, no usage yet).
nlohmann::ordered_json ResponseObject(const ResponsesMeta& meta, const CompletionResult* result);

// The assistant turn the output amounts to, as a chat message (what a continuation replays).
nlohmann::ordered_json AssistantMessage(const ResponsesMeta& meta, const CompletionResult& result);

// "event: <type>\ndata: <json>\n\n", the event's "type" and "sequence_number" set.
std::string ResponsesEvent(const std::string& type, nlohmann::ordered_json data, int* sequence);

}  // namespace promptcache
