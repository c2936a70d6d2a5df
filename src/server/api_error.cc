#include "server/api_error.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "server/anthropic_response.h"
#include "server/json_fields.h"
#include "server/openai_response.h"

namespace promptcache {

ApiError ApiError::BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError MakeError(int http_status, std::string message, std::string type, std::string code,
                   std::string param) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

ApiError FromStatus(const Status& st, const std::string& param) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return ApiError::BadRequest(st.message(), param);
    case StatusCode::kNotFound:
      return MakeError(404, st.message(), "invalid_request_error", "not_found", param);
    case StatusCode::kResourceExhausted:
      return MakeError(503, st.message() + " (the server is busy; retry later)", "server_error",
                       "overloaded");
    case StatusCode::kUnimplemented:
      return ApiError::BadRequest(st.message(), param, "unsupported");
    default:
      return MakeError(500, st.message(), "server_error");
  }
}

std::string ErrorBody(ApiFlavour flavour, const ApiError& error) {
  switch (flavour) {
    case ApiFlavour::kAnthropic:
      return AnthropicErrorBody(error);
    case ApiFlavour::kOllama:  // Ollama's clients read one string
      return Dump(nlohmann::ordered_json{{"error", error.message}});
    default:
      return ErrorBody(error);
  }
}

}  // namespace promptcache
