#include "server/anthropic_request.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "server/anthropic_request_parts.h"
#include "server/json_fields.h"
#include "server/tool_request.h"

namespace promptcache {
namespace {

using json_fields::Contains;
using json_fields::Find;
using json_fields::Guarded;
using json_fields::json;
using json_fields::MaybeError;
using json_fields::OnlyKeys;
using json_fields::ParseObject;
using json_fields::ReadFloat;
using json_fields::ReadInt;
using json_fields::Unsupported;
using json_fields::WrongType;

// Top-level fields (MessagesFieldSupport). count_tokens reads a subset of the implemented ones.
// "cache_segments" and "recompute" are this server's extensions (segments, docs/server.md).
constexpr std::string_view kImplemented[] = {
    "model",          "max_tokens",     "messages", "system",   "temperature",   "top_p",
    "top_k",          "stop_sequences", "stream",   "metadata", "tools",         "tool_choice",
    "cache_segments", "recompute",      "thinking", "grammar",  "output_config", "cache_control"};
constexpr std::string_view kCountTokensFields[] = {"model",         "messages",     "system",
                                                   "tools",         "tool_choice",  "thinking",
                                                   "output_config", "cache_control"};
// Meaningless here: the service tier of Anthropic's capacity, its fast mode, the region that
// runs the request.
constexpr std::string_view kIgnoredMessagesFields[] = {"service_tier", "speed", "inference_geo"};

using ojson = nlohmann::ordered_json;

// Anthropic's limit on a tool's name (kMaxTools, the number of tools, is OpenAI's too).
constexpr size_t kMaxToolName = 64;

MaybeError CheckFields(const json& obj, bool count_tokens) {
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null()) continue;
    const FieldSupport s = MessagesFieldSupport(key);
    const bool ok = count_tokens
                        ? Contains(kCountTokensFields, key) || s == FieldSupport::kIgnored ||
                              s == FieldSupport::kOffValueOnly
                        : s != FieldSupport::kRefused;
    if (!ok) return Unsupported(key, "'" + key + "'");
  }
  return std::nullopt;
}

// {"type": "ephemeral", "ttl": "5m" | "1h"}: the TTL in seconds.
MaybeError ReadCacheControl(const json& v, const std::string& param, double* ttl_seconds) {
  if (!v.is_object()) return WrongType(param, "an object", v);
  for (const auto& [key, value] : v.items()) {
    if (key != "type" && key != "ttl" && !value.is_null()) {
      return Unsupported(param + "." + key, "'" + param + "." + key + "'");
    }
  }
  const json* type = Find(v, "type");
  if (type == nullptr || *type != "ephemeral") {
    return ApiError::BadRequest("'" + param + ".type' must be \"ephemeral\"", param + ".type");
  }
  *ttl_seconds = 300;
  if (const json* ttl = Find(v, "ttl")) {
    if (*ttl == "1h") {
      *ttl_seconds = 3600;
    } else if (*ttl != "5m") {
      return ApiError::BadRequest("'" + param + ".ttl' must be \"5m\" or \"1h\"", param + ".ttl");
    }
  }
  return std::nullopt;
}

// A block's cache_control `cc` (at `param`; "": the request's own), if it has one: a breakpoint
// at `content_end` bytes of message `message`'s content, at most kMaxCacheBreakpoints of them.
MaybeError AddBreakpoint(const json* cc, const std::string& param, size_t message,
                         size_t content_end, AnthropicRequest* out) {
  if (cc == nullptr) return std::nullopt;
  AnthropicBreakpoint b;
  const std::string at = param.empty() ? "cache_control" : param + ".cache_control";
  PC_RETURN_IF_API_ERROR(ReadCacheControl(*cc, at, &b.ttl_seconds));
  if (out->breakpoints.size() == kMaxCacheBreakpoints) {
    return ApiError::BadRequest("at most 4 content blocks may have cache_control", at);
  }
  b.message = message;
  b.content_end = content_end;
  out->breakpoints.push_back(b);
  return std::nullopt;
}

