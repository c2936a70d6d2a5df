// The JSON bodies of Anthropic's Messages API: the message a request answers, its Server-Sent
// Events (named events, as Anthropic's SDKs read them), and errors in Anthropic's shape. Pure
// functions of the engine's CompletionResult, unit-tested without a server.
//
// Usage follows Anthropic's accounting, in which the three input counts add up to the prompt:
// cache_read_input_tokens are the prompt tokens whose K/V came from the cache (any prefix hit,
// pinned or not), cache_creation_input_tokens those this request computed into a pinned prefix
// (a cache_control breakpoint's), input_tokens the rest.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "promptcache/engine.h"
#include "server/openai_request.h"

namespace promptcache {

struct MessagesUsage {
  int input_tokens = 0, output_tokens = 0;
  int cache_creation_input_tokens = 0, cache_read_input_tokens = 0;
};
MessagesUsage UsageOf(const CompletionResult& result);

// Why generation stopped, in Anthropic's terms: "end_turn", "max_tokens" or "stop_sequence"
// (with the sequence). `generated` is the text of every generated token, stop string included
// (the engine's text stops before it), to tell which stop sequence matched, if any.
struct StopInfo {
  std::optional<std::string> reason;  // none: cancelled (the server is stopping)
  std::optional<std::string> sequence;
};
StopInfo StopOf(const CompletionResult& result, const std::string& generated,
                const std::vector<std::string>& stop_sequences);

struct MessageMeta {
  std::string id;  // "msg_..."
  std::string model;
};

// A tool call the model made: a tool_use content block.
struct ToolUseBlock {
  std::string id;  // "toolu_..."
  std::string name;
  nlohmann::ordered_json input;  // an object
};

// A thinking content block: {"type": "thinking", "thinking", "signature"}. The signature is this
// server's, not Anthropic's: ThinkingSignature of the text (docs/server.md).
struct ThinkingBlock {
  std::string thinking;
  std::string signature;
};
// "pc1-" and the 16 hex digits of a 64-bit FNV-1a hash of the thinking text: it names the text
// it came with; it is no secret and proves nothing (anyone can compute it).
std::string ThinkingSignature(std::string_view thinking);

// The non-streaming response: {"id", "type": "message", "role", "model", "content": [{"type":
// "text", "text"}], "stop_reason", "stop_sequence", "usage"}.
std::string MessageBody(const MessageMeta& meta, const CompletionResult& result,
                        const StopInfo& stop);
// With tools offered: a text block when `text` is not empty (or there are no calls), then one
// tool_use block {"type": "tool_use", "id", "name", "input"} per call.
// `thinking`: a thinking block first (a model that thinks, server/reasoning.h); the text block is
// then left out when empty and the message has nothing else.
std::string MessageBody(const MessageMeta& meta, const CompletionResult& result,
                        const StopInfo& stop, const std::string& text,
                        const std::vector<ToolUseBlock>& tool_uses,
                        const std::optional<ThinkingBlock>& thinking = std::nullopt);

// Streaming: "event: NAME\ndata: JSON\n\n" per event, in the order message_start,
// content_block_start, ping, content_block_delta..., content_block_stop, message_delta,
// message_stop. message_start's usage counts the whole prompt as input (what is cached is known
// once it has been looked up); message_delta carries the final usage, which the SDKs take over.
std::string MessageStartEvent(const MessageMeta& meta, int prompt_tokens);
std::string ContentBlockStartEvent(int index = 0);
std::string PingEvent();
std::string TextDeltaEvent(const std::string& text, int index = 0);
std::string MessageEndEvents(const CompletionResult& result, const StopInfo& stop);
// With tools, blocks come and go by index: content_block_stop of one, a whole tool_use block
// (content_block_start with {"type": "tool_use", "id", "name", "input": {}}, the input's JSON
// text as input_json_delta deltas, content_block_stop), and the end after the last block
// (message_delta, message_stop).
std::string ContentBlockStopEvent(int index);
// A thinking block, as Anthropic streams one: content_block_start {"type": "thinking",
// "thinking": "", "signature": ""}, thinking_delta deltas, one signature_delta before its
// content_block_stop.
std::string ThinkingBlockStartEvent(int index);
std::string ThinkingDeltaEvent(const std::string& text, int index);
std::string SignatureDeltaEvent(const std::string& signature, int index);
std::string ToolUseEvents(int index, const ToolUseBlock& call);
std::string MessageDeltaEvents(const CompletionResult& result, const StopInfo& stop);
// An error after the stream started: event "error" with Anthropic's error object.
std::string MessagesErrorEvent(const ApiError& error);

// {"type": "error", "error": {"type", "message"}}, the type from the HTTP status
// (invalid_request_error, authentication_error, permission_error, not_found_error,
// request_too_large, rate_limit_error, overloaded_error, api_error).
std::string AnthropicErrorBody(const ApiError& error);

}  // namespace promptcache
