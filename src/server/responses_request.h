// OpenAI's Responses API request (POST /v1/responses) read as a chat completions request, so
// that one parser checks both: the Responses body is translated into a chat body (input items
// into messages, `instructions` into a system message, function tools and tool_choice into the
// chat shapes, `text.format` into `response_format`, `max_output_tokens` into
// `max_completion_tokens`) which ParseChatRequest then reads with the chat route's strictness
// (tool definitions, JSON schemas, sampling, extensions). What only the Responses API has
// (`previous_response_id`, `store`, the fields echoed in the response) is kept beside it.
// Pure functions, unit-testable without a server.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace promptcache {

struct ResponsesRequest {
  // The chat completions body the request amounts to; its "messages" hold only this request's
  // instructions and input: the server puts the stored conversation of previous_response_id
  // between them (SpliceHistory).
  nlohmann::ordered_json chat;
  // This request's input items as chat messages (what a later continuation replays).
  nlohmann::ordered_json input_messages = nlohmann::ordered_json::array();
  std::string previous_response_id;
  bool store = true;
  bool stream = false;
  // Echoed in the response object, as the client sent them (null when absent).
  nlohmann::ordered_json instructions, tools, tool_choice, text_format, max_output_tokens,
      temperature, top_p, metadata;
};

// Reads a Responses body; the error (a 400 in OpenAI's shape naming the field) or nullopt.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, ResponsesRequest* out);

// The chat body with `history` (the stored messages of the previous responses) after the
// instructions and before this request's input.
nlohmann::ordered_json SpliceHistory(const ResponsesRequest& r,
                                     const nlohmann::ordered_json& history);

}  // namespace promptcache
