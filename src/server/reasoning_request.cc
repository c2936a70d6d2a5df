// The chat request's reasoning fields (server/openai_request_parts.h): llama.cpp's and vLLM's
// reasoning_format and chat_template_kwargs, and OpenAI's reasoning_effort.
#include <string_view>

#include "server/openai_request_parts.h"

namespace promptcache::openai_request {
namespace {

// The variables the server itself gives every template (chat/chat_template.h): a client may
// not replace them.
constexpr std::string_view kServerVariables[] = {
    "messages",  "tools",           "add_generation_prompt", "bos_token",
    "eos_token", "raise_exception", "strftime_now"};

}  // namespace

MaybeError ReadTemplateKwargs(const json& v, const std::string& param,
                              nlohmann::ordered_json* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType(param, "an object of template variables", v);
  if (v.size() > kMaxTemplateKwargs) {
    return ApiError::BadRequest("'" + param + "' sets " + std::to_string(v.size()) +
                                    " variables, at most " + std::to_string(kMaxTemplateKwargs) +
                                    " are allowed",
                                param);
  }
  const std::string text = v.dump();
  if (text.size() > kMaxTemplateKwargsBytes) {
    return ApiError::BadRequest("'" + param + "' is " + std::to_string(text.size()) +
                                    " bytes of JSON, at most " +
                                    std::to_string(kMaxTemplateKwargsBytes) + " are allowed",
                                param);
  }
  for (const auto& [key, value] : v.items()) {
    for (std::string_view reserved : kServerVariables) {
      if (key == reserved) {
        return ApiError::BadRequest(
            "'" + param + "." + key + "' is a variable the server sets; it cannot be replaced",
            param + "." + key);
      }
    }
  }
  *out = nlohmann::ordered_json::parse(text);
  return std::nullopt;
}

MaybeError ReadReasoningFields(const json& obj, ApiRequest* out) {
  if (const json* v = Find(obj, "reasoning_format")) {
    if (!v->is_string()) return WrongType("reasoning_format", "a string", *v);
    const std::string f = v->get<std::string>();
    if (f == "none") {
      out->reasoning_split = false;
    } else if (f == "auto" || f == "deepseek") {
      out->reasoning_split = true;
    } else {
      return ApiError::BadRequest(
          "'reasoning_format' is '" + f + "': this server takes \"none\", \"auto\" or \"deepseek\"",
          "reasoning_format", "unsupported");
    }
  }
  if (const json* v = Find(obj, "chat_template_kwargs")) {
    PC_RETURN_IF_API_ERROR(ReadTemplateKwargs(*v, "chat_template_kwargs", &out->template_kwargs));
  }
  if (const json* v = Find(obj, "reasoning_effort")) {
    if (!v->is_string()) return WrongType("reasoning_effort", "a string", *v);
    const std::string e = v->get<std::string>();
    for (std::string_view known : {"none", "minimal", "low", "medium", "high"}) {
      if (e == known) {
        out->reasoning_effort = e;
        return std::nullopt;
      }
    }
    return ApiError::BadRequest(
        "'reasoning_effort' is '" + e + "': one of none, minimal, low, medium, high",
        "reasoning_effort");
  }
  return std::nullopt;
}

}  // namespace promptcache::openai_request
