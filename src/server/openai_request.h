// Parsing and validation of OpenAI-style request bodies, as pure functions from JSON text to a
// request or an error, so that every malformed input is a unit-testable (and fuzzed) 4xx answer
// rather than an exception inside the HTTP layer.
//
// What is checked here needs no model: JSON syntax and UTF-8 (nlohmann rejects ill-formed
// strings), field types, value ranges, and strictness: every field of a request is one this
// server implements (RequestFieldNames), one it accepts as meaningless here (user, store,
// metadata, ...), or a 400 naming it, so that nothing a client asks for (llama.cpp's grammar,
// vLLM's guided_json, ...) is silently ignored. What needs the model (the model name, token ids,
// the prompt's length against the context) is checked by the server after tokenization.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pml/pml.h"
#include "promptcache/engine.h"
#include "sampling/sampler.h"
#include "server/api_error.h"

namespace promptcache {

class Grammar;  // grammar/grammar.h

struct ApiMessage {
  std::string role;     // "system", "user" or "assistant" ("developer" is read as "system")
  std::string content;  // text parts joined
  // A `cache_control` breakpoint on the message or one of its parts: pin the prompt up to the
  // end of this message.
  bool cache_breakpoint = false;
  // OpenAI's explicit breakpoints (a text part's `prompt_cache_breakpoint`): for each, the bytes
  // of `content` up to the end of its part, where a timed pin of the prompt ends.
  std::vector<size_t> prompt_cache_breakpoints;
  // Tool use (server/tool_request.h). An assistant's calls as the template sees them:
  // [{"id", "type": "function", "function": {"name", "arguments"}}], arguments an object when the
  // client's JSON text is one (null: none); its content is then null unless it has text.
  nlohmann::ordered_json tool_calls;
  bool content_null = false;
  std::string tool_call_id;  // role "tool": the call it answers
  std::string name;          // role "tool": the function's name, when given
  // The byte range of each text part (content part, Anthropic content block) within `content`,
  // in order; empty for a string content. Segments (PromptEncoder) cut the prompt at them.
  std::vector<std::pair<size_t, size_t>> parts;
  // An assistant's earlier thinking (`reasoning_content`, as llama.cpp, vLLM and the AI SDK send
  // it back): the template's message field of that name (Qwen3's renders it). Unset: none.
  std::optional<std::string> reasoning_content;
};

// tool_choice: "none" (tools are not offered), "auto", "required" or one named function.
enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

enum class ApiKind { kCompletion, kChat };

struct ApiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  // Completions: the prompt as text, or as token ids (prompt_is_tokens).
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // Completions with a batch of prompts ("prompt": ["a", "b"] or [[1, 2], [3]]): every prompt,
  // the first also in the fields above. Empty for a single prompt.
  struct BatchPrompt {
    std::string text;
    std::vector<int32_t> tokens;
    bool is_tokens = false;
  };
  std::vector<BatchPrompt> batch;
  // Chat completions.
  std::vector<ApiMessage> messages;
  // Tools offered (chat): the "tools" array as sent, keys in the client's order; null when none
  // (or []). tool_choice defaults to auto with tools; tool_function names the forced function.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_function;
  bool tools_offered() const { return !tools.is_null() && tool_choice != ToolChoice::kNone; }

  std::optional<int> max_tokens;  // max_completion_tokens, else max_tokens; unset: up to context
  int n = 1;                      // choices
  // Log-probabilities: -1 none, else the alternatives per token (chat: logprobs true with
  // top_logprobs; completions: logprobs N).
  int logprobs = -1;
  bool echo = false;  // completions: the prompt leads the text (and its tokens the logprobs)
  // Structured output: response_format json_object / json_schema, llama.cpp's grammar (GBNF)
  // or json_schema, vLLM's guided_json or guided_choice, compiled. Null: free text.
  std::shared_ptr<const Grammar> grammar;
  std::string grammar_field;  // the field it came from
  SamplingParams sampling;    // OpenAI defaults: temperature 1, top_p 1, no top-k/min-p
  // DRY's sequence breakers as text (llama-server's defaults unless the request names others);
  // the route turns them into sampling.dry_breakers with the model's vocabulary.
  std::vector<std::string> dry_breakers = {"\n", ":", "\"", "*"};
  std::vector<std::string> stop;
  bool ignore_eos = false;  // extension
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool pin = false;            // extension: "cache": {"pin": true} pins the whole prompt
  // vLLM's "cache_salt": prompts with different salts (or tenants) share no cached prefix.
  std::string cache_salt;

