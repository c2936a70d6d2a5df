#include "server/anthropic_response.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "server/json_fields.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

std::string Event(const char* name, const ojson& data) {
  return std::string("event: ") + name + "\ndata: " + Dump(data) + "\n\n";
}

template <typename T>
ojson OrNull(const std::optional<T>& v) {
  return v ? ojson(*v) : ojson();
}

ojson UsageJson(const MessagesUsage& u) {
  return {{"input_tokens", u.input_tokens},
          {"cache_creation_input_tokens", u.cache_creation_input_tokens},
          {"cache_read_input_tokens", u.cache_read_input_tokens},
          {"output_tokens", u.output_tokens}};
}

const char* ErrorType(int status) {
  static constexpr std::pair<int, const char*> kTypes[] = {
      {401, "authentication_error"}, {403, "permission_error"}, {404, "not_found_error"},
      {413, "request_too_large"},    {429, "rate_limit_error"}, {503, "overloaded_error"},
      {529, "overloaded_error"}};
  for (const auto& [code, type] : kTypes) {
    if (code == status) return type;
  }
  return status >= 500 ? "api_error" : "invalid_request_error";
}

}  // namespace

MessagesUsage UsageOf(const CompletionResult& r) {
  MessagesUsage u;
  u.cache_read_input_tokens = r.cached_tokens;
  u.cache_creation_input_tokens = r.cache_write_tokens();
  u.input_tokens = r.prompt_tokens - u.cache_read_input_tokens - u.cache_creation_input_tokens;
  u.output_tokens = r.completion_tokens();
  return u;
}

StopInfo StopOf(const CompletionResult& r, const std::string& generated,
                const std::vector<std::string>& stop_sequences) {
  StopInfo s;
  if (r.finish_reason == "length") {
    s.reason = "max_tokens";
  } else if (r.finish_reason == "stop") {
    s.reason = "end_turn";
    // The engine stops at the first stop string to appear: the earliest one in the generated
    // text (the shorter of two that start together: it is complete first). Text that ended on
    // an end-of-turn token holds none, or it would have stopped there.
    size_t best = std::string::npos;
    for (const std::string& seq : stop_sequences) {
      const size_t at = generated.find(seq);
      if (at == std::string::npos) continue;
      if (at < best || (at == best && seq.size() < s.sequence->size())) {
        best = at;
        s.reason = "stop_sequence";
        s.sequence = seq;
      }
    }
  }
  return s;
}

std::string MessageBody(const MessageMeta& meta, const CompletionResult& result,
                        const StopInfo& stop) {
  ojson j;
  j["id"] = meta.id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = meta.model;
  j["content"] = ojson::array({ojson{{"type", "text"}, {"text", result.text}}});
  j["stop_reason"] = OrNull(stop.reason);
  j["stop_sequence"] = OrNull(stop.sequence);
  j["usage"] = UsageJson(UsageOf(result));
  return Dump(j);
}

std::string ThinkingSignature(std::string_view thinking) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : thinking) h = (h ^ c) * 1099511628211ull;
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return std::string("pc1-") + buf;
}

std::string MessageBody(const MessageMeta& meta, const CompletionResult& result,
                        const StopInfo& stop, const std::string& text,
                        const std::vector<ToolUseBlock>& tool_uses,
                        const std::optional<ThinkingBlock>& thinking) {
  ojson j = ojson::parse(MessageBody(meta, result, stop));
  ojson content = ojson::array();
  if (thinking) {
    content.push_back({{"type", "thinking"},
                       {"thinking", thinking->thinking},
                       {"signature", thinking->signature}});
  }
  if (!text.empty() || (tool_uses.empty() && !thinking)) {
    content.push_back({{"type", "text"}, {"text", text}});
  }
  for (const ToolUseBlock& c : tool_uses) {
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", c.input}});
  }
  j["content"] = std::move(content);
  return Dump(j);
}

