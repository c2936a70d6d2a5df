#include "server/anthropic_request.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/json_fields.h"

namespace promptcache {
namespace {

using json_fields::Contains;
using json_fields::Find;
using json_fields::Guarded;
using json_fields::json;
using json_fields::MaybeError;
using json_fields::ParseObject;
using json_fields::ReadFloat;
using json_fields::ReadInt;
using json_fields::Unsupported;
using json_fields::WrongType;

// Top-level fields (MessagesFieldSupport). count_tokens reads a subset of the implemented ones.
constexpr std::string_view kImplemented[] = {"model",          "max_tokens", "messages", "system",
                                             "temperature",    "top_p",      "top_k",    "stream",
                                             "stop_sequences", "metadata"};
constexpr std::string_view kCountTokensFields[] = {"model", "messages", "system"};
// Meaningless here: the service tier of Anthropic's capacity.
constexpr std::string_view kIgnored[] = {"service_tier"};
// Accepted at the value that asks for nothing: no tools, thinking disabled.
constexpr std::string_view kOffValueOnly[] = {"tools", "tool_choice", "thinking"};

MaybeError CheckFields(const json& obj, bool count_tokens) {
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null()) continue;
    const FieldSupport s = MessagesFieldSupport(key);
    const bool ok = count_tokens
                        ? Contains(kCountTokensFields, key) || s == FieldSupport::kIgnored ||
                              s == FieldSupport::kOffValueOnly
                        : s != FieldSupport::kRefused;
    if (!ok) return Unsupported(key, "'" + key + "'");
  }
  return std::nullopt;
}

MaybeError ReadOffValues(const json& obj) {
  if (const json* tools = Find(obj, "tools")) {
    if (!tools->is_array() || !tools->empty()) return Unsupported("tools", "'tools' (tool use)");
  }
  if (const json* choice = Find(obj, "tool_choice")) {
    const json* type = choice->is_object() ? Find(*choice, "type") : nullptr;
    const bool off = type != nullptr && (*type == "auto" || *type == "none") && choice->size() == 1;
    if (!off) return Unsupported("tool_choice", "'tool_choice' other than auto or none");
  }
  if (const json* thinking = Find(obj, "thinking")) {
    const json* type = thinking->is_object() ? Find(*thinking, "type") : nullptr;
    if (type == nullptr || *type != "disabled" || thinking->size() != 1) {
      return Unsupported("thinking", "extended thinking ('thinking')");
    }
  }
  return std::nullopt;
}

// {"type": "ephemeral", "ttl": "5m" | "1h"}: the TTL in seconds.
MaybeError ReadCacheControl(const json& v, const std::string& param, double* ttl_seconds) {
  if (!v.is_object()) return WrongType(param, "an object", v);
  for (const auto& [key, value] : v.items()) {
    if (key != "type" && key != "ttl" && !value.is_null()) {
      return Unsupported(param + "." + key, "'" + param + "." + key + "'");
    }
  }
  const json* type = Find(v, "type");
  if (type == nullptr || *type != "ephemeral") {
    return ApiError::BadRequest("'" + param + ".type' must be \"ephemeral\"", param + ".type");
  }
  *ttl_seconds = 300;
  if (const json* ttl = Find(v, "ttl")) {
    if (*ttl == "1h") {
      *ttl_seconds = 3600;
    } else if (*ttl != "5m") {
      return ApiError::BadRequest("'" + param + ".ttl' must be \"5m\" or \"1h\"", param + ".ttl");
    }
  }
  return std::nullopt;
}

