#include "server/responses_request.h"

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <vector>

#include "core/base64.h"
#include "server/json_fields.h"

namespace promptcache {
namespace {

using json_fields::Find;
using json_fields::Guarded;
using json_fields::MaybeError;
using json_fields::Unsupported;
using json_fields::WrongType;
using ojson = nlohmann::ordered_json;

// Responses fields with no meaning on this server, accepted at any value.
constexpr std::string_view kIgnoredKeys[] = {"metadata",          "user",
                                             "service_tier",      "prompt_cache_key",
                                             "safety_identifier", "parallel_tool_calls",
                                             "stream_options"};
// Chat completions fields that are not part of the Responses API (the Responses spelling, or
// nothing, replaces them): a 400 rather than a silent second meaning.
constexpr std::string_view kChatOnly[] = {"messages",
                                          "max_tokens",
                                          "max_completion_tokens",
                                          "response_format",
                                          "n",
                                          "logprobs",
                                          "echo",
                                          "stop",
                                          "functions",
                                          "function_call",
                                          "best_of",
                                          "prompt",
                                          "schema",
                                          "modules",
                                          "pml",
                                          "evaluate",
                                          "positions",
                                          "recompute"};

MaybeError OnlyKeys(const ojson& obj, const std::string& param,
                    std::initializer_list<std::string_view> keys) {
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null() || std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    return ApiError::BadRequest("'" + param + "." + key + "' is not supported by this server",
                                param + "." + key, "unsupported");
  }
  return std::nullopt;
}

const ojson* String(const ojson& obj, const char* key) {
  const ojson* v = Find(obj, key);
  return v != nullptr && v->is_string() ? v : nullptr;
}

// A message item's content: a string, or input_text / output_text parts.
MaybeError ReadContent(const ojson& content, const std::string& p, ojson* out) {
  if (content.is_string()) {
    *out = content;
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(p, "a string or an array of content parts", content);
  *out = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string pp = p + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return WrongType(pp, "an object", part);
    const ojson* type = String(part, "type");
    if (type == nullptr) return ApiError::BadRequest("'" + pp + ".type' must be a string", pp);
    const std::string t = type->get<std::string>();
    if (t != "input_text" && t != "output_text") {
      return ApiError::BadRequest(
          "content parts of type '" + t + "' are not supported (only input_text and output_text)",
          pp + ".type", "unsupported");
    }
    PC_RETURN_IF_API_ERROR(
        OnlyKeys(part, pp, {"type", "text", "annotations", "logprobs", "prompt_cache_breakpoint"}));
    const ojson* text = String(part, "text");
    if (text == nullptr) return ApiError::BadRequest("'" + pp + ".text' must be a string", pp);
    out->push_back({{"type", "text"}, {"text", *text}});
    // OpenAI's explicit cache breakpoint, as the chat route reads it on a text part.
    if (const ojson* b = Find(part, "prompt_cache_breakpoint")) {
      if (*b != ojson{{"mode", "explicit"}}) {
        return ApiError::BadRequest(
            "'" + pp + ".prompt_cache_breakpoint' must be {\"mode\": \"explicit\"}",
            pp + ".prompt_cache_breakpoint");
      }
      out->back()["prompt_cache_breakpoint"] = *b;
    }
  }
  return std::nullopt;
}

// Appends a function_call item to the assistant turn it belongs to (the last message when that
// is an assistant's, else a new one).
MaybeError AddFunctionCall(const ojson& item, const std::string& p, ojson* messages) {
  PC_RETURN_IF_API_ERROR(
      OnlyKeys(item, p, {"type", "id", "call_id", "name", "arguments", "status"}));
  for (const char* key : {"call_id", "name", "arguments"}) {
    if (String(item, key) == nullptr) {
      return ApiError::BadRequest("'" + p + "." + key + "' must be a string", p + "." + key);
    }
  }
  if (messages->empty() || messages->back()["role"] != "assistant") {
    messages->push_back({{"role", "assistant"}, {"content", nullptr}});
  }
  ojson& turn = messages->back();
  if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
  turn["tool_calls"].push_back(
      {{"id", item["call_id"]},
       {"type", "function"},
       {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
  return std::nullopt;
}

// The name of the call `call_id` among the messages so far ("" when none names it).
std::string CallName(const ojson& messages, const std::string& call_id) {
  for (const ojson& m : messages) {
    if (!m.contains("tool_calls")) continue;
    for (const ojson& c : m["tool_calls"]) {
      if (c["id"] == call_id) return c["function"]["name"].get<std::string>();
    }
  }
  return "";
}

// A reasoning item (as this server answers it, or OpenAI's with summaries only) sent back: its
// text becomes the reasoning_content of the assistant turn it opens, which the message or
// function_call items after it complete, as the chat route takes an assistant's thinking.
MaybeError AddReasoning(const ojson& item, const std::string& p, ojson* messages) {
  PC_RETURN_IF_API_ERROR(
      OnlyKeys(item, p, {"type", "id", "summary", "content", "encrypted_content", "status"}));
  std::string text;
  for (const auto& [key, part_type] :
       {std::pair{"content", "reasoning_text"}, std::pair{"summary", "summary_text"}}) {
    const ojson* parts = Find(item, key);
    if (parts == nullptr || parts->is_null()) continue;
    const std::string pp = p + "." + key;
    if (!parts->is_array()) return WrongType(pp, "an array", *parts);
    if (!text.empty()) continue;  // the full thinking when given, else the summaries
    for (size_t i = 0; i < parts->size(); ++i) {
      const ojson& part = (*parts)[i];
      const std::string ip = pp + "[" + std::to_string(i) + "]";
      const ojson* type = String(part, "type");
      const ojson* t = String(part, "text");
      if (type == nullptr || *type != part_type || t == nullptr) {
        return ApiError::BadRequest(
            "'" + ip + "' must be {\"type\": \"" + part_type + "\", \"text\": ...}", ip);
      }
      text += (text.empty() ? "" : "\n\n") + t->get<std::string>();
    }
  }
  // Neither: this server's encrypted_content carries it (another's cannot be read: no text).
  if (const ojson* blob = Find(item, "encrypted_content"); text.empty() && blob != nullptr) {
    if (!blob->is_string()) return WrongType(p + ".encrypted_content", "a string", *blob);
    text = ReasoningFromBlob(blob->get<std::string>()).value_or("");
  }
  messages->push_back({{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", text}});
  return std::nullopt;
}

// Whether the last of `messages` is an assistant turn a reasoning item opened and nothing has
// completed yet.
bool OpenedByReasoning(const ojson& messages) {
  if (messages.empty()) return false;
  const ojson& m = messages.back();
  return m["role"] == "assistant" && m.contains("reasoning_content") && m["content"].is_null() &&
         !m.contains("tool_calls");
}

MaybeError AddItem(const ojson& item, const std::string& p, const ojson& history, ojson* messages) {
  if (!item.is_object()) return WrongType(p, "an object", item);
  const ojson* type = Find(item, "type");
  if (type != nullptr && !type->is_string()) return WrongType(p + ".type", "a string", *type);
  const std::string t = type != nullptr ? type->get<std::string>() : "message";
  if (t == "function_call") return AddFunctionCall(item, p, messages);
  if (t == "reasoning") return AddReasoning(item, p, messages);
  if (t == "function_call_output") {
    PC_RETURN_IF_API_ERROR(OnlyKeys(item, p, {"type", "id", "call_id", "output", "status"}));
    const ojson* call_id = String(item, "call_id");
    if (call_id == nullptr) {
      return ApiError::BadRequest("'" + p + ".call_id' must be a string", p + ".call_id");
    }
    const ojson* output = Find(item, "output");
    if (output == nullptr) return ApiError::BadRequest("'" + p + ".output' is required", p);
    ojson content;
    PC_RETURN_IF_API_ERROR(ReadContent(*output, p + ".output", &content));
    ojson m = {{"role", "tool"}, {"tool_call_id", *call_id}, {"content", content}};
    std::string name = CallName(*messages, call_id->get<std::string>());
    if (name.empty()) name = CallName(history, call_id->get<std::string>());
    if (!name.empty()) m["name"] = name;
    messages->push_back(std::move(m));
    return std::nullopt;
  }
  if (t != "message") {
    return ApiError::BadRequest("input items of type '" + t +
                                    "' are not supported (message, reasoning, function_call "
                                    "and function_call_output are)",
                                p + ".type", "unsupported");
  }
  PC_RETURN_IF_API_ERROR(OnlyKeys(item, p, {"type", "id", "role", "content", "status"}));
  const ojson* role = String(item, "role");
  if (role == nullptr) return ApiError::BadRequest("'" + p + ".role' must be a string", p);
  const ojson* content = Find(item, "content");
  if (content == nullptr) return ApiError::BadRequest("'" + p + ".content' is required", p);
  ojson c;
  PC_RETURN_IF_API_ERROR(ReadContent(*content, p + ".content", &c));
  if (*role == "assistant" && OpenedByReasoning(*messages)) {
    messages->back()["content"] = std::move(c);
  } else {
    messages->push_back({{"role", *role}, {"content", std::move(c)}});
  }
  return std::nullopt;
}

// Function tools into the chat shape: {"type": "function", "function": {...}}.
MaybeError ReadTools(const ojson& tools, ojson* out) {
  if (!tools.is_array()) return WrongType("tools", "an array", tools);
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return WrongType(p, "an object", t);
    const ojson* type = String(t, "type");
    if (type == nullptr || *type != "function") {
      return ApiError::BadRequest(
          "'" + p + ".type' must be \"function\" (built-in tools are not supported)", p + ".type",
          "unsupported");
    }
    PC_RETURN_IF_API_ERROR(OnlyKeys(t, p, {"type", "name", "description", "parameters", "strict"}));
    ojson f = ojson::object();
    for (const char* key : {"name", "description", "parameters", "strict"}) {
      if (const ojson* v = Find(t, key)) f[key] = *v;
    }
    out->push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return std::nullopt;
}

MaybeError ReadToolChoice(const ojson& v, ojson* out) {
  if (v.is_string()) {
    *out = v;
    return std::nullopt;
  }
  if (!v.is_object()) return WrongType("tool_choice", "a string or an object", v);
  const ojson* type = String(v, "type");
  const ojson* name = String(v, "name");
  if (type == nullptr || *type != "function" || name == nullptr) {
    return ApiError::BadRequest(
        "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}",
        "tool_choice", "unsupported");
  }
  PC_RETURN_IF_API_ERROR(OnlyKeys(v, "tool_choice", {"type", "name"}));
  *out = {{"type", "function"}, {"function", {{"name", *name}}}};
  return std::nullopt;
}

// text: {"format": {...}, "verbosity"} into response_format.
MaybeError ReadText(const ojson& text, ResponsesRequest* out) {
  if (!text.is_object()) return WrongType("text", "an object", text);
  PC_RETURN_IF_API_ERROR(OnlyKeys(text, "text", {"format", "verbosity"}));
  const ojson* format = Find(text, "format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) return WrongType("text.format", "an object", *format);
  out->text_format = *format;
  const ojson* type = String(*format, "type");
  if (type == nullptr) {
    return ApiError::BadRequest("'text.format.type' must be a string", "text.format.type");
  }
  if (*type == "text" || *type == "json_object") {
    PC_RETURN_IF_API_ERROR(OnlyKeys(*format, "text.format", {"type"}));
    if (*type == "json_object") out->chat["response_format"] = {{"type", "json_object"}};
    return std::nullopt;
  }
  if (*type != "json_schema") {
    return ApiError::BadRequest("'text.format.type' is '" + type->get<std::string>() +
                                    "': text, json_object or json_schema",
                                "text.format.type", "unsupported");
  }
  PC_RETURN_IF_API_ERROR(
      OnlyKeys(*format, "text.format", {"type", "name", "schema", "strict", "description"}));
  ojson js = ojson::object();
  for (const char* key : {"name", "schema", "strict", "description"}) {
    if (const ojson* v = Find(*format, key)) js[key] = *v;
  }
  if (!js.contains("schema")) {
    return ApiError::BadRequest("'text.format.schema' is required", "text.format.schema");
  }
  out->chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  return std::nullopt;
}

// Fields of the Responses API that have no chat spelling, or a different one.
MaybeError ReadResponsesFields(const ojson& obj, ResponsesRequest* out) {
  if (const ojson* v = Find(obj, "previous_response_id")) {
    if (!v->is_string()) return WrongType("previous_response_id", "a string", *v);
    out->previous_response_id = v->get<std::string>();
  }
  for (const auto& [key, ptr] : {std::pair{"store", &out->store}, {"stream", &out->stream}}) {
    if (const ojson* v = Find(obj, key)) {
      if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
      *ptr = v->get<bool>();
    }
  }
  if (const ojson* v = Find(obj, "background"); v != nullptr && *v != false) {
    return Unsupported("background", "'background'");
  }
  if (const ojson* v = Find(obj, "truncation"); v != nullptr && *v != "disabled") {
    return Unsupported("truncation", "'truncation' other than \"disabled\"");
  }
  if (const ojson* v = Find(obj, "include")) {
    if (!v->is_array()) return WrongType("include", "an array of strings", *v);
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string p = "include[" + std::to_string(i) + "]";
      if ((*v)[i] == "reasoning.encrypted_content") {
        out->encrypted_reasoning = true;
      } else if ((*v)[i] == "message.output_text.logprobs") {
        out->logprobs = true;
      } else {
        return Unsupported(p, "'" + p +
                                  "' other than \"reasoning.encrypted_content\" and "
                                  "\"message.output_text.logprobs\"");
      }
    }
  }
  // reasoning: its effort is the chat route's reasoning_effort (a template variable where the
  // template reads one); summaries are not generated.
  if (const ojson* v = Find(obj, "reasoning")) {
    if (!v->is_object()) return WrongType("reasoning", "an object", *v);
    for (const auto& [key, value] : v->items()) {
      if (value.is_null()) continue;
      if (key == "effort") {
        if (!value.is_string()) return WrongType("reasoning.effort", "a string", value);
        out->chat["reasoning_effort"] = value;
        continue;
      }
      // "auto": the server decides, and writes none (the reasoning itself is in the item).
      if (key == "summary" && value == "auto") continue;
      return Unsupported("reasoning." + key, key == "summary" || key == "generate_summary"
                                                 ? "reasoning summaries ('reasoning." + key + "')"
                                                 : "'reasoning." + key + "'");
    }
  }
  if (const ojson* v = Find(obj, "top_logprobs")) {
    if (!v->is_number_integer() || *v < 0 || *v > kMaxTopLogprobs) {
      return ApiError::BadRequest(
          "'top_logprobs' must be an integer from 0 to " + std::to_string(kMaxTopLogprobs),
          "top_logprobs", "invalid_value");
    }
    out->top_logprobs = v->get<int>();
    if (out->top_logprobs > 0) out->logprobs = true;
  }
  // The chat route computes them (for every generated token; the route keeps the message's).
  if (out->logprobs) {
    out->chat["logprobs"] = true;
    out->chat["top_logprobs"] = out->top_logprobs;
  }
  return std::nullopt;
}

// An input item as the Responses API lists it: typed, a message's content as parts.
ojson AsItem(const ojson& item) {
  ojson out = item;
  if (!out.contains("type")) {
    // Keys in OpenAI's order: id (added later), type, role, content, status.
    out = ojson::object();
    out["type"] = "message";
    for (const auto& [key, value] : item.items()) out[key] = value;
  }
  if (out["type"] != "message") return out;
  if (out["content"].is_string()) {
    const char* part = out["role"] == "assistant" ? "output_text" : "input_text";
    out["content"] = ojson::array({{{"type", part}, {"text", out["content"]}}});
  }
  if (!out.contains("status")) out["status"] = "completed";
  return out;
}

MaybeError Translate(const ojson& obj, ResponsesRequest* out) {
  out->chat = ojson::object();
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null()) continue;
    if (std::find(std::begin(kChatOnly), std::end(kChatOnly), key) != std::end(kChatOnly)) {
      return Unsupported(key, "'" + key + "' (a chat completions field; see the Responses API)");
    }
  }
  PC_RETURN_IF_API_ERROR(ReadResponsesFields(obj, out));
  static constexpr std::string_view kHandled[] = {
      "input",       "instructions", "previous_response_id", "store",      "stream",     "tools",
      "tool_choice", "text",         "max_output_tokens",    "background", "truncation", "include",
      "reasoning",   "top_logprobs"};
  // Everything else goes to the chat parser as it is: model, temperature, top_p, seed and the
  // extensions are read there, and an unknown field is its 400.
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null()) continue;
    if (std::find(std::begin(kHandled), std::end(kHandled), key) != std::end(kHandled)) continue;
    if (std::find(std::begin(kIgnoredKeys), std::end(kIgnoredKeys), key) != std::end(kIgnoredKeys))
      continue;
    out->chat[key] = value;
  }
  if (out->stream) out->chat["stream"] = true;
  if (const ojson* v = Find(obj, "max_output_tokens")) {
    out->max_output_tokens = *v;
    out->chat["max_completion_tokens"] = *v;
  }
  if (const ojson* v = Find(obj, "tools")) {
    out->tools = *v;
    ojson tools;
    PC_RETURN_IF_API_ERROR(ReadTools(*v, &tools));
    if (!tools.empty()) out->chat["tools"] = std::move(tools);
  }
  if (const ojson* v = Find(obj, "tool_choice")) {
    out->tool_choice = *v;
    ojson choice;
    PC_RETURN_IF_API_ERROR(ReadToolChoice(*v, &choice));
    if (out->chat.contains("tools") || choice != "none") out->chat["tool_choice"] = choice;
  }
  if (const ojson* v = Find(obj, "text")) PC_RETURN_IF_API_ERROR(ReadText(*v, out));
  if (const ojson* v = Find(obj, "metadata")) out->metadata = *v;
  if (const ojson* v = Find(obj, "temperature")) out->temperature = *v;
  if (const ojson* v = Find(obj, "top_p")) out->top_p = *v;
  if (const ojson* v = Find(obj, "instructions")) {
    if (!v->is_string()) return WrongType("instructions", "a string", *v);
    out->instructions = *v;
  }
  const ojson* input = Find(obj, "input");
  if (input == nullptr) return ApiError::BadRequest("'input' is required", "input");
  if (input->is_string()) {
    out->input_messages.push_back({{"role", "user"}, {"content", *input}});
    out->input_items.push_back(AsItem({{"role", "user"}, {"content", *input}}));
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) {
      PC_RETURN_IF_API_ERROR(AddItem((*input)[i], "input[" + std::to_string(i) + "]",
                                     ojson::array(), &out->input_messages));
      out->input_items.push_back(AsItem((*input)[i]));
    }
  } else {
    return WrongType("input", "a string or an array of items", *input);
  }
  return std::nullopt;
}

ApiError BadQuery(const std::string& param, const std::string& message) {
  return ApiError::BadRequest(message, param);
}

// The query's one value of `key`, or null; a key given twice is the 400.
MaybeError QueryValue(const std::multimap<std::string, std::string>& query, const char* key,
                      const std::string** out) {
  *out = nullptr;
  auto [lo, hi] = query.equal_range(key);
  if (lo == hi) return std::nullopt;
  if (std::next(lo) != hi) return BadQuery(key, "'" + std::string(key) + "' is given twice");
  *out = &lo->second;
  return std::nullopt;
}

}  // namespace

std::string ReasoningContentBlob(std::string_view text) {
  return std::string(kReasoningContentPrefix) + Base64Encode(text);
}

std::optional<std::string> ReasoningFromBlob(std::string_view blob) {
  if (blob.substr(0, kReasoningContentPrefix.size()) != kReasoningContentPrefix) {
    return std::nullopt;
  }
  return Base64Decode(blob.substr(kReasoningContentPrefix.size()));
}

std::optional<ApiError> ParseResponsesRequest(std::string_view body, ResponsesRequest* out) {
  return Guarded([&]() -> MaybeError {
    *out = ResponsesRequest();
    PC_RETURN_IF_API_ERROR(json_fields::CheckNesting(body));
    ojson obj = ojson::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return ApiError::BadRequest("the body is not valid JSON");
    if (!obj.is_object()) return WrongType("body", "a JSON object", obj);
    return Translate(obj, out);
  });
}

std::optional<ApiError> InputItemsPage(const ojson& items,
                                       const std::multimap<std::string, std::string>& query,
                                       ojson* out) {
  for (const auto& [key, value] : query) {
    if (key != "limit" && key != "order" && key != "after" && key != "include" &&
        key != "include[]") {
      return BadQuery(key, "'" + key +
                               "' is not a parameter of input_items (limit, order, "
                               "after and include are)");
    }
  }
  const std::string* v = nullptr;
  size_t limit = 20;
  PC_RETURN_IF_API_ERROR(QueryValue(query, "limit", &v));
  if (v != nullptr) {
    const bool digits =
        !v->empty() && v->size() <= 3 && v->find_first_not_of("0123456789") == std::string::npos;
    limit = digits ? std::stoul(*v) : 0;
    if (limit < 1 || limit > 100) {
      return BadQuery("limit", "'limit' must be an integer from 1 to 100, got '" + *v + "'");
    }
  }
  PC_RETURN_IF_API_ERROR(QueryValue(query, "order", &v));
  if (v != nullptr && *v != "asc" && *v != "desc") {
    return BadQuery("order", "'order' must be 'asc' or 'desc', got '" + *v + "'");
  }
  const bool ascending = v != nullptr && *v == "asc";
  std::vector<const ojson*> ordered;
  for (const ojson& item : items) ordered.push_back(&item);
  if (!ascending) std::reverse(ordered.begin(), ordered.end());
  size_t start = 0;
  PC_RETURN_IF_API_ERROR(QueryValue(query, "after", &v));
  if (v != nullptr) {
    auto it = std::find_if(ordered.begin(), ordered.end(),
                           [v](const ojson* item) { return item->value("id", ojson()) == *v; });
    if (it == ordered.end()) {
      return BadQuery("after",
                      "'after' is '" + *v + "', which is not an input item of this response");
    }
    start = static_cast<size_t>(it - ordered.begin()) + 1;
  }
  const size_t end = std::min(ordered.size(), start + limit);
  ojson data = ojson::array();
  for (size_t i = start; i < end; ++i) data.push_back(*ordered[i]);
  const ojson first = data.empty() ? ojson() : data.front()["id"];
  const ojson last = data.empty() ? ojson() : data.back()["id"];
  *out = {{"object", "list"},
          {"data", std::move(data)},
          {"first_id", first},
          {"last_id", last},
          {"has_more", end < ordered.size()}};
  return std::nullopt;
}

nlohmann::ordered_json SpliceHistory(const ResponsesRequest& r, const ojson& history) {
  ojson chat = r.chat;
  ojson messages = ojson::array();
  if (r.instructions.is_string()) {
    messages.push_back({{"role", "system"}, {"content", r.instructions}});
  }
  for (const ojson& m : history) messages.push_back(m);
  for (ojson m : r.input_messages) {
    // A tool result answering a call of an earlier response: its name is there.
    if (m["role"] == "tool" && !m.contains("name")) {
      const std::string name = CallName(history, m["tool_call_id"].get<std::string>());
      if (!name.empty()) m["name"] = name;
    }
    messages.push_back(std::move(m));
  }
  chat["messages"] = std::move(messages);
  return chat;
}

}  // namespace promptcache
