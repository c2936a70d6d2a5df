// The tool fields of a chat request: `tools` and `tool_choice`, assistant messages' `tool_calls`
// and `role: "tool"` messages, checked as the rest of openai_request.h checks a body (a 400
// naming the field, never an exception), and kept in the client's key order for the chat
// template (tool definitions are rendered with tojson, whose output follows that order).
//
// ApplyToolChoice runs once the model's tool-call format is known (server/tool_calls.h): tools
// for a template without a known format are refused, and tool_choice "required" or a named
// function becomes the request's grammar, so that the output is exactly one call.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace promptcache {

// The most tools a request may offer: OpenAI's limit, and Anthropic's.
inline constexpr size_t kMaxTools = 128;

// `tools` and `tool_choice` of `body` (the request object, keys in order) into *out.
std::optional<ApiError> ReadTools(const nlohmann::ordered_json& body, ApiRequest* out);

// The tool_choice a word names, "none", "auto" or `required` (OpenAI's "required", Anthropic's
// "any"); nullopt for any other word.
std::optional<ToolChoice> ToolChoiceWord(std::string_view word, std::string_view required);

// A message's `tool_calls` (assistant), `tool_call_id` and `name` (tool) into *out (whose role
// is read already); `param` is "messages[i]".
std::optional<ApiError> ReadMessageToolFields(const nlohmann::ordered_json& message,
                                              const std::string& param, ApiMessage* out);

// Once the format is known: a 400 when tools are offered for a template without one or with a
// modular prompt; for "required" or a named function, out->grammar forces one call (a 400 when
// another field constrains the output too, or a tool's parameters use an unsupported keyword).
std::optional<ApiError> ApplyToolChoice(ToolCallFormat format, ApiRequest* out);

}  // namespace promptcache
