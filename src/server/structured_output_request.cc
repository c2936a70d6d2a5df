// The structured-output fields of OpenAI's requests (response_format, and the grammar,
// json_schema, guided_json and guided_choice extensions), each compiled to a grammar.
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "server/openai_request_parts.h"

namespace promptcache::openai_request {
namespace {

using ojson = nlohmann::ordered_json;

// A GBNF text compiled, or the 400 naming `param`.
MaybeError CompileGrammar(const std::string& gbnf, const std::string& param,
                          std::shared_ptr<const Grammar>* out) {
  Result<std::shared_ptr<const Grammar>> g = Grammar::Parse(gbnf);
  if (!g.ok()) return ApiError::BadRequest("'" + param + "': " + g.status().message(), param);
  *out = *g;
  return std::nullopt;
}

// A JSON schema given as an object or as its JSON text. `ordered`: the same value with its keys
// in the client's order (null: none), so that properties are generated in the schema's order
// (zod's, pydantic's), not sorted.
MaybeError SchemaGrammar(const json& schema, const ojson* ordered, const std::string& param,
                         ApiRequest* out) {
  if (!schema.is_object() && !schema.is_string() && !schema.is_boolean()) {
    return WrongType(param, "a JSON schema (an object)", schema);
  }
  const std::string text = schema.is_string()   ? schema.get<std::string>()
                           : ordered != nullptr ? ordered->dump()
                                                : schema.dump();
  return CompileJsonSchema(text, param, &out->grammar);
}

// vLLM's guided_choice: one of the strings, exactly.
MaybeError ChoiceGrammar(const json& v, const std::string& param, ApiRequest* out) {
  if (!v.is_array() || v.empty()) return WrongType(param, "a non-empty array of strings", v);
  std::string gbnf = "root ::= ";
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return WrongType(param + "[" + std::to_string(i) + "]", "a string", v[i]);
    gbnf += i ? " | \"" : "\"";
    for (const char c : v[i].get<std::string>()) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\' || u < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02X", u);
        gbnf += buf;
      } else {
        gbnf += c;
      }
    }
    gbnf += "\"";
  }
  return CompileGrammar(gbnf, param, &out->grammar);
}

// The value at `key` of `obj`, when both are objects (the ordered twin of a field).
const ojson* OrderedAt(const ojson* obj, const char* key) {
  if (obj == nullptr || !obj->is_object()) return nullptr;
  auto it = obj->find(key);
  return it == obj->end() ? nullptr : &*it;
}

MaybeError ResponseFormat(const json& v, const ojson* ov, ApiRequest* out) {
  if (!v.is_object()) return WrongType("response_format", "an object", v);
  const json* type = Find(v, "type");
  if (type == nullptr || !type->is_string()) {
    return ApiError::BadRequest("'response_format.type' must be a string", "response_format.type");
  }
  const std::string t = type->get<std::string>();
  // Keys beyond the type's are refused, not ignored: llama.cpp's {"type": "json_object",
  // "schema": {...}} would otherwise give unconstrained JSON.
  for (const auto& [key, value] : v.items()) {
    if (value.is_null() || key == "type" || (t == "json_schema" && key == "json_schema")) continue;
    return ApiError::BadRequest("'response_format." + key + "' is not supported with type '" + t +
                                    "' (give a json_schema response_format for a schema)",
                                "response_format." + key, "unsupported");
  }
  if (t == "text") return std::nullopt;
  out->grammar_field = "response_format";
  if (t == "json_object") return CompileGrammar(JsonObjectGbnf(), "response_format", &out->grammar);
  if (t != "json_schema") {
    return ApiError::BadRequest(
        "'response_format.type' is '" + t + "': text, json_object or json_schema",
        "response_format.type", "unsupported");
  }
  const json* js = Find(v, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return ApiError::BadRequest("'response_format.json_schema' must be an object",
                                "response_format.json_schema");
  }
  for (const auto& [name, value] : js->items()) {
    // strict: the schema is always enforced; name and description only label it.
    if (name != "name" && name != "schema" && name != "strict" && name != "description") {
      return ApiError::BadRequest(
          "'response_format.json_schema." + name + "' is not supported by this server",
          "response_format.json_schema." + name, "unsupported");
    }
  }
  const json* schema = Find(*js, "schema");
  if (schema == nullptr) {
    return ApiError::BadRequest("'response_format.json_schema.schema' is required",
                                "response_format.json_schema.schema");
  }
  return SchemaGrammar(*schema, OrderedAt(OrderedAt(ov, "json_schema"), "schema"),
                       "response_format.json_schema.schema", out);
}

}  // namespace

// Structured output: at most one of response_format (json_object / json_schema), grammar,
// json_schema, guided_json and guided_choice.

MaybeError ReadStructuredOutput(const json& obj, const ojson* ordered, ApiRequest* out) {
  if (const json* rf = Find(obj, "response_format"))
    PC_RETURN_IF_API_ERROR(ResponseFormat(*rf, OrderedAt(ordered, "response_format"), out));
  for (const char* key : {"grammar", "json_schema", "guided_json", "guided_choice"}) {
    const json* v = Find(obj, key);
    if (v == nullptr) continue;
    const std::string k = key;
    if (!out->grammar_field.empty()) {
      return ApiError::BadRequest(
          "'" + k + "' and '" + out->grammar_field + "' both constrain the output: give one", k);
    }
    out->grammar_field = k;
    if (k == "grammar") {
      if (!v->is_string()) return WrongType(k, "a string (GBNF)", *v);
      PC_RETURN_IF_API_ERROR(CompileGrammar(v->get<std::string>(), k, &out->grammar));
    } else if (k == "guided_choice") {
      PC_RETURN_IF_API_ERROR(ChoiceGrammar(*v, k, out));
    } else {
      PC_RETURN_IF_API_ERROR(SchemaGrammar(*v, OrderedAt(ordered, key), k, out));
    }
  }
  return std::nullopt;
}

}  // namespace promptcache::openai_request

namespace promptcache {

std::optional<ApiError> CompileJsonSchema(std::string_view schema, const std::string& param,
                                          std::shared_ptr<const Grammar>* out) {
  Result<std::string> gbnf = JsonSchemaToGbnf(schema);
  if (!gbnf.ok()) {
    return ApiError::BadRequest("'" + param + "': " + gbnf.status().message(), param,
                                "unsupported");
  }
  return openai_request::CompileGrammar(*gbnf, param, out);
}

}  // namespace promptcache
