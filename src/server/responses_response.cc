#include "server/responses_response.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "server/json_fields.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

bool Blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// The ToolCallId scheme, with the response's id.
ResponseMeta ChatMeta(const ResponsesMeta& meta) {
  ResponseMeta m;
  m.kind = ApiKind::kChat;
  m.id = meta.id;
  m.tool_format = meta.tool_format;
  return m;
}

ojson Or(const ojson& v, ojson fallback) { return v.is_null() ? fallback : v; }

}  // namespace

ResponsesOutput SplitOutput(const ResponsesMeta& meta, const std::string& whole) {
  ResponsesOutput out;
  ReasoningSplit split = SplitReasoning(meta.reasoning, whole);
  out.reasoning = std::move(split.reasoning);
  out.reasoning_end = split.reasoning_end;
  const std::string& text = split.content;
  // The content is the text's end (after the thinking and the whitespace after it), or, as
  // Harmony's final channel, somewhere after the thinking.
  size_t content_begin = whole.size() - text.size();
  if (std::string_view(whole).substr(content_begin) != text) {
    content_begin = std::min(whole.find(text, out.reasoning_end), whole.size());
  }
  const ToolCallFormat format = meta.tool_format;
  out.text_begin = content_begin + ToolContentBegin(format, text);
  if (format == ToolCallFormat::kNone) {
    out.text = text;
    return out;
  }
  ParsedOutput parsed = ParseToolCalls(format, text);
  out.calls = std::move(parsed.calls);
  out.text = out.calls.empty() ? text.substr(ToolContentBegin(format, text)) : parsed.content;
  // Beside calls, text that is only whitespace is no message (as chat's content is then null).
  out.has_message = out.calls.empty() || !Blank(out.text);
  return out;
}

std::string MessageItemId(const ResponsesMeta& meta) { return "msg_" + meta.id.substr(5); }

std::string ReasoningItemId(const ResponsesMeta& meta) { return "rs_" + meta.id.substr(5); }

ojson ReasoningItem(const ResponsesMeta& meta, const std::string& text, const char* status) {
  ojson content = ojson::array();
  if (std::string(status) != "in_progress") {
    content.push_back({{"type", "reasoning_text"}, {"text", text}});
  }
  ojson item = {{"type", "reasoning"},
                {"id", ReasoningItemId(meta)},
                {"summary", ojson::array()},
                {"content", std::move(content)},
                {"status", status}};
  if (meta.request != nullptr && meta.request->encrypted_reasoning) {
    item["encrypted_content"] =
        std::string(status) != "in_progress" ? ojson(ReasoningContentBlob(text)) : ojson(nullptr);
  }
  return item;
}

