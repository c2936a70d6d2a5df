#include "server/json_fields.h"

#include <cstdio>
#include <limits>

#include "grammar/json_depth.h"

namespace promptcache {

std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace promptcache

namespace promptcache::json_fields {

ApiError Unsupported(const std::string& param, const std::string& what) {
  return ApiError::BadRequest(what + " is not supported by this server", param, "unsupported");
}

MaybeError CheckNesting(std::string_view text, const std::string& param) {
  const Status st = CheckJsonNesting(text, param.empty() ? "the request body" : "'" + param + "'");
  if (st.ok()) return std::nullopt;
  return ApiError::BadRequest(st.message(), param);
}

MaybeError ParseObject(std::string_view body, json* out) {
  PC_RETURN_IF_API_ERROR(CheckNesting(body));
  try {
    *out = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return ApiError::BadRequest(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!out->is_object()) {
    return ApiError::BadRequest(std::string("the request body must be a JSON object, not ") +
                                TypeName(*out));
  }
  return std::nullopt;
}

MaybeError ReadBool(const json& obj, const char* key, bool* out) {
  const json* v = Find(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

MaybeError ReadInt(const json& obj, const char* key, int64_t lo, int64_t hi,
                   std::optional<int64_t>* out) {
  const json* v = Find(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return WrongType(key, "an integer", *v);
  // Unsigned values above INT64_MAX read as negative here; they are out of range either way.
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                        ? std::numeric_limits<int64_t>::max()
                        : v->get<int64_t>();
  if (x < lo || x > hi) {
    return ApiError::BadRequest("'" + std::string(key) + "' is " + v->dump() +
                                    ", must be between " + std::to_string(lo) + " and " +
                                    std::to_string(hi),
                                key);
  }
  *out = x;
  return std::nullopt;
}

MaybeError ReadFloat(const json& obj, const char* key, double lo, double hi, float* out) {
  const json* v = Find(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(key, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    char range[64];
    std::snprintf(range, sizeof(range), "between %g and %g", lo, hi);
    return ApiError::BadRequest("'" + std::string(key) + "' is " + v->dump() + ", must be " + range,
                                key);
  }
  *out = static_cast<float>(x);
  return std::nullopt;
}

}  // namespace promptcache::json_fields