// One content block: its text appended to msg->content; a cache_control breakpoint recorded.
MaybeError ReadBlock(const json& block, const std::string& param, size_t message, ApiMessage* msg,
                     AnthropicRequest* out) {
  if (!block.is_object()) return WrongType(param, "an object (a content block)", block);
  const json* type = Find(block, "type");
  if (type == nullptr || !type->is_string()) {
    return ApiError::BadRequest("'" + param + ".type' must be a string", param + ".type");
  }
  if (*type != "text") {
    return Unsupported(param + ".type",
                       "content blocks of type '" + type->get<std::string>() + "' (only text)");
  }
  for (const auto& [key, value] : block.items()) {
    if (value.is_null() || key == "type" || key == "text" || key == "cache_control") continue;
    if (key == "citations" && value.is_array() && value.empty()) continue;
    return Unsupported(param + "." + key, "'" + param + "." + key + "'");
  }
  const json* text = Find(block, "text");
  if (text == nullptr || !text->is_string()) {
    return ApiError::BadRequest("'" + param + ".text' must be a string", param + ".text");
  }
  msg->content += text->get<std::string>();
  if (const json* cc = Find(block, "cache_control")) {
    AnthropicBreakpoint b;
    PC_RETURN_IF_API_ERROR(ReadCacheControl(*cc, param + ".cache_control", &b.ttl_seconds));
    if (out->breakpoints.size() == kMaxCacheBreakpoints) {
      return ApiError::BadRequest("at most 4 content blocks may have cache_control",
                                  param + ".cache_control");
    }
    b.message = message;
    b.content_end = msg->content.size();
    out->breakpoints.push_back(b);
  }
  return std::nullopt;
}

// A string, or an array of blocks (`allow_empty`: an empty string is a turn without text).
MaybeError ReadContent(const json& v, const std::string& param, size_t message, ApiMessage* msg,
                       AnthropicRequest* out) {
  if (v.is_string()) {
    msg->content = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(param, "a string or an array of content blocks", v);
  for (size_t i = 0; i < v.size(); ++i) {
    PC_RETURN_IF_API_ERROR(
        ReadBlock(v[i], param + "[" + std::to_string(i) + "]", message, msg, out));
  }
  return std::nullopt;
}

MaybeError ReadMessages(const json& obj, AnthropicRequest* out) {
  if (const json* system = Find(obj, "system")) {
    ApiMessage msg;
    msg.role = "system";
    PC_RETURN_IF_API_ERROR(ReadContent(*system, "system", 0, &msg, out));
    out->messages.push_back(std::move(msg));
  }
  const json* msgs = Find(obj, "messages");
  if (msgs == nullptr) return ApiError::BadRequest("'messages' is required", "messages");
  if (!msgs->is_array()) return WrongType("messages", "an array", *msgs);
  if (msgs->empty()) return ApiError::BadRequest("'messages' must not be empty", "messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return WrongType(p, "an object", m);
    for (const auto& [key, value] : m.items()) {
      if (!value.is_null() && key != "role" && key != "content") {
        return Unsupported(p + "." + key, "'" + p + "." + key + "'");
      }
    }
    const json* role = Find(m, "role");
    if (role == nullptr || !role->is_string() || (*role != "user" && *role != "assistant")) {
      return ApiError::BadRequest("'" + p +
                                      ".role' must be \"user\" or \"assistant\" (a system prompt "
                                      "is the top-level 'system' field)",
                                  p + ".role");
    }
    const json* content = Find(m, "content");
    if (content == nullptr) return ApiError::BadRequest("'" + p + ".content' is required", p);
    ApiMessage msg;
    msg.role = role->get<std::string>();
    PC_RETURN_IF_API_ERROR(ReadContent(*content, p + ".content", out->messages.size(), &msg, out));
    out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

// An integer in [lo, hi]; `required` says whether its absence is an error.
MaybeError ReadInt(const json& obj, const char* key, int64_t lo, int64_t hi, bool required,
                   int* out) {
  if (required && Find(obj, key) == nullptr) {
    return ApiError::BadRequest("'" + std::string(key) + "' is required", key);
  }
  std::optional<int64_t> v;
  PC_RETURN_IF_API_ERROR(json_fields::ReadInt(obj, key, lo, hi, &v));
  if (v) *out = static_cast<int>(*v);
  return std::nullopt;
}

MaybeError ReadSamplingAndStops(const json& obj, AnthropicRequest* out) {
  SamplingParams& s = out->sampling;
  s.temperature = 1.0f;  // Anthropic's defaults; the extensions of the sampler stay off
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "temperature", 0, 1, &s.temperature));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "top_p", 0, 1, &s.top_p));
  if (s.top_p == 0) {  // only the most likely token is left
    s.temperature = 0;
    s.top_p = 1;
  }
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "top_k", 0, 1 << 30, false, &s.top_k));
  if (Status st = s.Validate(); !st.ok()) return ApiError::BadRequest(st.message());
  if (const json* stops = Find(obj, "stop_sequences")) {
    if (!stops->is_array()) return WrongType("stop_sequences", "an array of strings", *stops);
    for (size_t i = 0; i < stops->size(); ++i) {
      const json& v = (*stops)[i];
      if (!v.is_string())
        return WrongType("stop_sequences[" + std::to_string(i) + "]", "a string", v);
      if (!v.get<std::string>().empty()) out->stop_sequences.push_back(v.get<std::string>());
    }
  }
  if (const json* stream = Find(obj, "stream")) {
    if (!stream->is_boolean()) return WrongType("stream", "a boolean", *stream);
    out->stream = stream->get<bool>();
  }
  if (const json* metadata = Find(obj, "metadata")) {
    if (!metadata->is_object()) return WrongType("metadata", "an object", *metadata);
    for (const auto& [key, value] : metadata->items()) {
      if (key == "user_id" && (value.is_string() || value.is_null())) continue;
      return Unsupported("metadata." + key, "'metadata." + key + "'");
    }
  }
  return std::nullopt;
}

