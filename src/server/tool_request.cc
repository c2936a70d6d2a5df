#include "server/tool_request.h"

#include <cctype>
#include <set>

#include "grammar/grammar.h"
#include "server/json_fields.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;
using json_fields::CheckNesting;
using json_fields::Find;
using json_fields::MaybeError;
using json_fields::OnlyKeys;
using json_fields::WrongType;

// OpenAI's limit on a function's name.
constexpr size_t kMaxNameLength = 64;

MaybeError ReadName(const ojson* v, const std::string& param, std::string* out) {
  if (v == nullptr) return ApiError::BadRequest("'" + param + "' is required", param);
  if (!v->is_string()) return WrongType(param, "a string", *v);
  *out = v->get<std::string>();
  if (out->empty() || out->size() > kMaxNameLength) {
    return ApiError::BadRequest("'" + param + "' must be 1 to 64 characters", param);
  }
  for (const char c : *out) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
      return ApiError::BadRequest("'" + param + "' may hold only a-z, A-Z, 0-9, '_' and '-'",
                                  param);
    }
  }
  return std::nullopt;
}

MaybeError ReadTool(const ojson& t, const std::string& p, std::string* name) {
  if (!t.is_object()) return WrongType(p, "an object", t);
  if (MaybeError e = OnlyKeys(t, p, {"type", "function"})) return e;
  const ojson* type = Find(t, "type");
  if (type == nullptr || *type != "function") {
    return ApiError::BadRequest("'" + p + ".type' must be \"function\"", p + ".type",
                                "unsupported");
  }
  const ojson* f = Find(t, "function");
  if (f == nullptr || !f->is_object()) {
    return ApiError::BadRequest("'" + p + ".function' must be an object", p + ".function");
  }
  const std::string fp = p + ".function";
  if (MaybeError e = OnlyKeys(*f, fp, {"name", "description", "parameters", "strict"})) return e;
  if (MaybeError e = ReadName(Find(*f, "name"), fp + ".name", name)) return e;
  if (const ojson* d = Find(*f, "description"); d != nullptr && !d->is_string()) {
    return WrongType(fp + ".description", "a string", *d);
  }
  if (const ojson* s = Find(*f, "strict"); s != nullptr && !s->is_boolean()) {
    return WrongType(fp + ".strict", "a boolean", *s);
  }
  if (const ojson* params = Find(*f, "parameters"); params != nullptr && !params->is_object()) {
    return WrongType(fp + ".parameters", "an object (a JSON schema)", *params);
  }
  return std::nullopt;
}

