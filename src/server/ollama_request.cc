#include "server/ollama_request.h"

#include <initializer_list>
#include <nlohmann/json.hpp>

#include "server/json_fields.h"

namespace promptcache {
namespace {

using json_fields::Find;
using json_fields::MaybeError;
using json_fields::Unsupported;
using json_fields::WrongType;
using ojson = nlohmann::ordered_json;

// Ollama's options this server honours, by the chat request's field each becomes.
constexpr std::pair<const char*, const char*> kOptions[] = {
    {"temperature", "temperature"},
    {"top_p", "top_p"},
    {"top_k", "top_k"},
    {"min_p", "min_p"},
    {"seed", "seed"},
    {"num_predict", "max_tokens"},
    {"stop", "stop"},
    {"repeat_penalty", "repeat_penalty"},
    {"repeat_last_n", "repeat_last_n"},
    {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"},
    {"typical_p", "typical_p"},
    {"mirostat", "mirostat"},
    {"mirostat_tau", "mirostat_tau"},
    {"mirostat_eta", "mirostat_eta"},
};

// The body as an object keeping its key order (tool schemas and arguments are rendered in it).
MaybeError ParseBody(std::string_view body, ojson* out) {
  json_fields::json plain;
  PC_RETURN_IF_API_ERROR(json_fields::ParseObject(body, &plain));  // checks nesting and syntax
  *out = ojson::parse(body);
  return std::nullopt;
}

// Fields a route takes: `known` are read; anything else is a 400 naming it.
MaybeError OnlyFields(const ojson& obj, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null()) continue;
    bool ok = false;
    for (std::string_view k : known) ok = ok || k == key;
    if (!ok) return Unsupported(key, "'" + key + "'");
  }
  return std::nullopt;
}

// Fields accepted only empty (images: [], suffix: "", ...).
MaybeError OffOnly(const ojson& obj, const std::string& prefix) {
  for (const char* key : {"images", "suffix", "template", "context"}) {
    const ojson* v = Find(obj, key);
    // (nlohmann's empty() is false for every string: "" is read as a string.)
    if (v == nullptr || (v->is_array() && v->empty()) ||
        (v->is_string() && v->get_ref<const std::string&>().empty())) {
      continue;
    }
    return Unsupported(prefix + key, "'" + prefix + key + "'");
  }
  return std::nullopt;
}

// `think`: true or false, or a level ("low", "medium", "high": gpt-oss's reasoning effort).
MaybeError ReadThink(const ojson& obj, OllamaRequest* out) {
  const ojson* think = Find(obj, "think");
  if (think == nullptr) return std::nullopt;
  if (think->is_string()) {
    const std::string level = think->get<std::string>();
    if (level != "low" && level != "medium" && level != "high") {
      return ApiError::BadRequest(
          "'think' must be true, false, \"low\", \"medium\" or \"high\", got \"" + level + "\"",
          "think");
    }
    out->think = true;
    out->think_level = level;
    return std::nullopt;
  }
  if (!think->is_boolean()) {
    return WrongType("think", "true, false, \"low\", \"medium\" or \"high\"", *think);
  }
  out->think = think->get<bool>();
  return std::nullopt;
}

// model, stream, keep_alive, format and options into the chat request `oa`.
MaybeError ReadCommon(const ojson& obj, OllamaRequest* out, ojson* oa) {
  if (const ojson* model = Find(obj, "model")) {
    if (!model->is_string()) return WrongType("model", "a string", *model);
    out->model = model->get<std::string>();
    (*oa)["model"] = *model;
  }
  if (const ojson* stream = Find(obj, "stream")) {
    if (!stream->is_boolean()) return WrongType("stream", "a boolean", *stream);
    out->stream = stream->get<bool>();
  }
  if (const ojson* keep = Find(obj, "keep_alive");
      keep != nullptr && !keep->is_string() && !keep->is_number()) {
    return WrongType("keep_alive", "a duration (\"5m\") or a number of seconds", *keep);
  }
  if (const ojson* format = Find(obj, "format")) {
    if (*format == "json") {
      (*oa)["response_format"] = {{"type", "json_object"}};
    } else if (format->is_object()) {
      (*oa)["response_format"] = {{"type", "json_schema"},
                                  {"json_schema", {{"name", "format"}, {"schema", *format}}}};
    } else if (!(format->is_string() && format->get<std::string>().empty())) {
      return ApiError::BadRequest("'format' must be \"json\" or a JSON schema (an object)",
                                  "format");
    }
  }
  // Log-probabilities: "logprobs" (a boolean), "top_logprobs" (0 to 20; nothing without
  // "logprobs", as Ollama).
  bool logprobs = false;
  if (const ojson* v = Find(obj, "logprobs")) {
    if (!v->is_boolean()) return WrongType("logprobs", "a boolean", *v);
    logprobs = v->get<bool>();
  }
  int top = 0;
  if (const ojson* v = Find(obj, "top_logprobs")) {
    if (!v->is_number_integer() || *v < 0 || *v > kMaxTopLogprobs) {
      return ApiError::BadRequest(
          "'top_logprobs' must be an integer from 0 to " + std::to_string(kMaxTopLogprobs),
          "top_logprobs");
    }
    top = v->get<int>();
  }
  out->logprobs = logprobs ? top : -1;
  // Extensions, as on the chat route: llama.cpp's "grammar" (GBNF); segment reuse.
  for (const char* key : {"grammar", "cache_segments", "recompute"}) {
    if (const ojson* v = Find(obj, key)) (*oa)[key] = *v;
  }
  if (const ojson* options = Find(obj, "options")) {
    if (!options->is_object()) return WrongType("options", "an object", *options);
    for (const auto& [from, to] : kOptions) {
      const ojson* v = Find(*options, from);
      if (v == nullptr) continue;
      // num_predict -1 (until the context is full) and -2 (fill it) are no bound, as unset.
      if (std::string_view(from) == "num_predict" && v->is_number_integer() && *v < 0) continue;
      (*oa)[to] = *v;
    }
  }
  return std::nullopt;
}

// One message: Ollama's tool_calls ({"function": {"name", "arguments": {...}}}) get the ids the
// chat request needs; a tool message answers the latest call of its tool_name (else the latest).
MaybeError ReadMessage(const ojson& m, const std::string& p, ojson* calls_seen, ojson* out) {
  if (!m.is_object()) return WrongType(p, "an object", m);
  PC_RETURN_IF_API_ERROR(OffOnly(m, p + "."));
  for (const auto& [key, value] : m.items()) {
    if (value.is_null()) continue;
    if (key == "role" || key == "content" || key == "tool_calls" || key == "tool_name" ||
        key == "images" || key == "thinking" || key == "tool_call_id") {
      continue;
    }
    return Unsupported(p + "." + key, "'" + p + "." + key + "'");
  }
  const ojson* role = Find(m, "role");
  if (role == nullptr || !role->is_string()) {
    return ApiError::BadRequest("'" + p + ".role' must be a string", p + ".role");
  }
  *out = {{"role", *role}, {"content", m.value("content", ojson(""))}};
  // An assistant's thinking sent back: the template's reasoning_content (other roles': unread).
  if (const ojson* thinking = Find(m, "thinking"); thinking != nullptr && *role == "assistant") {
    if (!thinking->is_string()) return WrongType(p + ".thinking", "a string", *thinking);
    (*out)["reasoning_content"] = *thinking;
  }
  if (const ojson* calls = Find(m, "tool_calls"); calls != nullptr && *role == "assistant") {
    if (!calls->is_array()) return WrongType(p + ".tool_calls", "an array", *calls);
    ojson converted = ojson::array();
    for (size_t i = 0; i < calls->size(); ++i) {
      const ojson& c = (*calls)[i];
      const std::string cp = p + ".tool_calls[" + std::to_string(i) + "]";
      const ojson* f = c.is_object() ? Find(c, "function") : nullptr;
      if (f == nullptr || !f->is_object() || Find(*f, "name") == nullptr) {
        return ApiError::BadRequest("'" + cp + ".function' must be an object with a name",
                                    cp + ".function");
      }
      const ojson* args = Find(*f, "arguments");
      const std::string id = c.contains("id") && c["id"].is_string()
                                 ? c["id"].get<std::string>()
                                 : "call_" + std::to_string(calls_seen->size());
      converted.push_back({{"id", id},
                           {"type", "function"},
                           {"function",
                            {{"name", (*f)["name"]},
                             {"arguments", args == nullptr     ? "{}"
                                           : args->is_string() ? args->get<std::string>()
                                                               : args->dump()}}}});
      calls_seen->push_back(converted.back());
    }
    (*out)["tool_calls"] = std::move(converted);
  }
  if (*role == "tool") {
    std::string id = m.contains("tool_call_id") && m["tool_call_id"].is_string()
                         ? m["tool_call_id"].get<std::string>()
                         : "";
    const std::string name = m.contains("tool_name") && m["tool_name"].is_string()
                                 ? m["tool_name"].get<std::string>()
                                 : "";
    for (const ojson& c : *calls_seen) {  // the latest call of that tool (of any, unnamed)
      if (!m.contains("tool_call_id") && (name.empty() || c["function"]["name"] == name)) {
        id = c["id"].get<std::string>();
      }
    }
    (*out)["tool_call_id"] = id.empty() ? "call_0" : id;
    if (!name.empty()) (*out)["name"] = name;
  }
  return std::nullopt;
}

// The translated request parsed by the chat (or completions) parser; its errors name the
// options by Ollama's names.
MaybeError Translate(const ojson& oa, const RequestLimits& limits, bool chat, ApiRequest* api) {
  const std::string text = oa.dump();
  std::optional<ApiError> err =
      chat ? ParseChatRequest(text, limits, api) : ParseCompletionRequest(text, limits, api);
  if (!err) return std::nullopt;
  for (const auto& [from, to] : kOptions) {
    if (err->param == to) err->param = std::string("options.") + from;
  }
  if (err->param == "response_format" || err->param.rfind("response_format.", 0) == 0) {
    err->param = "format";
  }
  return err;
}

MaybeError ParseChat(std::string_view body, const RequestLimits& limits, OllamaRequest* out) {
  ojson obj;
  PC_RETURN_IF_API_ERROR(ParseBody(body, &obj));
  PC_RETURN_IF_API_ERROR(OnlyFields(
      obj, {"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think",
            "grammar", "logprobs", "top_logprobs", "cache_segments", "recompute"}));
  PC_RETURN_IF_API_ERROR(OffOnly(obj, ""));
  PC_RETURN_IF_API_ERROR(ReadThink(obj, out));
  ojson oa = ojson::object();
  PC_RETURN_IF_API_ERROR(ReadCommon(obj, out, &oa));
  const ojson* msgs = Find(obj, "messages");
  out->chat = true;
  if (msgs == nullptr || (msgs->is_array() && msgs->empty())) {
    out->load_only = true;  // Ollama answers at once, done_reason "load"
    return std::nullopt;
  }
  if (!msgs->is_array()) return WrongType("messages", "an array", *msgs);
  ojson calls_seen = ojson::array();
  oa["messages"] = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    ojson m;
    PC_RETURN_IF_API_ERROR(
        ReadMessage((*msgs)[i], "messages[" + std::to_string(i) + "]", &calls_seen, &m));
    oa["messages"].push_back(std::move(m));
  }
  if (const ojson* tools = Find(obj, "tools")) oa["tools"] = *tools;
  out->chat = true;
  return Translate(oa, limits, true, &out->api);
}

