// Anthropic's Messages API requests (POST /v1/messages and /v1/messages/count_tokens): parsing
// and validation as pure functions from JSON text to a request or an error, as
// server/openai_request.h does for OpenAI's routes, and the prompt a request renders to.
//
// The request is read as strictly as the OpenAI routes read theirs: every field is one this
// server implements, one it accepts as meaningless here (metadata, service_tier), one accepted
// only at the value that asks for nothing, or a 400 naming it.
// Content is text, thinking and tool use: string contents, `text` blocks, an assistant's
// `thinking` blocks (its reasoning_content; `redacted_thinking` ones are accepted and dropped),
// `tool_use` blocks and a user's `tool_result` blocks; image and document blocks are refused by
// name. `thinking` ({"type": "enabled", "budget_tokens"}, "adaptive" or "disabled") switches a
// template's thinking where it has a switch (server/reasoning.h); `output_config` sets its
// reasoning effort and the answer's JSON schema.
// Tool use is the chat route's, translated: `tools` become OpenAI-shaped function tools (the
// chat template's `tools`), tool_use blocks an assistant's tool_calls, tool_result blocks `tool`
// messages, and tool_choice any / tool {name} the chat route's grammar for one call
// (server/tool_request.h ApplyToolChoice). A `cache_control` breakpoint on a system or message
// text block becomes a timed pin of the prompt's tokens up to the end of that block (engine:
// CompletionRequest::timed_pins), with Anthropic's TTLs ("5m", the default, or "1h"); a top-level
// `cache_control` is one at the end of the last message.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "promptcache/engine.h"
#include "sampling/sampler.h"
#include "server/openai_request.h"
#include "server/prompt_encoder.h"
#include "server/tool_calls.h"

namespace promptcache {

// A cache_control breakpoint: the prompt up to the end of one text block.
struct AnthropicBreakpoint {
  size_t message = 0;      // index into AnthropicRequest::messages (the system prompt is first)
  size_t content_end = 0;  // bytes of that message's content up to the end of the block
  double ttl_seconds = 300;
};

// Anthropic allows at most this many cache_control breakpoints per request.
inline constexpr size_t kMaxCacheBreakpoints = 4;

struct AnthropicRequest {
  std::string model;
  int max_tokens = 0;  // required by /v1/messages; unused by count_tokens
  // The system prompt (when given) as a first "system" message, then the turns; block texts
  // joined as the chat route joins content parts (without a separator).
  std::vector<ApiMessage> messages;
  std::vector<AnthropicBreakpoint> breakpoints;
  SamplingParams sampling;  // Anthropic's defaults: temperature 1, no top-p/top-k cut
  std::vector<std::string> stop_sequences;
  bool stream = false;
  // Tools, as the chat route holds them: [{"type": "function", "function": {"name",
  // "description", "parameters": input_schema}}] in the client's key order; null for none.
  // tool_choice: auto (default), any (kRequired), tool (kFunction, tool_function), none.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_function;
  bool tools_offered() const { return !tools.is_null() && tool_choice != ToolChoice::kNone; }
  // Extensions (docs/server.md "Segments"): "cache_segments" (unset: the server's
  // --segment-cache) and "recompute", the share of reused segment tokens recomputed (< 0: the
  // server's; refused when segments are off).
  std::optional<bool> cache_segments;
  double recompute = -1;
  // `thinking`: enabled or adaptive (true), disabled (false); unset: not given. budget_tokens
  // (enabled: at least 1024 and below max_tokens, as Anthropic requires; 0 otherwise), which the
  // route enforces by closing the thinking (anthropic_routes.cc, ThinkingBudget).
  std::optional<bool> thinking;
  int thinking_budget = 0;
  // Extension: "grammar" (GBNF), as on the chat route (llama.cpp's field); null: none.
  std::shared_ptr<const Grammar> grammar;
  // `output_config`: `effort` ("low" ... "max"; empty: not given), the template's
  // reasoning_effort (the route refuses it for a template that reads none); `format`
  // ({"type": "json_schema", "schema"}), the grammar of its schema for the answer (null: none).
  std::string effort;
  std::shared_ptr<const Grammar> output_format;
};

// POST /v1/messages. Returns the error to send, or nullopt when *out is valid.
std::optional<ApiError> ParseMessagesRequest(std::string_view body, const RequestLimits& limits,
                                             AnthropicRequest* out);
// POST /v1/messages/count_tokens: model, messages and system (no max_tokens nor sampling).
std::optional<ApiError> ParseCountTokensRequest(std::string_view body, AnthropicRequest* out);

// How this server treats a top-level field of a Messages request (documented in
// docs/server.md; the test walks Anthropic's list).
FieldSupport MessagesFieldSupport(std::string_view field);

// Once the model's tool-call format is known: the chat route's checks and, for tool_choice any or
// tool, *grammar (ApplyToolChoice); errors name Anthropic's fields (tools[i].input_schema).
std::optional<ApiError> ApplyMessagesToolChoice(ToolCallFormat format,
                                                const AnthropicRequest& request,
                                                std::shared_ptr<const Grammar>* grammar);

struct AnthropicPrompt {
  std::vector<int32_t> tokens;  // the conversation through the chat template, ready to answer
  // One per breakpoint the template could render: the tokens it covers (those its rendering
  // shares with the whole prompt) and its TTL, already scaled.
  std::vector<CompletionRequest::TimedPin> pins;
  std::vector<PromptSegment> segments;  // with segments on
  bool opens_thinking = false;          // BuiltPrompt::opens_thinking
};

// Renders the request as the chat route renders its messages. `ttl_scale` multiplies each
// breakpoint's TTL (1 in production; tests shorten them). `max_tokens`: as
// PromptEncoder::FromMessages (a prompt that surely has more is refused before tokenizing).
// `segments`: also cut it into segments (PromptEncoder), the breakpoints' prefixes too.
Result<AnthropicPrompt> BuildMessagesPrompt(const PromptEncoder& encoder,
                                            const AnthropicRequest& request, double ttl_scale = 1,
                                            size_t max_tokens = SIZE_MAX, bool segments = false);

}  // namespace promptcache