MaybeError ReadModel(const json& obj, std::string* out) {
  const json* v = Find(obj, "model");
  if (v == nullptr) return ApiError::BadRequest("'model' is required", "model");
  if (!v->is_string()) return WrongType("model", "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

MaybeError Parse(std::string_view body, const RequestLimits* limits, AnthropicRequest* out) {
  *out = AnthropicRequest();
  json obj;
  PC_RETURN_IF_API_ERROR(ParseObject(body, &obj));
  PC_RETURN_IF_API_ERROR(CheckFields(obj, limits == nullptr));
  PC_RETURN_IF_API_ERROR(ReadModel(obj, &out->model));
  PC_RETURN_IF_API_ERROR(ReadOffValues(obj));
  PC_RETURN_IF_API_ERROR(ReadMessages(obj, out));
  if (limits == nullptr) return std::nullopt;  // count_tokens
  const int64_t hi = limits->max_tokens_limit > 0 ? limits->max_tokens_limit : (1 << 30);
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "max_tokens", 1, hi, true, &out->max_tokens));
  return ReadSamplingAndStops(obj, out);
}

}  // namespace

FieldSupport MessagesFieldSupport(std::string_view field) {
  if (Contains(kImplemented, field)) return FieldSupport::kImplemented;
  if (Contains(kIgnored, field)) return FieldSupport::kIgnored;
  if (Contains(kOffValueOnly, field)) return FieldSupport::kOffValueOnly;
  return FieldSupport::kRefused;
}

std::optional<ApiError> ParseMessagesRequest(std::string_view body, const RequestLimits& limits,
                                             AnthropicRequest* out) {
  return Guarded([&] { return Parse(body, &limits, out); });
}

std::optional<ApiError> ParseCountTokensRequest(std::string_view body, AnthropicRequest* out) {
  return Guarded([&] { return Parse(body, nullptr, out); });
}

Result<AnthropicPrompt> BuildMessagesPrompt(const PromptEncoder& encoder,
                                            const AnthropicRequest& request, double ttl_scale,
                                            size_t max_tokens) {
  AnthropicPrompt out;
  PC_ASSIGN_OR_RETURN(BuiltPrompt whole,
                      encoder.FromMessages(request.messages,
                                           /*add_generation_prompt=*/true, nullptr, max_tokens));
  out.tokens = std::move(whole.tokens);
  for (const AnthropicBreakpoint& b : request.breakpoints) {
    // The conversation cut at the end of the block, rendered: the tokens it shares with the
    // whole prompt are the breakpoint's prefix (as PromptEncoder finds a chat breakpoint's).
    std::vector<ApiMessage> prefix(request.messages.begin(),
                                   request.messages.begin() + b.message + 1);
    prefix.back().content.resize(b.content_end);
    Result<BuiltPrompt> cut = encoder.FromMessages(prefix, /*add_generation_prompt=*/false);
    // A template may refuse a conversation cut short: that breakpoint then pins nothing.
    if (!cut.ok()) continue;
    const size_t n = std::min(cut->tokens.size(), out.tokens.size());
    const auto mismatch =
        std::mismatch(cut->tokens.begin(), cut->tokens.begin() + n, out.tokens.begin());
    const int covered = static_cast<int>(mismatch.first - cut->tokens.begin());
    if (covered > 0) out.pins.push_back({covered, b.ttl_seconds * ttl_scale});
  }
  return out;
}

}  // namespace promptcache
