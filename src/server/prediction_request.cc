// The chat request's `prediction` (server/openai_request_parts.h): OpenAI's Predicted Outputs,
// the text the client expects the answer to be (the file being edited, say). The engine checks
// its tokens as drafts (EngineOptions::draft_max): the answer is the same with or without it.
#include <string>

#include "server/openai_request_parts.h"

namespace promptcache::openai_request {

MaybeError ReadPrediction(const json& obj, ApiRequest* out) {
  const json* v = Find(obj, "prediction");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_object()) return WrongType("prediction", "an object", *v);
  for (const auto& [key, value] : v->items()) {
    if (key != "type" && key != "content" && !value.is_null()) {
      return ApiError::BadRequest("'prediction." + key + "' is not supported by this server",
                                  "prediction." + key, "unsupported");
    }
  }
  const json* type = Find(*v, "type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "content") {
    return ApiError::BadRequest("'prediction.type' must be \"content\"", "prediction.type");
  }
  const json* content = Find(*v, "content");
  if (content == nullptr) {
    return ApiError::BadRequest("'prediction.content' is required", "prediction.content");
  }
  std::string text;
  PC_RETURN_IF_API_ERROR(json_fields::ReadStringOrObjects(
      *content, "prediction.content", "a string or an array of text parts", "an object", &text,
      [&](const json& part, const std::string& p, size_t) -> MaybeError {
        const json* t = Find(part, "type");
        if (t == nullptr || !t->is_string() || t->get<std::string>() != "text") {
          return ApiError::BadRequest("'" + p + ".type' must be \"text\"", p + ".type");
        }
        const json* s = Find(part, "text");
        if (s == nullptr || !s->is_string()) {
          return ApiError::BadRequest("'" + p + ".text' must be a string", p + ".text");
        }
        text += s->get<std::string>();  // OpenAI's parts are one text, concatenated
        return std::nullopt;
      }));
  if (text.size() > kMaxPredictionBytes) {
    return ApiError::BadRequest("'prediction.content' is " + std::to_string(text.size()) +
                                    " bytes, at most " + std::to_string(kMaxPredictionBytes) +
                                    " are allowed",
                                "prediction.content");
  }
  out->prediction = std::move(text);
  return std::nullopt;
}

}  // namespace promptcache::openai_request
