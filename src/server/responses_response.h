// The Responses API's bodies (POST /v1/responses): the response object, its output items (an
// assistant message with output_text, function_call items read from the text by the chat
// route's tool-call parser, server/tool_calls.h) and the typed Server-Sent Events a stream sends
// ("event: response.output_text.delta\ndata: {...}"). Pure functions of the request and the
// engine's result, so that the stream and the single body are built from the same items.
#pragma once

#include <cstdint>
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
};

// A generated text split as the output shows it: the message's text (what precedes the calls;
// all of the text without calls) and the calls.
struct ResponsesOutput {
  std::string text;
  bool has_message = true;  // false: only calls, no text beside them
  std::vector<ToolCall> calls;
};
ResponsesOutput SplitOutput(ToolCallFormat format, const std::string& text);

// The output items: {"type": "message", ...} (when has_message) then one
// {"type": "function_call", ...} per call. Item ids derive from the response's id.
nlohmann::ordered_json MessageItem(const ResponsesMeta& meta, const std::string& text,
                                   const char* status);
nlohmann::ordered_json FunctionCallItem(const ResponsesMeta& meta, int i, const ToolCall& call,
                                        const char* status);
std::string MessageItemId(const ResponsesMeta& meta);

// The response object. `result` null: in progress (no output, no usage yet).
nlohmann::ordered_json ResponseObject(const ResponsesMeta& meta, const CompletionResult* result);

// The assistant turn the output amounts to, as a chat message (what a continuation replays).
nlohmann::ordered_json AssistantMessage(const ResponsesMeta& meta, const CompletionResult& result);

// "event: <type>\ndata: <json>\n\n", the event's "type" and "sequence_number" set.
std::string ResponsesEvent(const std::string& type, nlohmann::ordered_json data, int* sequence);

}  // namespace promptcache
