// Anthropic's Messages API requests (POST /v1/messages and /v1/messages/count_tokens): parsing
// and validation as pure functions from JSON text to a request or an error, as
// server/openai_request.h does for OpenAI's routes, and the prompt a request renders to.
//
// The request is read as strictly as the OpenAI routes read theirs: every field is one this
// server implements, one it accepts as meaningless here (metadata, service_tier), one accepted
// only at the value that asks for nothing (tools: [], thinking disabled), or a 400 naming it.
// Content is text: string contents and `text` blocks; image, document, tool and thinking blocks
// are refused by name. A `cache_control` breakpoint on a system or message text block becomes
// a timed pin of the prompt's tokens up to the end of that block (engine: CompletionRequest::
// timed_pins), with Anthropic's TTLs ("5m", the default, or "1h").
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sampling/sampler.h"
#include "promptcache/engine.h"
#include "server/openai_request.h"
#include "server/prompt_encoder.h"

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
};

// POST /v1/messages. Returns the error to send, or nullopt when *out is valid.
std::optional<ApiError> ParseMessagesRequest(std::string_view body, const RequestLimits& limits,
                                             AnthropicRequest* out);
// POST /v1/messages/count_tokens: model, messages and system (no max_tokens nor sampling).
std::optional<ApiError> ParseCountTokensRequest(std::string_view body, AnthropicRequest* out);

// How this server treats a top-level field of a Messages request (documented in
// docs/server.md; the test walks Anthropic's list).
FieldSupport MessagesFieldSupport(std::string_view field);

struct AnthropicPrompt {
  std::vector<int32_t> tokens;  // the conversation through the chat template, ready to answer
  // One per breakpoint the template could render: the tokens it covers (those its rendering
  // shares with the whole prompt) and its TTL, already scaled.
  std::vector<CompletionRequest::TimedPin> pins;
};

// Renders the request as the chat route renders its messages. `ttl_scale` multiplies each
// breakpoint's TTL (1 in production; tests shorten them). `max_tokens`: as
// PromptEncoder::FromMessages (a prompt that surely has more is refused before tokenizing).
Result<AnthropicPrompt> BuildMessagesPrompt(const PromptEncoder& encoder,
                                            const AnthropicRequest& request, double ttl_scale = 1,
                                            size_t max_tokens = SIZE_MAX);

}  // namespace promptcache
