// Turns the prompt of an API request into token ids: completion text (with BOS), token ids
// given by the client (checked against the vocabulary), or chat messages rendered through the
// model's chat template. Special tokens come from the template only: spelled out in a message
// or a completion prompt they stay text, unless the encoder trusts its clients.
//
// It also finds how many leading tokens a `cache_control` breakpoint covers: the conversation
// is rendered up to the end of the marked message and encoded, and the breakpoint covers the
// tokens that rendering shares with the full prompt (a boundary merge may make the two
// encodings differ in their last token or so; the engine rounds pins down to whole blocks
// anyway).
//
// Segments (docs/server.md "Segments"): with segments on, the prompt is also cut into ranges the
// engine may reuse wherever they appear (CompletionRequest::segments): each message's content,
// each content part or content block of it, and within those (and in a completion prompt) the
// text between occurrences of the server's separator, trimmed of surrounding whitespace. Each
// such text is found in the rendered prompt (in order, inside text the client wrote) and the
// rendered prompt is tokenized in pieces at those places (Tokenizer::EncodeCut), so that a
// segment's token ids are those of its text alone, the same after any other text. What this
// changes against tokenizing the whole text at once is only the merges across a segment's two
// ends (a word or a run of spaces that would have joined the text beside it); a segment right
// after a special token or at the very start of a completion prompt still gets SentencePiece's
// dummy-prefix space there, as in a plain encoding. With segments off the prompt is tokenized
// as one text, exactly as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "core/status.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {

// OpenAI writes at most this many explicit breakpoints per request (the latest ones).
inline constexpr size_t kMaxPromptCacheBreakpoints = 4;

struct BuiltPrompt {
  std::vector<int32_t> tokens;
  // Leading tokens to pin: 0 none, -1 the whole prompt, else the length covered by the last
  // cache_control breakpoint.
  int pin_tokens = 0;
  // The tokens each of the (latest kMaxPromptCacheBreakpoints) explicit prompt_cache_breakpoints
  // covers, for timed pins; a breakpoint that covers nothing is left out.
  std::vector<int> breakpoint_tokens;
  // With segments on: the token ranges of the prompt's segments, ascending (empty otherwise).
  std::vector<PromptSegment> segments;
  // A chat prompt whose model thinks and whose generation prompt opened the thinking
  // (server/reasoning.h): the output starts inside it.
  bool opens_thinking = false;
};

// How a prompt is cut into segments (the server's --segment-separator and --segment-min-tokens).
struct SegmentCut {
  std::string separator;  // cuts inside a text too; empty: none
  // Texts with fewer bytes than this cannot have this many tokens and are not made segments
  // (the engine would not look them up; cutting at them would only change merges).
  int min_tokens = 64;
};

// How a template takes an earlier assistant turn that called tools, probed once with a one-call
// conversation as llama.cpp probes its templates. `variables`: ToolTemplateVariables, which such
// a template may need to render at all.
struct CallTurnForm {
  // Object arguments refused, their JSON text rendered: templates that concatenate them
  // ('>>>' + name + '\n' + arguments: Functionary v3.2, DeepSeek R1).
  bool arguments_as_text = false;
  // A null content refused, "" rendered: templates that search it ('</think>' in
  // message.content: Qwen3), which fail on what OpenAI clients send with tool_calls.
  bool empty_content = false;
  // An assistant's reasoning_content also as `thinking`, which harmony's template (gpt-oss)
  // reads; in a turn with calls without its content, which that template refuses beside it.
  // Not probed: set for a template TemplateIsHarmony finds.
  bool thinking_field = false;
};
CallTurnForm ProbeCallTurnForm(const ChatTemplate& chat,
                               const nlohmann::ordered_json& variables = nullptr);

// A request's conversation as the chat template sees it: each message's role and content, an
// assistant's tool_calls (content null when it had none, "" where `form` says), a tool result's
// tool_call_id and name; `tools` (null: none) as the template's `tools` variable. Arguments that
// are an object go as their compact JSON text where `form` says.
ChatInput RequestChatInput(const std::vector<ApiMessage>& messages, bool add_generation_prompt,
                           const nlohmann::ordered_json& tools, CallTurnForm form = {});

// The variables a format's template reads besides `tools`, null for none: FireFunction v2's
// `functions` (the tools' JSON indented by 2, "" for none) and `datetime` ("Jul 26 2024
// 10:30:00 GMT", `now` in UTC), as its model's own server (and llama.cpp) passes them.
nlohmann::ordered_json ToolTemplateVariables(ToolCallFormat format,
                                             const nlohmann::ordered_json& tools,
                                             const std::tm& now);

// A chat request's further template variables: its chat_template_kwargs, and its
// reasoning_effort when the template reads one (a kwarg of that name wins); null for none.
nlohmann::ordered_json RequestTemplateVariables(const ApiRequest& request,
                                                bool reads_reasoning_effort);

class PromptEncoder {
 public:
  // `chat_template` is the model's tokenizer.chat_template (may be empty: plain transcript).
  // trust_clients: special-token spellings in messages and prompts become special tokens.
  PromptEncoder(const Tokenizer& tokenizer, std::string_view chat_template,
                bool trust_clients = false);