// A tool's name as Anthropic allows it: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.
MaybeError ReadToolName(const json* v, const std::string& param, std::string* out) {
  if (v == nullptr || !v->is_string()) {
    return ApiError::BadRequest("'" + param + "' must be a string", param);
  }
  *out = v->get<std::string>();
  bool ok = !out->empty() && out->size() <= kMaxToolName;
  for (const char c : *out)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  if (!ok) {
    return ApiError::BadRequest(
        "'" + param + "' must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'", param);
  }
  return std::nullopt;
}

MaybeError ReadToolChoice(const json& obj, const std::vector<std::string>& names,
                          AnthropicRequest* out);

// `tools`: client tools ({name, description, input_schema}), as the chat route's function tools
// with the client's key order (from `ordered`, the same body parsed keeping it).
MaybeError ReadTools(const json& obj, const ojson& ordered, AnthropicRequest* out) {
  const json* tools = Find(obj, "tools");
  std::vector<std::string> names;
  if (tools != nullptr) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    if (tools->size() > kMaxTools)
      return ApiError::BadRequest("'tools' has more than 128 tools", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) return WrongType(p, "an object", t);
      if (const json* type = Find(t, "type"); type != nullptr && *type != "custom") {
        return Unsupported(p + ".type", "server tools ('" + p + ".type' other than custom)");
      }
      PC_RETURN_IF_API_ERROR(
          OnlyKeys(t, p, {"type", "name", "description", "input_schema", "cache_control"}));
      std::string name;
      PC_RETURN_IF_API_ERROR(ReadToolName(Find(t, "name"), p + ".name", &name));
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        return ApiError::BadRequest("'" + p + ".name': '" + name + "' is given twice", p + ".name");
      }
      names.push_back(name);
      if (const json* d = Find(t, "description"); d != nullptr && !d->is_string()) {
        return WrongType(p + ".description", "a string", *d);
      }
      const json* schema = Find(t, "input_schema");
      if (schema == nullptr || !schema->is_object()) {
        return ApiError::BadRequest("'" + p + ".input_schema' must be an object (a JSON schema)",
                                    p + ".input_schema");
      }
      if (const json* cc = Find(t, "cache_control")) {
        double ttl = 0;  // a breakpoint on the tools: they lead the prompt, which caches anyway
        PC_RETURN_IF_API_ERROR(ReadCacheControl(*cc, p + ".cache_control", &ttl));
      }
      const ojson ot = ordered.is_object() ? ordered["tools"][i] : ojson(t);
      ojson function = {{"name", name}};
      if (ot.contains("description") && !ot["description"].is_null()) {
        function["description"] = ot["description"];
      }
      function["parameters"] = ot["input_schema"];
      out->tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
  }
  return ReadToolChoice(obj, names, out);
}