ojson MessageItem(const ResponsesMeta& meta, const std::string& text, const char* status,
                  const ojson* logprobs) {
  ojson content = ojson::array();
  if (std::string(status) != "in_progress") {
    content.push_back({{"type", "output_text"},
                       {"text", text},
                       {"annotations", ojson::array()},
                       {"logprobs", logprobs != nullptr ? *logprobs : ojson::array()}});
  }
  return {{"type", "message"},
          {"id", MessageItemId(meta)},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

ojson FunctionCallItem(const ResponsesMeta& meta, int i, const ToolCall& call, const char* status) {
  const bool done = std::string(status) != "in_progress";
  return {{"type", "function_call"},
          {"id", "fc_" + meta.id.substr(5) + "_" + std::to_string(i)},
          {"call_id", ToolCallId(ChatMeta(meta), 0, i)},
          {"name", call.name},
          {"arguments", done ? call.arguments : ""},
          {"status", status}};
}

ojson OutputTextLogprob(const ResponsesMeta& meta, const TokenLogprob& lp) {
  return TokenLogprobWithTop(lp, meta.token_bytes);
}

ojson MessageLogprobs(const ResponsesMeta& meta, const CompletionResult& result,
                      const ResponsesOutput& out) {
  ojson lps = ojson::array();
  if (result.choices.empty()) return lps;
  size_t offset = 0;
  for (const TokenLogprob& lp : result.choices[0].logprobs) {
    if (offset >= out.text_begin + out.text.size()) break;
    if (offset >= out.text_begin) lps.push_back(OutputTextLogprob(meta, lp));
    offset += meta.token_bytes(lp.token).size();
  }
  return lps;
}

ojson ResponseObject(const ResponsesMeta& meta, const CompletionResult* result) {
  const ResponsesRequest& r = *meta.request;
  ojson j;
  j["id"] = meta.id;
  j["object"] = "response";
  j["created_at"] = meta.created;
  const bool length = result != nullptr && result->finish_reason == "length";
  j["status"] = result == nullptr ? "in_progress" : length ? "incomplete" : "completed";
  j["error"] = nullptr;
  j["incomplete_details"] = length ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr);
  j["instructions"] = r.instructions;
  j["max_output_tokens"] = r.max_output_tokens;
  j["model"] = meta.model;
  ojson output = ojson::array();
  std::optional<ResponsesOutput> out;
  if (result != nullptr) out = SplitOutput(meta, result->text);
  if (out) {
    if (!out->reasoning.empty()) {
      // Cut short inside the thinking, the reasoning item is the one cut.
      const bool cut = length && out->text.empty() && out->calls.empty();
      output.push_back(ReasoningItem(meta, out->reasoning, cut ? "incomplete" : "completed"));
    }
    // Cut short, the message is too (as OpenAI marks it).
    if (out->has_message) {
      const ojson logprobs = r.logprobs ? MessageLogprobs(meta, *result, *out) : ojson::array();
      output.push_back(
          MessageItem(meta, out->text, length ? "incomplete" : "completed", &logprobs));
    }
    for (size_t i = 0; i < out->calls.size(); ++i) {
      output.push_back(FunctionCallItem(meta, static_cast<int>(i), out->calls[i], "completed"));
    }
  }
  j["output"] = std::move(output);
  j["parallel_tool_calls"] = true;
  j["previous_response_id"] =
      r.previous_response_id.empty() ? ojson(nullptr) : ojson(r.previous_response_id);
  j["store"] = r.store;
  j["temperature"] = Or(r.temperature, 1.0);
  j["text"] = {{"format", Or(r.text_format, {{"type", "text"}})}};
  j["tool_choice"] = Or(r.tool_choice, "auto");
  j["tools"] = Or(r.tools, ojson::array());
  j["top_logprobs"] = r.top_logprobs;
  j["top_p"] = Or(r.top_p, 1.0);
  j["truncation"] = "disabled";
  j["metadata"] = Or(r.metadata, ojson::object());
  if (result == nullptr) {
    j["usage"] = nullptr;
  } else {
    const int output_tokens = result->completion_tokens();
    int reasoning_tokens = 0;
    if (meta.reasoning.split && meta.token_bytes) {
      reasoning_tokens = ReasoningTokens(result->tokens, meta.token_bytes, out->reasoning_end);
    }
    j["usage"] = {{"input_tokens", result->prompt_tokens},
                  {"input_tokens_details",
                   {{"cached_tokens", result->cached_tokens},
                    {"cache_write_tokens", result->cache_write_tokens()}}},
                  {"output_tokens", output_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
                  {"total_tokens", result->prompt_tokens + output_tokens}};
    // As the chat route's usage: present whenever the request pinned (a breakpoint's pin).
    if (result->pinned_tokens > 0 || result->pin_limited) {
      j["usage"]["pinned_tokens"] = result->pinned_tokens;
      j["usage"]["pin_limited"] = result->pin_limited;
    }
  }
  return j;
}

ojson AssistantMessage(const ResponsesMeta& meta, const CompletionResult& result) {
  const ResponsesOutput out = SplitOutput(meta, result.text);
  ojson m = {{"role", "assistant"}};
  // (With thinking, a turn of calls alone keeps "": Qwen3's template strips it as a string.)
  m["content"] = out.has_message         ? ojson(out.text)
                 : out.reasoning.empty() ? ojson(nullptr)
                                         : ojson("");
  // The thinking goes back to the template with the turn (Qwen3's renders it after a call).
  if (!out.reasoning.empty()) m["reasoning_content"] = out.reasoning;
  if (!out.calls.empty()) {
    m["tool_calls"] = ToolCallsJson(ChatMeta(meta), 0, out.calls);
  }
  return m;
}

std::string ResponsesEvent(const std::string& type, ojson data, int* sequence) {
  ojson j;
  j["type"] = type;
  j["sequence_number"] = (*sequence)++;
  for (auto& [key, value] : data.items()) j[key] = std::move(value);
  return "event: " + type + "\ndata: " + Dump(j) + "\n\n";
}

}  // namespace promptcache