MaybeError ReadToolChoice(const ojson& v, const std::set<std::string>& names, ApiRequest* out) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const std::optional<ToolChoice> choice = ToolChoiceWord(s, "required");
    if (!choice) {
      return ApiError::BadRequest(
          "'tool_choice' is '" + s + "': none, auto, required or {\"type\": \"function\", ...}",
          "tool_choice");
    }
    out->tool_choice = *choice;
  } else if (v.is_object()) {
    if (MaybeError e = OnlyKeys(v, "tool_choice", {"type", "function"})) return e;
    const ojson* type = Find(v, "type");
    const ojson* f = Find(v, "function");
    if (type == nullptr || *type != "function" || f == nullptr || !f->is_object()) {
      return ApiError::BadRequest(
          "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
          "tool_choice");
    }
    if (MaybeError e = OnlyKeys(*f, "tool_choice.function", {"name"})) return e;
    const ojson* name = Find(*f, "name");
    if (name == nullptr || !name->is_string()) {
      return ApiError::BadRequest("'tool_choice.function.name' must be a string",
                                  "tool_choice.function.name");
    }
    out->tool_choice = ToolChoice::kFunction;
    out->tool_function = name->get<std::string>();
    if (!names.count(out->tool_function)) {
      return ApiError::BadRequest(
          "'tool_choice' names the function '" + out->tool_function + "', which is not in 'tools'",
          "tool_choice.function.name");
    }
  } else {
    return WrongType("tool_choice", "a string or an object", v);
  }
  if (names.empty() && out->tool_choice != ToolChoice::kNone &&
      out->tool_choice != ToolChoice::kAuto) {
    return ApiError::BadRequest("'tool_choice' needs 'tools'", "tool_choice");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ToolChoice> ToolChoiceWord(std::string_view word, std::string_view required) {
  if (word == "none") return ToolChoice::kNone;
  if (word == "auto") return ToolChoice::kAuto;
  if (word == required) return ToolChoice::kRequired;
  return std::nullopt;
}

MaybeError ReadTools(const ojson& body, ApiRequest* out) {
  std::set<std::string> names;
  if (const ojson* tools = Find(body, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    if (tools->size() > kMaxTools) {
      return ApiError::BadRequest("'tools' has more than 128 tools", "tools");
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string p = "tools[" + std::to_string(i) + "]";
      std::string name;
      if (MaybeError e = ReadTool((*tools)[i], p, &name)) return e;
      if (!names.insert(name).second) {
        return ApiError::BadRequest("'" + p + ".function.name': '" + name + "' is given twice",
                                    p + ".function.name");
      }
    }
    if (!tools->empty()) out->tools = *tools;
  }
  if (const ojson* choice = Find(body, "tool_choice")) {
    if (MaybeError e = ReadToolChoice(*choice, names, out)) return e;
  }
  return std::nullopt;
}

MaybeError ReadMessageToolFields(const ojson& m, const std::string& p, ApiMessage* out) {
  if (out->role == "tool") {
    const ojson* id = Find(m, "tool_call_id");
    if (id == nullptr || !id->is_string()) {
      return ApiError::BadRequest("'" + p + ".tool_call_id' must be a string (the call's id)",
                                  p + ".tool_call_id");
    }
    out->tool_call_id = id->get<std::string>();
    if (const ojson* name = Find(m, "name")) {
      if (!name->is_string()) return WrongType(p + ".name", "a string", *name);
      out->name = name->get<std::string>();
    }
  } else {
    // OpenAI's participant name on other roles: legal, checked, and not rendered (the chat
    // templates show no such field).
    if (const ojson* name = Find(m, "name"); name != nullptr && !name->is_string()) {
      return WrongType(p + ".name", "a string", *name);
    }
    for (const char* key : {"tool_call_id"}) {
      if (Find(m, key) != nullptr) {
        return ApiError::BadRequest("'" + p + "." + key + "' is not supported by this server",
                                    p + "." + key, "unsupported");
      }
    }
  }
  const ojson* calls = Find(m, "tool_calls");
  if (calls == nullptr || (calls->is_array() && calls->empty())) return std::nullopt;
  const std::string cp = p + ".tool_calls";
  if (out->role != "assistant") {
    return ApiError::BadRequest("'" + cp + "': only assistant messages carry tool calls", cp);
  }
  if (!calls->is_array()) return WrongType(cp, "an array", *calls);
  out->tool_calls = ojson::array();
  for (size_t i = 0; i < calls->size(); ++i) {
    const ojson& c = (*calls)[i];
    const std::string ip = cp + "[" + std::to_string(i) + "]";
    if (!c.is_object()) return WrongType(ip, "an object", c);
    if (MaybeError e = OnlyKeys(c, ip, {"id", "type", "function"})) return e;
    const ojson* id = Find(c, "id");
    if (id == nullptr || !id->is_string()) {
      return ApiError::BadRequest("'" + ip + ".id' must be a string", ip + ".id");
    }
    if (const ojson* type = Find(c, "type"); type != nullptr && *type != "function") {
      return ApiError::BadRequest("'" + ip + ".type' must be \"function\"", ip + ".type");
    }
    const ojson* f = Find(c, "function");
    if (f == nullptr || !f->is_object()) {
      return ApiError::BadRequest("'" + ip + ".function' must be an object", ip + ".function");
    }
    if (MaybeError e = OnlyKeys(*f, ip + ".function", {"name", "arguments"})) return e;
    const ojson* name = Find(*f, "name");
    if (name == nullptr || !name->is_string()) {
      return ApiError::BadRequest("'" + ip + ".function.name' must be a string",
                                  ip + ".function.name");
    }
    // OpenAI sends arguments as JSON text; templates index into them (tool_call.arguments|items)
    // or write them with tojson, so text that is an object's JSON becomes the object, as vLLM
    // does before rendering. Other text stays a string.
    ojson args = ojson::object();
    if (const ojson* a = Find(*f, "arguments")) {
      if (a->is_string()) {
        // JSON inside a string: the body's own check did not see its brackets.
        const std::string& text = a->get_ref<const std::string&>();
        PC_RETURN_IF_API_ERROR(CheckNesting(text, ip + ".function.arguments"));
        args = ojson::parse(text, nullptr, false);
        if (!args.is_object()) args = *a;
      } else if (a->is_object()) {
        args = *a;
      } else {
        return WrongType(ip + ".function.arguments", "a string (JSON text)", *a);
      }
    }
    out->tool_calls.push_back({{"id", *id},
                               {"type", "function"},
                               {"function", {{"name", *name}, {"arguments", std::move(args)}}}});
  }
  // An assistant turn that only calls tools has no content (the templates test for that).
  if (Find(m, "content") == nullptr) out->content_null = true;
  return std::nullopt;
}

MaybeError ApplyToolChoice(ToolCallFormat format, ApiRequest* r) {
  if (!r->tools_offered()) return std::nullopt;
  if (r->modular()) {
    return ApiError::BadRequest("'tools' apply to plain chat prompts, not to modular ones", "tools",
                                "unsupported");
  }
  if (format == ToolCallFormat::kNone) {
    return ApiError::BadRequest(
        "'tools': this model's chat template shows no tool-call format this server knows "
        "(Hermes/Qwen <tool_call>, Llama 3.x JSON, Mistral [TOOL_CALLS], Functionary v3.1/v3.2, "
        "FireFunction v2 functools, Command R+ Action:, Command R7B <|START_ACTION|>, "
        "DeepSeek R1 <｜tool▁calls▁begin｜>); "
        "start the server with --chat-template naming one that does",
        "tools", "unsupported");
  }
  if (r->tool_choice == ToolChoice::kAuto) return std::nullopt;
  if (r->grammar) {
    return ApiError::BadRequest(
        "'tool_choice' and '" + r->grammar_field + "' both constrain the output: give one",
        "tool_choice");
  }
  std::vector<ToolSpec> specs;
  std::vector<size_t> index;
  for (size_t i = 0; i < r->tools.size(); ++i) {
    const ojson& f = r->tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (r->tool_choice == ToolChoice::kFunction && name != r->tool_function) continue;
    auto params = f.find("parameters");
    specs.push_back({name, params == f.end() || params->is_null() ? "" : params->dump()});
    index.push_back(i);
  }
  int failed = -1;
  Result<std::string> gbnf = ToolCallGbnf(format, specs, &failed);
  if (!gbnf.ok()) {
    const std::string p =
        failed >= 0 ? "tools[" + std::to_string(index[failed]) + "].function.parameters" : "tools";
    return ApiError::BadRequest("'" + p + "': " + gbnf.status().message(), p, "unsupported");
  }
  Result<std::shared_ptr<const Grammar>> g = Grammar::Parse(*gbnf);
  if (!g.ok()) return ApiError::BadRequest("'tools': " + g.status().message(), "tools");
  r->grammar = *g;
  r->grammar_field = "tool_choice";
  return std::nullopt;
}

}  // namespace promptcache
