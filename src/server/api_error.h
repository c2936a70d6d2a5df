// The server's one error type and error path. Every route, and every refusal before routing
// (authentication, an unknown URL, a body too large, a malformed request), answers with an
// ApiError written in the shape its route's clients read: its API flavour's (OpenAI's
// {"error": {...}}, Anthropic's {"type": "error", ...}, Ollama's {"error": "..."}). Route
// handlers send them through Call::Fail (server/call.h); parsers return them
// (server/*_request.h).
#pragma once

#include <string>

#include "core/status.h"

namespace promptcache {

// Whose API a route implements: decides the shape of its errors (Ollama's: {"error": "message"},
// what the ollama clients read).
enum class ApiFlavour { kOpenAi, kAnthropic, kOllama };

// An error with its HTTP status, as OpenAI describes one: {"message", "type", "param", "code"}.
// Anthropic's shape keeps the message and derives its type from the status.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("messages[2].content"), or "" for null
  std::string code;   // e.g. "model_not_found", or "" for null

  static ApiError BadRequest(std::string message, std::string param = "", std::string code = "");
};

ApiError MakeError(int http_status, std::string message, std::string type, std::string code = "",
                   std::string param = "");

// An engine or prompt-encoding Status as the error a client sees: 400 for invalid, out of range
// and unimplemented ("unsupported") input, 404 for what is not found, 503 ("overloaded", retry
// later) when the engine is busy, 500 otherwise. `param` names the field it concerns.
ApiError FromStatus(const Status& st, const std::string& param = "");

// The error's JSON body in `flavour`'s shape.
std::string ErrorBody(ApiFlavour flavour, const ApiError& error);

}  // namespace promptcache
