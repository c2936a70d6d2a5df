// Anthropic's extended thinking in a Messages request (server/anthropic_request_parts.h): the
// `thinking` field, which switches a template's thinking, `output_config` (the reasoning effort
// and the answer's JSON schema), and an assistant's thinking blocks, which become its
// reasoning_content.
#include <algorithm>
#include <iterator>

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

MaybeError ReadOutputConfig(const json& obj, const nlohmann::ordered_json& ordered,
                            AnthropicRequest* out, bool for_count) {
  const json* c = Find(obj, "output_config");
  if (c == nullptr) return std::nullopt;
  if (!c->is_object()) return WrongType("output_config", "an object", *c);
  PC_RETURN_IF_API_ERROR(OnlyKeys(*c, "output_config", {"effort", "format"}));
  if (const json* e = Find(*c, "effort")) {
    static constexpr std::string_view kLevels[] = {"low", "medium", "high", "xhigh", "max"};
    if (!e->is_string() || std::find(std::begin(kLevels), std::end(kLevels),
                                     e->get<std::string>()) == std::end(kLevels)) {
      return ApiError::BadRequest(
          "'output_config.effort' must be \"low\", \"medium\", \"high\", \"xhigh\" or \"max\"",
          "output_config.effort");
    }
    out->effort = e->get<std::string>();
  }
  const json* f = Find(*c, "format");
  if (f == nullptr || for_count) return std::nullopt;
  if (!f->is_object()) return WrongType("output_config.format", "an object", *f);
  PC_RETURN_IF_API_ERROR(OnlyKeys(*f, "output_config.format", {"type", "schema"}));
  if (Find(*f, "type") == nullptr || (*f)["type"] != "json_schema") {
    return ApiError::BadRequest("'output_config.format.type' must be \"json_schema\"",
                                "output_config.format.type");
  }
  const json* schema = Find(*f, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return ApiError::BadRequest("'output_config.format.schema' must be a JSON schema (an object)",
                                "output_config.format.schema");
  }
  const std::string text = ordered.is_object()
                               ? ordered.at("output_config").at("format").at("schema").dump()
                               : schema->dump();
  return CompileJsonSchema(text, "output_config.format.schema", &out->output_format);
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
