#include "server/embedding_api.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/base64.h"
#include "server/json_fields.h"

namespace promptcache {
namespace {

using namespace json_fields;  // NOLINT(build/namespaces): the field readers

// One input of token ids at `param`: a non-empty array of integers that fit a token id.
MaybeError ReadIds(const json& v, const std::string& param, std::vector<int32_t>* out) {
  if (!v.is_array()) return WrongType(param, "an array of token ids", v);
  if (v.empty()) return ApiError::BadRequest("'" + param + "' must not be empty", param);
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& id = v[i];
    const std::string at = param + "[" + std::to_string(i) + "]";
    if (!id.is_number_integer()) return WrongType(at, "a token id (an integer)", id);
    if (id.is_number_unsigned() ? id.get<uint64_t>() > uint64_t(INT32_MAX)
                                : (id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)) {
      return ApiError::BadRequest("'" + at + "' is " + id.dump() + ", not a token id", at);
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return std::nullopt;
}

MaybeError ReadText(const json& v, const std::string& param, std::vector<std::string>* out) {
  if (!v.is_string()) return WrongType(param, "a string", v);
  if (v.get_ref<const std::string&>().empty()) {
    return ApiError::BadRequest("'" + param + "' must not be an empty string", param);
  }
  out->push_back(v.get<std::string>());
  return std::nullopt;
}

// "input": a string or an array of strings; with `tokens`, also token ids or arrays of them.
MaybeError ReadInput(const json& body, bool tokens, EmbeddingsApiRequest* out) {
  const char* kinds = tokens ? "a string, an array of strings, an array of token ids or an array "
                               "of arrays of token ids"
                             : "a string or an array of strings";
  const json* v = Find(body, "input");
  if (v == nullptr) return ApiError::BadRequest("'input' is required", "input");
  if (v->is_string()) return ReadText(*v, "input", &out->texts);
  if (!v->is_array()) return WrongType("input", kinds, *v);
  if (v->empty()) return ApiError::BadRequest("'input' must not be an empty array", "input");
  const json& first = (*v)[0];
  if (tokens && first.is_number_integer()) {  // one input of token ids
    out->is_tokens = true;
    out->token_inputs.emplace_back();
    return ReadIds(*v, "input", &out->token_inputs.back());
  }
  if (v->size() > size_t(kMaxEmbeddingInputs)) {
    return ApiError::BadRequest("'input' has " + std::to_string(v->size()) + " items; at most " +
                                    std::to_string(kMaxEmbeddingInputs) + " are allowed",
                                "input");
  }
  if (tokens && first.is_array()) {
    out->is_tokens = true;
    out->token_inputs.resize(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      PC_RETURN_IF_API_ERROR(
          ReadIds((*v)[i], "input[" + std::to_string(i) + "]", &out->token_inputs[i]));
    }
    return std::nullopt;
  }
  if (!first.is_string())
    return WrongType("input[0]",
                     tokens ? "a string, a token id or an "
                              "array of token ids"
                            : "a string",
                     first);
  for (size_t i = 0; i < v->size(); ++i) {
    PC_RETURN_IF_API_ERROR(ReadText((*v)[i], "input[" + std::to_string(i) + "]", &out->texts));
  }
  return std::nullopt;
}

// The fields each API's request may have; any other (not null) is a 400 naming it, as on the
// other routes. Ollama's `options` (runner settings) and `keep_alive` mean nothing here.
constexpr std::string_view kOpenAiFields[] = {"input", "model", "encoding_format", "dimensions",
                                              "user"};
constexpr std::string_view kOllamaFields[] = {"input",      "model",   "truncate",
                                              "dimensions", "options", "keep_alive"};

template <size_t N>
MaybeError CheckFields(const json& body, const std::string_view (&known)[N]) {
  for (const auto& [key, value] : body.items()) {
    if (!value.is_null() && !Contains(known, key)) return Unsupported(key, "'" + key + "'");
  }
  return std::nullopt;
}

MaybeError ReadModelAndDimensions(const json& body, EmbeddingsApiRequest* out) {
  if (const json* m = Find(body, "model")) {
    if (!m->is_string()) return WrongType("model", "a string", *m);
    out->model = m->get<std::string>();
  }
  std::optional<int64_t> dims;
  PC_RETURN_IF_API_ERROR(ReadInt(body, "dimensions", 1, INT32_MAX, &dims));
  if (dims) out->dimensions = static_cast<int>(*dims);
  return std::nullopt;
}

// What both APIs' requests share: no field outside `known`, the input (token ids too where
// `tokens`), the model and the dimensions.
template <size_t N>
MaybeError ReadCommonFields(const json& body, const std::string_view (&known)[N], bool tokens,
                            EmbeddingsApiRequest* out) {
  PC_RETURN_IF_API_ERROR(CheckFields(body, known));
  PC_RETURN_IF_API_ERROR(ReadInput(body, tokens, out));
  return ReadModelAndDimensions(body, out);
}

void AppendFloat(std::string* out, float f) {
  if (!std::isfinite(f)) {  // JSON has no NaN; a hidden state should never be one
    *out += "null";
    return;
  }
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), f);
  out->append(buf, r.ptr);
}

void AppendVector(std::string* out, const std::vector<float>& v) {
  *out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) *out += ',';
    AppendFloat(out, v[i]);
  }
  *out += ']';
}

