// Anthropic's extended thinking in a Messages request (server/anthropic_request_parts.h): the
// `thinking` field, which switches a template's thinking, and an assistant's thinking blocks,
// which become its reasoning_content.
#include "server/anthropic_request_parts.h"

namespace promptcache::anthropic_request {

// count_tokens reads `thinking` too (it changes the prompt), but not the budget's bound.
MaybeError ReadThinking(const json& obj, AnthropicRequest* out, bool check_budget) {
  const json* t = Find(obj, "thinking");
  if (t == nullptr) return std::nullopt;
  if (!t->is_object()) return WrongType("thinking", "an object", *t);
  const json* type = Find(*t, "type");
  if (type == nullptr || !type->is_string()) {
    return ApiError::BadRequest("'thinking.type' must be a string", "thinking.type");
  }
  if (*type == "disabled") {
    PC_RETURN_IF_API_ERROR(OnlyKeys(*t, "thinking", {"type"}));
    out->thinking = false;
  } else if (*type == "adaptive") {
    PC_RETURN_IF_API_ERROR(OnlyKeys(*t, "thinking", {"type", "display"}));
    if (const json* d = Find(*t, "display"); d != nullptr && *d != "summarized") {
      return Unsupported("thinking.display", "'thinking.display' other than \"summarized\"");
    }
    out->thinking = true;
  } else if (*type == "enabled") {
    PC_RETURN_IF_API_ERROR(OnlyKeys(*t, "thinking", {"type", "budget_tokens"}));
    std::optional<int64_t> budget;
    PC_RETURN_IF_API_ERROR(json_fields::ReadInt(*t, "budget_tokens", 1024, 1 << 30, &budget));
    if (!budget) {
      return ApiError::BadRequest("'thinking.budget_tokens' is required (at least 1024)",
                                  "thinking.budget_tokens");
    }
    if (check_budget && *budget >= out->max_tokens) {
      return ApiError::BadRequest("'thinking.budget_tokens' must be less than 'max_tokens'",
                                  "thinking.budget_tokens");
    }
    out->thinking = true;
    out->thinking_budget = static_cast<int>(*budget);
  } else {
    return Unsupported("thinking.type", "thinking of type '" + type->get<std::string>() + "'");
  }
  return std::nullopt;
}

// An assistant's thinking block: its text joins the message's reasoning_content (the template's
// field for earlier thinking). The signature is not checked (docs/server.md); a redacted block's
// data cannot be read back and is dropped.
MaybeError ReadThinkingBlock(const json& block, const std::string& param, ApiMessage* msg) {
  if (block["type"] == "redacted_thinking") return OnlyKeys(block, param, {"type", "data"});
  PC_RETURN_IF_API_ERROR(OnlyKeys(block, param, {"type", "thinking", "signature"}));
  const json* text = Find(block, "thinking");
  if (text == nullptr || !text->is_string()) {
    return ApiError::BadRequest("'" + param + ".thinking' must be a string", param + ".thinking");
  }
  std::string joined = msg->reasoning_content.value_or("");
  if (!joined.empty()) joined += "\n";
  msg->reasoning_content = joined + text->get<std::string>();
  return std::nullopt;
}

}  // namespace promptcache::anthropic_request