  const ChatTemplate& chat_template() const { return template_; }
  void set_segment_cut(SegmentCut cut) { cut_ = std::move(cut); }
  const SegmentCut& segment_cut() const { return cut_; }
  // How the template's model writes tool calls (kNone when it is not rendered as Jinja).
  ToolCallFormat tool_format() const { return tool_format_; }

  // Text encoded with the vocabulary's BOS (if it adds one), or client-given ids checked to be
  // in range. InvalidArgument for an empty prompt or an id outside the vocabulary.
  // `max_tokens`: a text that surely has more tokens (Tokenizer::MinTokens, from its bytes) is
  // refused before it is tokenized, with OutOfRange: a body of megabytes costs a pass over its
  // bytes, not the tokenizer's memory and time. Here and below.
  Result<std::vector<int32_t>> FromPrompt(const std::string& text, const std::vector<int32_t>& ids,
                                          bool is_tokens, size_t max_tokens = SIZE_MAX) const;
  // The same for a text prompt cut into segments at the separator (token ids are not cut).
  Result<BuiltPrompt> FromPromptSegments(const std::string& text, const std::vector<int32_t>& ids,
                                         bool is_tokens, size_t max_tokens = SIZE_MAX) const;
  // The conversation through the chat template (the model's own Jinja template, or the
  // fallback family with its default system prompt), ready for the assistant's turn when
  // add_generation_prompt is set. pin_tokens covers the last cache_control breakpoint. `tools`:
  // the tools offered (the template's `tools` variable), null for none.
  // `segments`: also cut it into segments (the header comment).
  // `variables`: further template variables (chat_template_kwargs, a thinking switch), null
  // for none.
  Result<BuiltPrompt> FromMessages(const std::vector<ApiMessage>& messages,
                                   bool add_generation_prompt,
                                   const nlohmann::ordered_json& tools = nullptr,
                                   size_t max_tokens = SIZE_MAX, bool segments = false,
                                   const nlohmann::ordered_json& variables = nullptr) const;
  // What a breakpoint after `content_end` bytes of message `message` covers of `whole` (the
  // conversation's tokens, built with the same tools, segments and variables): the tokens the
  // conversation cut there, rendered as a finished prefix, shares with it; 0 when the template
  // refuses a conversation cut short.
  int BreakpointCoverage(const std::vector<ApiMessage>& messages, size_t message,
                         size_t content_end, const nlohmann::ordered_json& tools, bool segments,
                         const nlohmann::ordered_json& variables,
                         const std::vector<int32_t>& whole) const;

  // Reasoning (server/reasoning.h), read from the template: its model writes <think>...</think>
  // or harmony's analysis channel; its output is harmony's (server/harmony.h); it reads
  // `enable_thinking` (Qwen3's switch); it reads `reasoning_effort`.
  bool thinking() const { return thinking_; }
  bool harmony() const { return harmony_; }
  bool reads_enable_thinking() const { return reads_enable_thinking_; }
  bool reads_reasoning_effort() const { return reads_reasoning_effort_; }
  // The variables that switch thinking on or off (Anthropic's `thinking`, Ollama's `think`):
  // {"enable_thinking": on} for a template that reads it; null when unset or no switch.
  nlohmann::ordered_json ThinkingSwitch(std::optional<bool> on) const {
    if (!on || !reads_enable_thinking_) return nullptr;
    return {{"enable_thinking", *on}};
  }
  // RequestTemplateVariables for this template.
  nlohmann::ordered_json RequestVariables(const ApiRequest& request) const {
    return RequestTemplateVariables(request, reads_reasoning_effort_);
  }

  // The whole request: its prompt and what to pin (the `cache.pin` field pins everything), and
  // its segments when `segments` is set.
  Result<BuiltPrompt> Build(const ApiRequest& request, size_t max_tokens = SIZE_MAX,
                            bool segments = false) const;
  Result<BuiltPrompt> Build(const PrefixRequest& request, size_t max_tokens = SIZE_MAX,
                            bool segments = false) const;

 private:
  std::vector<int32_t> EncodeChat(const MarkedText& text) const;
  // The rendered conversation tokenized in pieces at its messages' segment texts (*segments:
  // their token ranges).
  std::vector<int32_t> EncodeChatSegments(const MarkedText& text,
                                          const std::vector<ApiMessage>& messages,
                                          std::vector<PromptSegment>* segments) const;
  // Appends the segment texts of `text` (cut at the separator, trimmed, long enough).
  void AddSegmentTexts(std::string_view text, std::vector<std::string_view>* out) const;
  // OutOfRange when `text` (with BOS) surely has more than max_tokens tokens.
  Status CheckBound(std::string_view text, size_t max_tokens) const;

  const Tokenizer& tok_;
  ChatTemplate template_;
  bool trust_clients_;
  ToolCallFormat tool_format_;
  CallTurnForm call_turn_;  // ProbeCallTurnForm
  bool harmony_;
  bool thinking_;
  bool reads_enable_thinking_;
  bool reads_reasoning_effort_;
  SegmentCut cut_;
};

}  // namespace promptcache