std::string MessageStartEvent(const MessageMeta& meta, int prompt_tokens) {
  ojson m;
  m["id"] = meta.id;
  m["type"] = "message";
  m["role"] = "assistant";
  m["model"] = meta.model;
  m["content"] = ojson::array();
  m["stop_reason"] = nullptr;
  m["stop_sequence"] = nullptr;
  MessagesUsage u;
  u.input_tokens = prompt_tokens;
  m["usage"] = UsageJson(u);
  return Event("message_start", ojson{{"type", "message_start"}, {"message", std::move(m)}});
}

std::string ContentBlockStartEvent(int index) {
  return Event("content_block_start",
               ojson{{"type", "content_block_start"},
                     {"index", index},
                     {"content_block", ojson{{"type", "text"}, {"text", ""}}}});
}

std::string ThinkingBlockStartEvent(int index) {
  return Event(
      "content_block_start",
      ojson{{"type", "content_block_start"},
            {"index", index},
            {"content_block", ojson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}});
}

std::string ThinkingDeltaEvent(const std::string& text, int index) {
  return Event("content_block_delta",
               ojson{{"type", "content_block_delta"},
                     {"index", index},
                     {"delta", ojson{{"type", "thinking_delta"}, {"thinking", text}}}});
}

std::string SignatureDeltaEvent(const std::string& signature, int index) {
  return Event("content_block_delta",
               ojson{{"type", "content_block_delta"},
                     {"index", index},
                     {"delta", ojson{{"type", "signature_delta"}, {"signature", signature}}}});
}

std::string PingEvent() { return Event("ping", ojson{{"type", "ping"}}); }

std::string TextDeltaEvent(const std::string& text, int index) {
  return Event("content_block_delta",
               ojson{{"type", "content_block_delta"},
                     {"index", index},
                     {"delta", ojson{{"type", "text_delta"}, {"text", text}}}});
}

std::string ContentBlockStopEvent(int index) {
  return Event("content_block_stop", ojson{{"type", "content_block_stop"}, {"index", index}});
}

std::string ToolUseEvents(int index, const ToolUseBlock& call) {
  std::string out =
      Event("content_block_start", ojson{{"type", "content_block_start"},
                                         {"index", index},
                                         {"content_block", ojson{{"type", "tool_use"},
                                                                 {"id", call.id},
                                                                 {"name", call.name},
                                                                 {"input", ojson::object()}}}});
  // The input's text in two deltas, as Anthropic streams it in pieces: clients concatenate them.
  const std::string json = Dump(call.input);
  const size_t half = json.size() / 2;
  for (const std::string& part : {json.substr(0, half), json.substr(half)}) {
    out += Event("content_block_delta",
                 ojson{{"type", "content_block_delta"},
                       {"index", index},
                       {"delta", ojson{{"type", "input_json_delta"}, {"partial_json", part}}}});
  }
  return out + ContentBlockStopEvent(index);
}

std::string MessageEndEvents(const CompletionResult& result, const StopInfo& stop) {
  return ContentBlockStopEvent(0) + MessageDeltaEvents(result, stop);
}

std::string MessageDeltaEvents(const CompletionResult& result, const StopInfo& stop) {
  std::string out;
  out += Event("message_delta", ojson{{"type", "message_delta"},
                                      {"delta", ojson{{"stop_reason", OrNull(stop.reason)},
                                                      {"stop_sequence", OrNull(stop.sequence)}}},
                                      {"usage", UsageJson(UsageOf(result))}});
  out += Event("message_stop", ojson{{"type", "message_stop"}});
  return out;
}

std::string AnthropicErrorBody(const ApiError& error) {
  return Dump(
      ojson{{"type", "error"},
            {"error", ojson{{"type", ErrorType(error.http_status)}, {"message", error.message}}}});
}

std::string MessagesErrorEvent(const ApiError& error) {
  return "event: error\ndata: " + AnthropicErrorBody(error) + "\n\n";
}

}  // namespace promptcache
