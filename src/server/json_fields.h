// Readers of a request body's JSON fields, shared by the API routes' parsers (OpenAI's
// completions and chat, Anthropic's messages, tool definitions). Each returns the one
// ApiError that names the field and what was wrong with it (a 400 the client can act on), never
// throws, and reads absent and null fields alike as "not given", as both APIs do. And Dump, the
// one way the server writes JSON text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace promptcache {

// `j` as compact JSON text. Generated text is valid UTF-8 by the engine's contract; a broken byte
// is replaced rather than thrown on, so that no piece of text can become an exception here.
std::string Dump(const nlohmann::ordered_json& j);

}  // namespace promptcache

namespace promptcache::json_fields {

using json = nlohmann::json;
using MaybeError = std::optional<ApiError>;

// Returns the error of `expr`, if any, from the calling reader.
#define PC_RETURN_IF_API_ERROR(expr)                 \
  do {                                               \
    if (MaybeError pc_err_ = (expr)) return pc_err_; \
  } while (0)

// "an integer", "a number", else nlohmann's name ("null", "string", "array", ...).
template <typename Json>
const char* TypeName(const Json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  return v.type_name();
}

template <typename Json>
ApiError WrongType(const std::string& param, const char* expected, const Json& v) {
  return ApiError::BadRequest("'" + param + "' must be " + expected + ", not " + TypeName(v),
                              param);
}

// `what` (a field, or a value of one) is understood but not implemented here.
ApiError Unsupported(const std::string& param, const std::string& what);

// The field, or null when it is absent or null.
template <typename Json>
const Json* Find(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// Every non-null key of `obj` is one of `keys`; else the 400 naming the first other one
// (`param.key`).
template <typename Json>
MaybeError OnlyKeys(const Json& obj, const std::string& param,
                    std::initializer_list<std::string_view> keys) {
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null() || std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    return Unsupported(param + "." + key, "'" + param + "." + key + "'");
  }
  return std::nullopt;
}

template <size_t N>
bool Contains(const std::string_view (&list)[N], std::string_view field) {
  return std::find(std::begin(list), std::end(list), field) != std::end(list);
}

// The body as a JSON object (nlohmann rejects ill-formed UTF-8 inside strings). A body nested
// deeper than kMaxJsonNesting (grammar/json_depth.h) is refused before it is parsed: copies,
// dump() and every walk over a parsed value recurse per level (100,000 nested brackets overflowed
// the stack), and nlohmann's ordered_json even copies each level while parsing.
MaybeError ParseObject(std::string_view body, json* out);
// The 400 for `text` (JSON text found at `param`, "" for the body itself) nested deeper than
// kMaxJsonNesting; nullopt when it is not. The check every route runs before parsing JSON.
MaybeError CheckNesting(std::string_view text, const std::string& param = "");

// Typed fields; an absent one leaves *out as it was.
MaybeError ReadBool(const json& obj, const char* key, bool* out);
MaybeError ReadInt(const json& obj, const char* key, int64_t lo, int64_t hi,
                   std::optional<int64_t>* out);
MaybeError ReadFloat(const json& obj, const char* key, double lo, double hi, float* out);

// A field holding a string or an array of objects (a message's content parts): the string is
// copied to *text, else `item(element, its param "param[i]", i)` reads each element in order.
// `expected` and `element` say what the field and each element must be, for the errors.
template <typename Item>
MaybeError ReadStringOrObjects(const json& v, const std::string& param, const char* expected,
                               const char* element, std::string* text, Item item) {
  if (v.is_string()) {
    *text = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(param, expected, v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!v[i].is_object()) return WrongType(p, element, v[i]);
    PC_RETURN_IF_API_ERROR(item(v[i], p, i));
  }
  return std::nullopt;
}

// Runs a parser, turning anything nlohmann may still throw (get<> on an unexpected type) into
// a 400, so that no exception leaves it.
template <typename F>
MaybeError Guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return ApiError::BadRequest(std::string("invalid request: ") + e.what());
  }
}

}  // namespace promptcache::json_fields