// `tool_choice`: auto, any, tool {name} or none, over the tools `names`.
MaybeError ReadToolChoice(const json& obj, const std::vector<std::string>& names,
                          AnthropicRequest* out) {
  const json* choice = Find(obj, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  if (!choice->is_object()) return WrongType("tool_choice", "an object", *choice);
  PC_RETURN_IF_API_ERROR(
      OnlyKeys(*choice, "tool_choice", {"type", "name", "disable_parallel_tool_use"}));
  if (const json* d = Find(*choice, "disable_parallel_tool_use");
      d != nullptr && !d->is_boolean()) {
    return WrongType("tool_choice.disable_parallel_tool_use", "a boolean", *d);
  }
  const json* type = Find(*choice, "type");
  const std::string t = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (const std::optional<ToolChoice> word = ToolChoiceWord(t, "any")) {
    out->tool_choice = *word;
  } else if (t == "tool") {
    out->tool_choice = ToolChoice::kFunction;
    const json* name = Find(*choice, "name");
    if (name == nullptr || !name->is_string()) {
      return ApiError::BadRequest("'tool_choice.name' must be a string", "tool_choice.name");
    }
    out->tool_function = name->get<std::string>();
    if (std::find(names.begin(), names.end(), out->tool_function) == names.end()) {
      return ApiError::BadRequest(
          "'tool_choice' names the tool '" + out->tool_function + "', which is not in 'tools'",
          "tool_choice.name");
    }
  } else {
    return ApiError::BadRequest(
        "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"", "tool_choice.type");
  }
  if (names.empty() && (t == "any" || t == "tool")) {
    return ApiError::BadRequest("'tool_choice' needs 'tools'", "tool_choice");
  }
  return std::nullopt;
}

// A tool_result block's content: a string, or text blocks (joined).
MaybeError ReadToolResultContent(const json* v, const std::string& param, std::string* out) {
  if (v == nullptr) return std::nullopt;
  return json_fields::ReadStringOrObjects(
      *v, param, "a string or an array of text blocks", "an object (a content block)", out,
      [&](const json& b, const std::string& p, size_t) -> MaybeError {
        const json* type = Find(b, "type");
        if (type == nullptr || *type != "text") {
          return Unsupported(p + ".type", "tool_result content other than text blocks");
        }
        PC_RETURN_IF_API_ERROR(OnlyKeys(b, p, {"type", "text", "cache_control", "citations"}));
        const json* text = Find(b, "text");
        if (text == nullptr || !text->is_string()) {
          return ApiError::BadRequest("'" + p + ".text' must be a string", p + ".text");
        }
        *out += text->get<std::string>();
        return std::nullopt;
      });
}

// A user's tool_result block: a `tool` message before the user's text (Anthropic requires the
// results first). A cache_control on it is a breakpoint at the end of that message.
MaybeError ReadToolResult(const json& block, const std::string& param, AnthropicRequest* out) {
  PC_RETURN_IF_API_ERROR(
      OnlyKeys(block, param, {"type", "tool_use_id", "content", "is_error", "cache_control"}));
  const json* id = Find(block, "tool_use_id");
  if (id == nullptr || !id->is_string()) {
    return ApiError::BadRequest("'" + param + ".tool_use_id' must be a string",
                                param + ".tool_use_id");
  }
  if (const json* e = Find(block, "is_error"); e != nullptr && !e->is_boolean()) {
    return WrongType(param + ".is_error", "a boolean", *e);
  }
  ApiMessage msg;
  msg.role = "tool";
  msg.tool_call_id = id->get<std::string>();
  // The name of the tool it answers, as the templates that print it want.
  for (const ApiMessage& m : out->messages) {
    for (const ojson& c : m.tool_calls.is_array() ? m.tool_calls : ojson::array()) {
      if (c["id"] == msg.tool_call_id) msg.name = c["function"]["name"].get<std::string>();
    }
  }
  PC_RETURN_IF_API_ERROR(
      ReadToolResultContent(Find(block, "content"), param + ".content", &msg.content));
  PC_RETURN_IF_API_ERROR(AddBreakpoint(Find(block, "cache_control"), param, out->messages.size(),
                                       msg.content.size(), out));
  out->messages.push_back(std::move(msg));
  return std::nullopt;
}

// An assistant's tool_use block: one of its tool_calls, as the chat route holds them (`input` in
// the client's key order, from `ordered`: that block in the body parsed keeping it).
MaybeError ReadToolUse(const json& block, const ojson& ordered, const std::string& param,
                       ApiMessage* msg) {
  PC_RETURN_IF_API_ERROR(OnlyKeys(block, param, {"type", "id", "name", "input", "cache_control"}));
  const json* id = Find(block, "id");
  if (id == nullptr || !id->is_string()) {
    return ApiError::BadRequest("'" + param + ".id' must be a string", param + ".id");
  }
  const json* name = Find(block, "name");
  if (name == nullptr || !name->is_string()) {
    return ApiError::BadRequest("'" + param + ".name' must be a string", param + ".name");
  }
  const json* input = Find(block, "input");
  if (input == nullptr || !input->is_object()) {
    return ApiError::BadRequest("'" + param + ".input' must be an object", param + ".input");
  }
  if (msg->tool_calls.is_null()) msg->tool_calls = ojson::array();
  msg->tool_calls.push_back(
      {{"id", *id},
       {"type", "function"},
       {"function",
        {{"name", *name}, {"arguments", ordered.is_object() ? ordered["input"] : ojson(*input)}}}});
  return std::nullopt;
}

// One content block: its text appended to msg->content; a cache_control breakpoint recorded.
MaybeError ReadBlock(const json& block, const std::string& param, size_t message, ApiMessage* msg,
                     AnthropicRequest* out) {
  if (!block.is_object()) return WrongType(param, "an object (a content block)", block);
  const json* type = Find(block, "type");
  if (type == nullptr || !type->is_string()) {
    return ApiError::BadRequest("'" + param + ".type' must be a string", param + ".type");
  }
  if (*type == "document" && msg->role == "user") {
    const size_t begin = msg->content.size();
    PC_RETURN_IF_API_ERROR(anthropic_request::ReadDocumentBlock(block, param, &msg->content));
    msg->parts.emplace_back(begin, msg->content.size());
    return AddBreakpoint(Find(block, "cache_control"), param, message, msg->content.size(), out);
  }
  if (*type != "text") {
    // An image's (or a document's elsewhere) source type says what it would need.
    const json* source = Find(block, "source");
    const json* source_type =
        source != nullptr && source->is_object() ? Find(*source, "type") : nullptr;
    const std::string of_source = source_type != nullptr && source_type->is_string()
                                      ? " with a '" + source_type->get<std::string>() + "' source"
                                      : "";
    return Unsupported(param + ".type",
                       "'" + param + ".type': content blocks of type '" + type->get<std::string>() +
                           "'" + of_source +
                           (msg->role == "user" ? " (only text, and documents with a text or "
                                                  "content source)"
                                                : " (only text)"));
  }
  for (const auto& [key, value] : block.items()) {
    if (value.is_null() || key == "type" || key == "text" || key == "cache_control") continue;
    if (key == "citations" && value.is_array() && value.empty()) continue;
    return Unsupported(param + "." + key, "'" + param + "." + key + "'");
  }
  const json* text = Find(block, "text");
  if (text == nullptr || !text->is_string()) {
    return ApiError::BadRequest("'" + param + ".text' must be a string", param + ".text");
  }
  const size_t begin = msg->content.size();
  msg->content += text->get<std::string>();
  msg->parts.emplace_back(begin, msg->content.size());
  PC_RETURN_IF_API_ERROR(
      AddBreakpoint(Find(block, "cache_control"), param, message, msg->content.size(), out));
  return std::nullopt;
}

// A string, or an array of blocks. `ordered`: the same content keeping the client's key order
// (null when the body has no tool use). An assistant's tool_use blocks become its tool_calls; a
// user's tool_result blocks, which must come first, `tool` messages pushed before it.
MaybeError ReadContent(const json& v, const ojson* ordered, const std::string& param,
                       ApiMessage* msg, AnthropicRequest* out) {
  if (v.is_string()) {
    msg->content = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(param, "a string or an array of content blocks", v);
  bool other_blocks = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json* type = v[i].is_object() ? Find(v[i], "type") : nullptr;
    if (type != nullptr && *type == "tool_result" && msg->role == "user") {
      if (other_blocks) {
        return ApiError::BadRequest(
            "'" + p + "': tool_result blocks must come first in a user message", p);
      }
      PC_RETURN_IF_API_ERROR(ReadToolResult(v[i], p, out));
      continue;
    }
    other_blocks = true;
    if (type != nullptr && (*type == "thinking" || *type == "redacted_thinking") &&
        msg->role == "assistant") {
      PC_RETURN_IF_API_ERROR(anthropic_request::ReadThinkingBlock(v[i], p, msg));
      continue;
    }
    if (type != nullptr && *type == "tool_use" && msg->role == "assistant") {
      static const ojson kNone;
      PC_RETURN_IF_API_ERROR(ReadToolUse(v[i], ordered != nullptr ? (*ordered)[i] : kNone, p, msg));
      continue;
    }
    PC_RETURN_IF_API_ERROR(ReadBlock(v[i], p, out->messages.size(), msg, out));
  }
  // An assistant turn that only calls tools has no content (the templates test for that); a user
  // turn of tool results only is those results.
  // One with thinking keeps "" (Qwen3's template, which renders the thinking, strips the
  // content as a string).
  if (!msg->tool_calls.is_null() && msg->content.empty() && !msg->reasoning_content) {
    msg->content_null = true;
  }
  if (!other_blocks && !v.empty()) msg->role.clear();  // nothing left to push
  return std::nullopt;
}

MaybeError ReadMessages(const json& obj, const ojson& ordered, AnthropicRequest* out) {
  if (const json* system = Find(obj, "system")) {
    ApiMessage msg;
    msg.role = "system";
    PC_RETURN_IF_API_ERROR(ReadContent(*system, nullptr, "system", &msg, out));
    out->messages.push_back(std::move(msg));
  }
  const json* msgs = Find(obj, "messages");
  if (msgs == nullptr) return ApiError::BadRequest("'messages' is required", "messages");
  if (!msgs->is_array()) return WrongType("messages", "an array", *msgs);
  if (msgs->empty()) return ApiError::BadRequest("'messages' must not be empty", "messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return WrongType(p, "an object", m);
    for (const auto& [key, value] : m.items()) {
      if (!value.is_null() && key != "role" && key != "content") {
        return Unsupported(p + "." + key, "'" + p + "." + key + "'");
      }
    }
    const json* role = Find(m, "role");
    if (role == nullptr || !role->is_string() || (*role != "user" && *role != "assistant")) {
      return ApiError::BadRequest("'" + p +
                                      ".role' must be \"user\" or \"assistant\" (a system prompt "
                                      "is the top-level 'system' field)",
                                  p + ".role");
    }
    const json* content = Find(m, "content");
    if (content == nullptr) return ApiError::BadRequest("'" + p + ".content' is required", p);
    ApiMessage msg;
    msg.role = role->get<std::string>();
    const ojson* oc = nullptr;
    if (ordered.is_object()) oc = &ordered["messages"][i]["content"];
    PC_RETURN_IF_API_ERROR(ReadContent(*content, oc, p + ".content", &msg, out));
    if (!msg.role.empty()) out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

// An integer in [lo, hi]; `required` says whether its absence is an error.
MaybeError ReadInt(const json& obj, const char* key, int64_t lo, int64_t hi, bool required,
                   int* out) {
  if (required && Find(obj, key) == nullptr) {
    return ApiError::BadRequest("'" + std::string(key) + "' is required", key);
  }
  std::optional<int64_t> v;
  PC_RETURN_IF_API_ERROR(json_fields::ReadInt(obj, key, lo, hi, &v));
  if (v) *out = static_cast<int>(*v);
  return std::nullopt;
}

MaybeError ReadSamplingAndStops(const json& obj, AnthropicRequest* out) {
  SamplingParams& s = out->sampling;
  s.temperature = 1.0f;  // Anthropic's defaults; the extensions of the sampler stay off
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "temperature", 0, 1, &s.temperature));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "top_p", 0, 1, &s.top_p));
  if (s.top_p == 0) {  // only the most likely token is left
    s.temperature = 0;
    s.top_p = 1;
  }
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "top_k", 0, 1 << 30, false, &s.top_k));
  if (Status st = s.Validate(); !st.ok()) return ApiError::BadRequest(st.message());
  if (const json* stops = Find(obj, "stop_sequences")) {
    if (!stops->is_array()) return WrongType("stop_sequences", "an array of strings", *stops);
    for (size_t i = 0; i < stops->size(); ++i) {
      const json& v = (*stops)[i];
      if (!v.is_string())
        return WrongType("stop_sequences[" + std::to_string(i) + "]", "a string", v);
      if (!v.get<std::string>().empty()) out->stop_sequences.push_back(v.get<std::string>());
    }
  }
  if (const json* stream = Find(obj, "stream")) {
    if (!stream->is_boolean()) return WrongType("stream", "a boolean", *stream);
    out->stream = stream->get<bool>();
  }
  if (const json* metadata = Find(obj, "metadata")) {
    if (!metadata->is_object()) return WrongType("metadata", "an object", *metadata);
    for (const auto& [key, value] : metadata->items()) {
      if (key == "user_id" && (value.is_string() || value.is_null())) continue;
      return Unsupported("metadata." + key, "'metadata." + key + "'");
    }
  }
  return std::nullopt;
}