MaybeError ParseGenerate(std::string_view body, const RequestLimits& limits, OllamaRequest* out) {
  ojson obj;
  PC_RETURN_IF_API_ERROR(ParseBody(body, &obj));
  PC_RETURN_IF_API_ERROR(
      OnlyFields(obj, {"model", "prompt", "system", "raw", "format", "options", "stream",
                       "keep_alive", "images", "suffix", "template", "context", "think", "grammar",
                       "logprobs", "top_logprobs", "cache_segments", "recompute"}));
  PC_RETURN_IF_API_ERROR(OffOnly(obj, ""));
  PC_RETURN_IF_API_ERROR(ReadThink(obj, out));
  ojson oa = ojson::object();
  PC_RETURN_IF_API_ERROR(ReadCommon(obj, out, &oa));
  out->chat = false;
  const ojson* prompt = Find(obj, "prompt");
  if (prompt != nullptr && !prompt->is_string()) return WrongType("prompt", "a string", *prompt);
  const ojson* system = Find(obj, "system");
  if (system != nullptr && !system->is_string()) return WrongType("system", "a string", *system);
  bool raw = false;
  if (const ojson* r = Find(obj, "raw")) {
    if (!r->is_boolean()) return WrongType("raw", "a boolean", *r);
    raw = r->get<bool>();
  }
  if (prompt == nullptr || prompt->get<std::string>().empty()) {
    out->load_only = true;  // Ollama answers at once, done_reason "load"
    return std::nullopt;
  }
  if (raw) {
    if (system != nullptr) {
      return ApiError::BadRequest("'system' has no place in a raw prompt", "system");
    }
    oa["prompt"] = *prompt;
    oa["pml"] = false;  // the text as it is
    return Translate(oa, limits, false, &out->api);
  }
  oa["messages"] = ojson::array();
  if (system != nullptr) oa["messages"].push_back({{"role", "system"}, {"content", *system}});
  oa["messages"].push_back({{"role", "user"}, {"content", *prompt}});
  return Translate(oa, limits, true, &out->api);
}

}  // namespace

std::optional<ApiError> ParseOllamaChat(std::string_view body, const RequestLimits& limits,
                                        OllamaRequest* out) {
  *out = OllamaRequest();
  std::optional<ApiError> err = json_fields::Guarded([&] { return ParseChat(body, limits, out); });
  out->api.logprobs = out->logprobs;
  return err;
}

std::optional<ApiError> ParseOllamaGenerate(std::string_view body, const RequestLimits& limits,
                                            OllamaRequest* out) {
  *out = OllamaRequest();
  std::optional<ApiError> err =
      json_fields::Guarded([&] { return ParseGenerate(body, limits, out); });
  out->api.logprobs = out->logprobs;
  return err;
}

}  // namespace promptcache
