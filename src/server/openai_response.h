// The JSON bodies the server sends, in OpenAI's shapes: completions and chat completions, their
// Server-Sent-Events chunks, and errors. Pure functions of the engine's CompletionResult, so
// that each shape is unit-tested without a server.
//
// Beyond OpenAI's fields every completion carries a `timings` object: queue, prompt and
// generation times, time to first token, and how many prompt tokens came from the cache
// versus were computed; a modular (PML) prompt's timings add its schema, the tokens reused from
// modules and encoded for missing ones, and the time of each phase (gather, encode, prefill).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "promptcache/engine.h"
#include "server/openai_request.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace promptcache {

// What every response and chunk of one request shares.
struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  std::string system_fingerprint;
  // Log-probabilities (requested with logprobs): a token id's text, as the tokenizer's bytes.
  bool logprobs = false;
  std::function<std::string(int32_t)> token_text;
  // Completions with echo: the prompt's text leads each choice's text, and its tokens (with
  // CompletionResult::prompt_logprobs) lead the log-probabilities.
  bool echo = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  // Chat with tools offered: each choice's text is read for calls in this format (kNone: the
  // text is the content). A choice with calls has them in `tool_calls`, the text before them as
  // content (null when blank) and finish_reason "tool_calls".
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  // Chat with a model that thinks (server/reasoning.h): each choice's thinking goes to
  // message.reasoning_content (a stream's delta.reasoning_content) and only its answer is the
  // content and is read for calls. token_bytes (a token id's bytes) counts the reasoning tokens.
  ReasoningMode reasoning;
  std::function<std::string(int32_t)> token_bytes;
};

// The tokens of `tokens` (whose bytes are `token_bytes`) that start within the first
// `reasoning_end` bytes of their text: usage's reasoning_tokens.
int ReasoningTokens(const std::vector<int32_t>& tokens,
                    const std::function<std::string(int32_t)>& token_bytes, size_t reasoning_end);

// The id of call `call` of choice `choice`: derived from the response's id, so that a stream and
// a retry of the parse give the same. "call_" and 24 hex digits; for kMistral 9 letters and
// digits, the only ids its template accepts back.
std::string ToolCallId(const ResponseMeta& meta, int choice, int call);
// The calls as OpenAI's message.tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments"}}].
nlohmann::ordered_json ToolCallsJson(const ResponseMeta& meta, int choice,
                                     const std::vector<ToolCall>& calls);

// One token's log-probability as chat's "logprobs" and Ollama's list it: {"token", "logprob",
// "bytes"}, from the token's bytes (a piece of a character is replaced when the JSON is dumped;
// "bytes" keeps it).
nlohmann::ordered_json TokenLogprobJson(const std::string& token_bytes, float logprob);
// The same with the token's alternatives as "top_logprobs" (chat's and the Responses API's
// entries), `token_bytes` giving each token's text.
nlohmann::ordered_json TokenLogprobWithTop(const TokenLogprob& lp,
                                           const std::function<std::string(int32_t)>& token_bytes);

// A choice's "logprobs" object: chat's {"content": [{token, logprob, bytes, top_logprobs}]},
// or completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"} (offsets in bytes
// from `text_offset`). With echo, `prompt` lists the prompt tokens' values first (the first
// token has none: null).
nlohmann::ordered_json LogprobsJson(const ResponseMeta& meta, const std::vector<TokenLogprob>& lps,
                                    size_t text_offset,
                                    const std::vector<TokenLogprob>* prompt = nullptr);

// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
std::string ErrorBody(const ApiError& error);

// The non-streaming response body ("text_completion" or "chat.completion").
std::string CompletionBody(const ResponseMeta& meta, const CompletionResult& result);

// Server-Sent Events: "data: <json>\n\n" per chunk, "data: [DONE]\n\n" at the end.
std::string SseEvent(const std::string& json_text);
std::string SseDone();
// The first chat chunk: delta {"role": "assistant", "content": ""}.
std::string StreamRoleChunk(const ResponseMeta& meta, bool include_usage, int index = 0);
// A piece of choice `index`'s text, with the log-probabilities of its tokens when requested
// (`text_offset`: where the piece starts in the choice's text).
std::string StreamTextChunk(const ResponseMeta& meta, const std::string& text, bool include_usage,
                            int index = 0, const std::vector<TokenLogprob>* logprobs = nullptr,
                            size_t text_offset = 0);
// A piece of choice `index`'s thinking: delta {"reasoning_content": text}, the name llama.cpp
// and vLLM send and the AI SDK reads.
std::string StreamReasoningChunk(const ResponseMeta& meta, const std::string& text,
                                 bool include_usage, int index = 0);
// The last chunk of each choice: empty delta/text and its finish_reason; the last one carries
// the timings.
std::string StreamFinishChunk(const ResponseMeta& meta, const CompletionResult& result,
                              bool include_usage);
// A choice's calls as streamed deltas, as OpenAI's clients accumulate them: per call a chunk
// with its index, id, type and name (arguments ""), then its arguments in pieces.
std::string StreamToolCallChunks(const ResponseMeta& meta, const std::vector<ToolCall>& calls,
                                 bool include_usage, int index);
// The usage chunk sent when stream_options.include_usage is set: choices [] and usage.
std::string StreamUsageChunk(const ResponseMeta& meta, const CompletionResult& result);
// An error after the stream has started (the status line is already sent): {"error": {...}}.
std::string StreamErrorEvent(const ApiError& error);

}  // namespace promptcache