MaybeError ReadModel(const json& obj, std::string* out) {
  const json* v = Find(obj, "model");
  if (v == nullptr) return ApiError::BadRequest("'model' is required", "model");
  if (!v->is_string()) return WrongType("model", "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

// The extensions: "cache_segments" (a boolean), "recompute" (a share from 0 to 1) and "grammar"
// (GBNF text, compiled).
MaybeError ReadSegmentFields(const json& obj, AnthropicRequest* out) {
  if (Find(obj, "cache_segments") != nullptr) {
    bool on = false;
    PC_RETURN_IF_API_ERROR(json_fields::ReadBool(obj, "cache_segments", &on));
    out->cache_segments = on;
  }
  if (const json* v = Find(obj, "recompute")) {
    if (!v->is_number() || !(v->get<double>() >= 0) || !(v->get<double>() <= 1)) {
      return ApiError::BadRequest("'recompute' must be a share from 0 to 1", "recompute");
    }
    out->recompute = v->get<double>();
  }
  if (const json* v = Find(obj, "grammar")) {
    if (!v->is_string()) return WrongType("grammar", "a string (GBNF)", *v);
    Result<std::shared_ptr<const Grammar>> g = Grammar::Parse(v->get<std::string>());
    if (!g.ok()) return ApiError::BadRequest("'grammar': " + g.status().message(), "grammar");
    out->grammar = *g;
  }
  return std::nullopt;
}

MaybeError Parse(std::string_view body, const RequestLimits* limits, AnthropicRequest* out) {
  *out = AnthropicRequest();
  json obj;
  PC_RETURN_IF_API_ERROR(ParseObject(body, &obj));
  PC_RETURN_IF_API_ERROR(CheckFields(obj, limits == nullptr));
  PC_RETURN_IF_API_ERROR(ReadModel(obj, &out->model));
  // Tools, tool_use inputs and the output format's schema keep the client's key order, which
  // the template renders and the grammar follows: read from the body parsed once more, when it
  // has any.
  ojson ordered;
  if (Find(obj, "tools") != nullptr || Find(obj, "output_config") != nullptr ||
      body.find("tool_use") != std::string_view::npos) {
    ordered = ojson::parse(body);
  }
  PC_RETURN_IF_API_ERROR(ReadTools(obj, ordered, out));
  PC_RETURN_IF_API_ERROR(ReadMessages(obj, ordered, out));
  // Top-level cache_control: a breakpoint at the end of the last message.
  if (!out->messages.empty()) {
    PC_RETURN_IF_API_ERROR(AddBreakpoint(Find(obj, "cache_control"), "", out->messages.size() - 1,
                                         out->messages.back().content.size(), out));
  }
  PC_RETURN_IF_API_ERROR(anthropic_request::ReadOutputConfig(obj, ordered, out, limits == nullptr));
  if (limits == nullptr)
    return anthropic_request::ReadThinking(obj, out, /*check_budget=*/false);  // count_tokens
  const int64_t hi = limits->max_tokens_limit > 0 ? limits->max_tokens_limit : (1 << 30);
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "max_tokens", 1, hi, true, &out->max_tokens));
  PC_RETURN_IF_API_ERROR(anthropic_request::ReadThinking(obj, out, /*check_budget=*/true));
  PC_RETURN_IF_API_ERROR(ReadSegmentFields(obj, out));
  return ReadSamplingAndStops(obj, out);
}

}  // namespace

