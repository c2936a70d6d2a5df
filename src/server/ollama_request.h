// Ollama's generation API (POST /api/chat and /api/generate): a request body translated into the
// chat or completions request this server already implements (server/openai_request.h), so that
// Ollama's clients get the same prompt rendering, tools, structured output, sampling and prefix
// cache as the OpenAI routes. Pure functions, unit-tested without a server.
//
// The translation: `messages` (role, content, an assistant's tool_calls, a tool message's
// tool_name) become chat messages; `tools` the chat route's tools (tool_choice auto, as Ollama
// has no tool_choice); `format` "json" response_format json_object, a schema json_schema;
// `options` the sampling fields (temperature, top_p, top_k, min_p, seed, num_predict -> max_tokens,
// stop, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, typical_p, mirostat,
// mirostat_tau, mirostat_eta). Other options (num_ctx, num_thread, ...) are ignored, as Ollama
// ignores options that do not apply.
// /api/generate's prompt (with `system`) is one user turn through the chat template, or with
// "raw": true the prompt text as it is. `keep_alive` is accepted and means nothing here (the one
// model stays loaded). `think` (true/false) switches a template's thinking where it has a
// switch and says whether the thinking is split out (server/reasoning.h); a level ("low",
// "medium", "high") is gpt-oss's reasoning effort; an assistant's
// `thinking` sent back is its reasoning_content. What cannot be honoured (images, suffix,
// template, context) is a 400 naming it. Extension: "grammar" (GBNF), passed to the
// chat or completions request as is.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/openai_request.h"

namespace promptcache {

struct OllamaRequest {
  ApiRequest api;      // the translated request (its kind: chat, or completion for raw)
  std::string model;   // as given
  bool stream = true;  // Ollama streams unless "stream": false
  bool chat = true;    // /api/chat (the reply is "message"), else /api/generate ("response")
  // No prompt (/api/generate) or no messages (/api/chat): Ollama's "load the model" request.
  bool load_only = false;
  // `think`: true or false; unset: not given (the template's default, thinking split out).
  std::optional<bool> think;
  // `think` as a level ("low", "medium", "high": gpt-oss's): think is true and the level is the
  // chat request's reasoning_effort (a 400 naming `think` for a template that does not read it).
  std::string think_level;
  // `logprobs` true: each generated token's log-probability, with `top_logprobs` (0 to 20)
  // alternatives; copied into api.logprobs (-1: none).
  int logprobs = -1;
};

std::optional<ApiError> ParseOllamaChat(std::string_view body, const RequestLimits& limits,
                                        OllamaRequest* out);
std::optional<ApiError> ParseOllamaGenerate(std::string_view body, const RequestLimits& limits,
                                            OllamaRequest* out);

}  // namespace promptcache
