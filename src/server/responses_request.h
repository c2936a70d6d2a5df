// OpenAI's Responses API request (POST /v1/responses) read as a chat completions request, so
// that one parser checks both: the Responses body is translated into a chat body (input items
// into messages, `instructions` into a system message, function tools and tool_choice into the
// chat shapes, `text.format` into `response_format`, `max_output_tokens` into
// `max_completion_tokens`) which ParseChatRequest then reads with the chat route's strictness
// (tool definitions, JSON schemas, sampling, extensions). What only the Responses API has
// (`previous_response_id`, `store`, the fields echoed in the response) is kept beside it.
// Pure functions, unit-testable without a server.
#pragma once

#include <map>
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
  // The input as Responses items, in order (GET /v1/responses/{id}/input_items): a string input
  // is one user message; a message's string content becomes one input_text (output_text for an
  // assistant's) part. Items keep the id the client gave; the route gives the others one.
  nlohmann::ordered_json input_items = nlohmann::ordered_json::array();
  std::string previous_response_id;
  bool store = true;
  bool stream = false;
  // include ["reasoning.encrypted_content"]: reasoning items carry their text as
  // kReasoningContentPrefix + base64 (not encrypted: this server has nothing to hide from the
  // client whose model wrote it), which reads back as the reasoning when sent again.
  bool encrypted_reasoning = false;
  // include ["message.output_text.logprobs"], or top_logprobs > 0: the message's tokens'
  // log-probabilities, with top_logprobs (0 to 20) alternatives each.
  bool logprobs = false;
  int top_logprobs = 0;
  // Echoed in the response object, as the client sent them (null when absent).
  nlohmann::ordered_json instructions, tools, tool_choice, text_format, max_output_tokens,
      temperature, top_p, metadata;
};

// What a reasoning item's encrypted_content starts with on this server (then the base64 of the
// reasoning text).
inline constexpr std::string_view kReasoningContentPrefix = "promptcache.reasoning.v1:";
// The encrypted_content for `text`, and the text back (nullopt: not one of this server's).
std::string ReasoningContentBlob(std::string_view text);
std::optional<std::string> ReasoningFromBlob(std::string_view blob);

// Reads a Responses body; the error (a 400 in OpenAI's shape naming the field) or nullopt.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, ResponsesRequest* out);

// The chat body with `history` (the stored messages of the previous responses) after the
// instructions and before this request's input.
nlohmann::ordered_json SpliceHistory(const ResponsesRequest& r,
                                     const nlohmann::ordered_json& history);

// GET /v1/responses/{id}/input_items: `items` (in input order, each with an id) as OpenAI's list
// object {"object": "list", "data", "first_id", "last_id", "has_more"}, paged by the query's
// `limit` (1 to 100, default 20), `order` ("asc", or "desc": the default, newest first) and
// `after` (an item id: the page starts after it). `include` is accepted and has no effect. The
// error: a 400 naming the bad parameter (an unknown one included).
std::optional<ApiError> InputItemsPage(const nlohmann::ordered_json& items,
                                       const std::multimap<std::string, std::string>& query,
                                       nlohmann::ordered_json* out);

}  // namespace promptcache
