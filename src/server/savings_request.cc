// ParseSavingsBody (server/savings_api.h), apart from the measurements: it needs no engine, so
// that it is in pc_server_api and the fuzz build reaches it (fuzz/routes_fuzz.cc).
#include "server/savings_api.h"

#include "server/json_fields.h"

namespace promptcache {

std::optional<ApiError> ParseSavingsBody(std::string_view body, SavingsRequest* out) {
  *out = SavingsRequest{};
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::nullopt;
  if (std::optional<ApiError> e = json_fields::CheckNesting(body)) return e;
  const nlohmann::json obj = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return ApiError::BadRequest("the request body is not valid JSON");
  if (!obj.is_object()) return ApiError::BadRequest("the request body must be a JSON object");
  for (const auto& [key, value] : obj.items()) {
    int* field = key == "max_tokens"   ? &out->max_tokens
                 : key == "max_prompt" ? &out->max_prompt
                                       : nullptr;
    if (field == nullptr) {
      return ApiError::BadRequest(
          "unknown field '" + key + "' (expected 'max_tokens' and 'max_prompt')", key);
    }
    const int lo = key == "max_tokens" ? 1 : 16;
    const int hi = key == "max_tokens" ? kMaxSavingsTokens : kMaxSavingsPrompt;
    if (!value.is_number_integer() || value.get<int64_t>() < lo || value.get<int64_t>() > hi) {
      return ApiError::BadRequest("'" + key + "' must be an integer from " + std::to_string(lo) +
                                      " to " + std::to_string(hi),
                                  key);
    }
    *field = value.get<int>();
  }
  return std::nullopt;
}

}  // namespace promptcache