FieldSupport MessagesFieldSupport(std::string_view field) {
  if (Contains(kImplemented, field)) return FieldSupport::kImplemented;
  if (Contains(kIgnoredMessagesFields, field)) return FieldSupport::kIgnored;
  return FieldSupport::kRefused;
}

std::optional<ApiError> ParseMessagesRequest(std::string_view body, const RequestLimits& limits,
                                             AnthropicRequest* out) {
  return Guarded([&] { return Parse(body, &limits, out); });
}

std::optional<ApiError> ParseCountTokensRequest(std::string_view body, AnthropicRequest* out) {
  return Guarded([&] { return Parse(body, nullptr, out); });
}

Result<AnthropicPrompt> BuildMessagesPrompt(const PromptEncoder& encoder,
                                            const AnthropicRequest& request, double ttl_scale,
                                            size_t max_tokens, bool segments) {
  AnthropicPrompt out;
  const ojson tools = request.tools_offered() ? request.tools : ojson();
  ojson variables = encoder.ThinkingSwitch(request.thinking);
  // output_config.effort: the template's reasoning_effort (the route checks that it reads one).
  if (!request.effort.empty() && encoder.reads_reasoning_effort()) {
    if (variables.is_null()) variables = ojson::object();
    variables["reasoning_effort"] = request.effort;
  }
  PC_ASSIGN_OR_RETURN(BuiltPrompt whole,
                      encoder.FromMessages(request.messages, /*add_generation_prompt=*/true, tools,
                                           max_tokens, segments, variables));
  out.opens_thinking = whole.opens_thinking;
  out.tokens = std::move(whole.tokens);
  out.segments = std::move(whole.segments);
  for (const AnthropicBreakpoint& b : request.breakpoints) {
    // The conversation cut at the end of the block, rendered: the tokens it shares with the
    // whole prompt are the breakpoint's prefix (as PromptEncoder finds a chat breakpoint's).
    // (A template may refuse a conversation cut short: that breakpoint then pins nothing.)
    const int covered = encoder.BreakpointCoverage(request.messages, b.message, b.content_end,
                                                   tools, segments, variables, out.tokens);
    if (covered > 0) out.pins.push_back({covered, b.ttl_seconds * ttl_scale});
  }
  return out;
}

}  // namespace promptcache

namespace promptcache {

std::optional<ApiError> ApplyMessagesToolChoice(ToolCallFormat format,
                                                const AnthropicRequest& request,
                                                std::shared_ptr<const Grammar>* grammar) {
  ApiRequest chat;
  chat.kind = ApiKind::kChat;
  chat.tools = request.tools;
  chat.tool_choice = request.tool_choice;
  chat.tool_function = request.tool_function;
  std::optional<ApiError> err = ApplyToolChoice(format, &chat);
  if (err) {
    // The chat route's names for Anthropic's fields.
    for (std::string* s : {&err->param, &err->message}) {
      for (size_t at; (at = s->find(".function.parameters")) != std::string::npos;) {
        s->replace(at, 20, ".input_schema");
      }
    }
    return err;
  }
  *grammar = chat.grammar;
  return std::nullopt;
}

}  // namespace promptcache