std::string Quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::optional<ApiError> ParseEmbeddingsRequest(std::string_view body, EmbeddingsApiRequest* out) {
  return Guarded([&]() -> MaybeError {
    json j;
    PC_RETURN_IF_API_ERROR(ParseObject(body, &j));
    PC_RETURN_IF_API_ERROR(ReadCommonFields(j, kOpenAiFields, /*tokens=*/true, out));
    if (const json* f = Find(j, "encoding_format")) {
      if (!f->is_string()) return WrongType("encoding_format", "a string", *f);
      const std::string& format = f->get_ref<const std::string&>();
      if (format != "float" && format != "base64") {
        return ApiError::BadRequest(
            "'encoding_format' is " + f->dump() + ", must be \"float\" or \"base64\"",
            "encoding_format");
      }
      out->base64 = format == "base64";
    }
    if (const json* u = Find(j, "user"); u != nullptr && !u->is_string()) {
      return WrongType("user", "a string", *u);
    }
    return std::nullopt;
  });
}

std::optional<ApiError> ParseOllamaEmbedRequest(std::string_view body, EmbeddingsApiRequest* out) {
  return Guarded([&]() -> MaybeError {
    json j;
    PC_RETURN_IF_API_ERROR(ParseObject(body, &j));
    PC_RETURN_IF_API_ERROR(ReadCommonFields(j, kOllamaFields, /*tokens=*/false, out));
    PC_RETURN_IF_API_ERROR(ReadBool(j, "truncate", &out->truncate));
    if (const json* o = Find(j, "options"); o != nullptr && !o->is_object()) {
      return WrongType("options", "an object", *o);
    }
    return std::nullopt;
  });
}

std::string Base64Floats(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = char(bits >> (8 * b));  // little-endian
  }
  return Base64Encode(bytes);
}

std::string EmbeddingsBody(const EmbeddingResult& result, const std::string& model, bool base64) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < result.embeddings.size(); ++i) {
    if (i > 0) out += ',';
    out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
    if (base64) {
      out += '"' + Base64Floats(result.embeddings[i]) + '"';
    } else {
      AppendVector(&out, result.embeddings[i]);
    }
    out += '}';
  }
  const std::string tokens = std::to_string(result.prompt_tokens);
  out += "],\"model\":" + Quoted(model) + ",\"usage\":{\"prompt_tokens\":" + tokens +
         ",\"total_tokens\":" + tokens + "}}";
  return out;
}

std::string OllamaEmbedBody(const EmbeddingResult& result, const std::string& model,
                            int64_t total_ns) {
  std::string out = "{\"model\":" + Quoted(model) + ",\"embeddings\":[";
  for (size_t i = 0; i < result.embeddings.size(); ++i) {
    if (i > 0) out += ',';
    AppendVector(&out, result.embeddings[i]);
  }
  out += "],\"total_duration\":" + std::to_string(total_ns) +
         ",\"load_duration\":0,\"prompt_eval_count\":" + std::to_string(result.prompt_tokens) + "}";
  return out;
}

}  // namespace promptcache
