// Tool calls in the OpenAI routes: which format a model writes its calls in, reading the calls
// back out of the generated text, and the grammar that forces a call.
//
// The format is chosen from the chat template's text (DetectToolCallFormat): the template that
// renders earlier calls for the model is the best witness of how the model writes them. The
// parsers are all-or-nothing: text that is not entirely a well-formed call (after the content
// that may precede it) stays text, so malformed output is never an error, only content.
// ToolCallStart tells a stream from where on text must be held back because it may still turn
// into a call; ToolCallGbnf is the grammar (grammar/grammar.h) for `tool_choice` "required" or a
// named function: exactly one call, in the format, with arguments valid against the tool's
// `parameters` schema (grammar/json_schema.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace promptcache {

enum class ToolCallFormat {
  kNone,     // the template shows no format this server knows: tools are refused
  kHermes,   // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Hermes, Qwen2.5)
  kLlama3,   // {"name": ..., "parameters": {...}}, maybe after <|python_tag|> (Llama 3.1-3.3)
  kMistral,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral Nemo)
  kFunctionaryV32,  // >>>name\n{...} per call, >>>all\n before text (Functionary v3.2)
  kFunctionaryV31,  // text, then <function=name>{...}</function> per call (Functionary v3.1)
  kFireFunction,  // text, then  functools[{"name": ..., "arguments": {...}}, ...] (FireFunction v2)
  kCommandRPlus,  // text, then Action:\n```json\n[{"tool_name": ..., "parameters": {...}}]\n```
  kCommandR7B,    // <|START_ACTION|>[{"tool_call_id": ..., "tool_name": ..., "parameters": ...}]
  kDeepSeekR1,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json...
  // gpt-oss's harmony: <|channel|>commentary to=functions.name<|message|>{...}<|call|>, the form
  // the reasoning splitter (server/harmony.h) gives every call message in the answer's text.
  kHarmony,
};

// "none", "hermes", "llama3_json", "mistral", "functionary_v3_2", "functionary_v3_1",
// "firefunction_v2", "command_r_plus", "command_r7b", "deepseek_r1", "harmony".
std::string_view ToolCallFormatName(ToolCallFormat format);

// The rule, in this order: a template that spells "<|channel|>" is kHarmony (TemplateIsHarmony);
// "<tool_call>", kHermes; "[TOOL_CALLS]",
// kMistral; ">>>${recipient}" (the generation prompt ends in ">>>"), kFunctionaryV32;
// "<function=", kFunctionaryV31; "functools[", kFireFunction; "<|START_ACTION|>", kCommandR7B;
// "Action:" with '"tool_name": ', kCommandRPlus; "<｜tool▁calls▁begin｜>", kDeepSeekR1; Llama 3's
// header "<|start_header_id|>" with the literal '"parameters": ', kLlama3; anything else (no
// template, Gemma, Phi) kNone.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, compact, keys in the model's order
};

struct ParsedOutput {
  std::string content;  // the text before the calls; all of it when there are none
  std::vector<ToolCall> calls;
};

// The calls in a choice's text. Where the calls start is ToolCallStart's full marker; from there
// on the text must be calls and whitespace only, each a JSON object with a string "name" and an
// object (or a JSON object's text) as arguments, else nothing is a call and `content` is `text`.
// kFunctionaryV32 writes text as "all\n" + text: `content` leaves that marker out (always, so
// also when there are no calls), and then starts at ToolContentBegin, not at 0.
ParsedOutput ParseToolCalls(ToolCallFormat format, std::string_view text);

// Where the content starts in `text`: after kFunctionaryV32's "all\n" (or ">>>all\n"), else 0.
size_t ToolContentBegin(ToolCallFormat format, std::string_view text);

// Where in `text` (the output so far) a call starts or may still start: a stream sends the text
// before it as content and holds back the rest until the end. kHermes: at "<tool_call>"; kMistral:
// at "[TOOL_CALLS]", or at a "[" that begins the output; kLlama3: at a "{" or "<|python_tag|>"
// that begins the output; kFunctionaryV32: at 0 unless the output starts with "all\n", then at
// the next ">>>"; kFunctionaryV31: at "<function="; kFireFunction: at "functools[" (the space
// before it stays content); kCommandRPlus: at "Action:"; kCommandR7B: at "<|START_ACTION|>", or
// at a "[" that begins the output; kDeepSeekR1: at "<｜tool▁calls▁begin｜>" or
// "<｜tool▁call▁begin｜>"; kHarmony: at kHarmonyCallOpen. The beginning of a marker at the very end
// counts (it may complete), as does output that is whitespace so far for the formats whose calls
// begin it. text.size(): none.
size_t ToolCallStart(ToolCallFormat format, std::string_view text);

// A streamed reply's text when tools are offered, as every route's stream sends it: the text goes
// out as it comes, except from where a call may start (ToolCallStart), which is held back until
// the end says whether it is one.
struct ToolTextStream {
  std::string text;  // generated so far
  size_t sent = 0;   // bytes of it sent as text (or skipped: a marker, not text)
  // Adds a piece: the text that may go out now.
  std::string Release(ToolCallFormat format, const std::string& piece);
  // At the end, with the whole reply `full`, its parsed `content` and whether it has calls: the
  // held-back text that is content (what precedes the calls; all of it when there are none).
  std::string Rest(ToolCallFormat format, std::string_view full, std::string_view content,
                   bool has_calls);
};

struct ToolSpec {
  std::string name;
  std::string parameters;  // its JSON schema's text ("{}" or empty: no arguments)
};

// GBNF for exactly one call, in `format`, of one of `tools` with arguments valid against its
// parameters. kMistral's grammar starts at "[": "[TOOL_CALLS]" is a control token, which
// constrained decoding never allows (ParseToolCalls accepts the output without it);
// kFunctionaryV32's is "name\n{...}", the generation prompt having written the ">>>";
// kFunctionaryV31's "<function=name>{...}</function>"; kFireFunction's " functools[{...}]";
// kCommandRPlus's "Action:\n```json\n[{...}]\n```"; kCommandR7B's, like kMistral's, starts at "["
// (<|START_ACTION|> is a control token), its call's tool_call_id "0"; kDeepSeekR1's is the calls
// with their markers, which its tokenizer has as plain (non-control) added tokens; kHarmony's is
// the call message after the generation prompt's "<|start|>assistant",
// "<|channel|>commentary to=functions.name <|constrain|>json<|message|>{...}", whose markers
// are control tokens: the request must have CompletionRequest::special_text.
// InvalidArgument when a tool's parameters use what json_schema.h refuses, with its index in
// `tools` in the message ("tools[1]: JSON schema: 'properties.a.pattern' is not supported").
Result<std::string> ToolCallGbnf(ToolCallFormat format, const std::vector<ToolSpec>& tools,
                                 int* failed_tool = nullptr);

}  // namespace promptcache