  // Modular prompts (extension, docs/server.md). A completion whose prompt string starts with
  // `<prompt` is a PML prompt (pml_xml; "pml": false sends such text as plain text). A "schema"
  // field with "modules" picks modules as JSON; the messages (chat) or the prompt string
  // (completions) become the prompt's new text.
  bool pml_xml = false;  // prompt_text is `<prompt schema="...">...</prompt>`
  std::string schema;    // non-empty: the JSON form
  std::vector<PmlModuleRef> modules;
  // "positions": "schema" | "contiguous" (kDefault: the prompt's or the server's choice).
  PmlPositions positions = PmlPositions::kDefault;
  double recompute = -1;  // "recompute": share 0..1 (< 0: the prompt's or the server's)
  // "evaluate": true: the response also reports fidelity against the full recomputes
  // (engine/fidelity.h); modular, non-streamed requests only.
  bool evaluate = false;
  // "cache_map": true: the response carries where each prompt token's K/V came from
  // (server/cache_response.h).
  bool cache_map = false;
  // "cache_segments": true | false (docs/server.md "Segments"); unset: the server's
  // --segment-cache. "recompute" and "evaluate" also apply to a plain prompt whose segments are
  // on: the server checks them once it knows (CheckSegmentFields).
  std::optional<bool> cache_segments;
  // Reasoning models (server/reasoning.h, chat only). reasoning_format "none" leaves the thinking
  // in the content; "auto" and "deepseek" (the default) split it into reasoning_content.
  bool reasoning_split = true;
  // chat_template_kwargs: an object of further template variables (enable_thinking, ...); null
  // when none. Bounded (kMaxTemplateKwargsBytes); the variables the server sets are refused.
  nlohmann::ordered_json template_kwargs;
  // reasoning_effort ("low", ...): a template variable for templates that read it; empty: none.
  std::string reasoning_effort;
  // Chat: OpenAI's Predicted Outputs, the answer the client expects (`prediction.content`),
  // checked as drafts while decoding (EngineOptions::draft_max); empty: none.
  std::string prediction;
  bool modular() const { return pml_xml || !schema.empty(); }
};

// The largest prediction.content.
constexpr size_t kMaxPredictionBytes = size_t(1) << 20;
// The largest chat_template_kwargs (its JSON text) and the most variables it may set.
constexpr size_t kMaxTemplateKwargsBytes = 16384;
constexpr size_t kMaxTemplateKwargs = 32;

struct RequestLimits {
  int max_tokens_limit = 0;  // largest max_tokens accepted; 0: no bound here
};

// Parses a POST /v1/completions or /v1/chat/completions body into *out. Returns the error to
// send, or nullopt when *out is valid.
std::optional<ApiError> ParseCompletionRequest(std::string_view body, const RequestLimits& limits,
                                               ApiRequest* out);
std::optional<ApiError> ParseChatRequest(std::string_view body, const RequestLimits& limits,
                                         ApiRequest* out);

// Body of the cache endpoints (/v1/cache/load, /pin, /unpin), /tokenize and /detokenize: a
// prefix given as a prompt (text or token ids, also spelled "content" or "tokens" as llama.cpp's
// /tokenize and /detokenize do) or as chat messages.
struct PrefixRequest {
  std::string model;  // optional here
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  std::vector<ApiMessage> messages;  // non-empty: a chat prefix
  bool add_generation_prompt = false;
  // A chat prefix's `tools` as the template sees them (null: none, or tool_choice "none") and
  // its chat_template_kwargs (null: none), read as the chat route reads them.
  nlohmann::ordered_json tools;
  nlohmann::ordered_json template_kwargs;
  bool pin = false;        // /v1/cache/load: also pin it
  std::string cache_salt;  // the namespace's salt, as in completions
  // /tokenize, as llama.cpp's: add_special false leaves out the BOS a text prompt gets;
  // with_pieces answers [{id, piece}] instead of ids.
  bool add_special = true;
  bool with_pieces = false;
  std::optional<bool> cache_segments;  // /v1/cache/lookup: as in completions
};
std::optional<ApiError> ParsePrefixRequest(std::string_view body, PrefixRequest* out);

// OpenAI's prompt_cache_options.ttl, "30m", the only value it takes: how long the explicit
// breakpoints' pins last, renewed by every hit.
inline constexpr double kPromptCacheTtlSeconds = 1800;

class Grammar;
// A JSON schema's text compiled to the grammar of its instances, or the 400 naming `param` (a
// keyword the converter cannot enforce is "unsupported"): every route's structured outputs.
std::optional<ApiError> CompileJsonSchema(std::string_view schema, const std::string& param,
                                          std::shared_ptr<const Grammar>* out);

// A prompt string that is a PML prompt: `<prompt` (after whitespace) followed by a space, '>'
// or '/'.
bool LooksLikePml(std::string_view text);

// The 400 for a logit_bias token id at or above `vocab_size` (the parser cannot know the model).
std::optional<ApiError> CheckLogitBias(const SamplingParams& sampling, int vocab_size);

// With segments resolved (the request's cache_segments, else the server's default): the error for
// "recompute" or "evaluate" on a plain prompt without segments, which they do not apply to.
std::optional<ApiError> CheckSegmentFields(const ApiRequest& request, bool segments);

// How this server treats a top-level request field (documented in docs/server.md).
enum class FieldSupport {
  kImplemented,   // read and honoured
  kIgnored,       // accepted and meaningless here (user, store, metadata, ...)
  kOffValueOnly,  // accepted at the value that asks for nothing (tools: [], ...), else a 400
  kRefused,       // anything else: a 400 naming it
};
FieldSupport RequestFieldSupport(ApiKind kind, std::string_view field);

}  // namespace promptcache
