// The sampling fields of OpenAI's requests: OpenAI's (temperature, top_p, penalties, seed,
// logit_bias) and llama-server's extensions (top_k, min_p, repeat_penalty, repeat_last_n, and
// its further samplers: typical_p, top_n_sigma, XTC, dynamic temperature, min_keep, mirostat,
// DRY),
// read into SamplingParams (promptcache/sampling.h).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "server/openai_request_parts.h"

namespace promptcache {
namespace openai_request {
namespace {

using json_fields::ReadFloat;
using json_fields::ReadInt;

// OpenAI's logit_bias: an object from token ids (decimal strings) to biases in [-100, 100].
// Whether each id is in the model's vocabulary is the route's check (CheckLogitBias).
MaybeError ReadLogitBias(const json& obj, SamplingParams* s) {
  std::vector<LogitBias>* out = &s->logit_bias;
  const json* v = Find(obj, "logit_bias");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) return WrongType("logit_bias", "an object mapping token ids to biases", *v);
  if (v->size() > kMaxLogitBias) {
    return ApiError::BadRequest("'logit_bias' has " + std::to_string(v->size()) +
                                    " entries, at most " + std::to_string(kMaxLogitBias) +
                                    " are allowed",
                                "logit_bias");
  }
  for (const auto& [key, bias] : v->items()) {
    const std::string param = "logit_bias." + key;
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = digits ? std::stoll(key) : -1;
    if (!digits || id > std::numeric_limits<int32_t>::max()) {
      return ApiError::BadRequest(
          "'logit_bias' key '" + key + "' is not a token id (a non-negative decimal integer)",
          "logit_bias");
    }
    if (bias.is_null()) continue;  // as an absent entry
    if (!bias.is_number()) return WrongType(param, "a number", bias);
    const double b = bias.get<double>();
    if (!(b >= -kMaxLogitBiasValue && b <= kMaxLogitBiasValue)) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", b);
      return ApiError::BadRequest("'" + param + "' must be between -100 and 100, got " + buf,
                                  "logit_bias");
    }
    out->push_back({static_cast<int32_t>(id), static_cast<float>(b)});
  }
  // "7" and "007" name one token: Validate refuses it twice (here with the field's name).
  if (Status st = s->ValidateLogitBias(); !st.ok()) {
    return ApiError::BadRequest(st.message(), "logit_bias");
  }
  return std::nullopt;
}

// llama-server's further samplers, with its names and ranges (SamplingParams says what each
// does). top_n_sigma takes llama-server's -1 (or any negative) as off.
MaybeError ReadLlamaSamplers(const json& obj, SamplingParams* s) {
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "typical_p", 0, 1, &s->typical_p));
  if (s->typical_p == 0) s->typical_p = 1;  // llama-server: 0 and 1 both leave it off
  float sigma = s->top_n_sigma;
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "top_n_sigma", -1e9, 1e9, &sigma));
  s->top_n_sigma = sigma < 0 ? -1.0f : sigma;
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "xtc_probability", 0, 1, &s->xtc_probability));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "xtc_threshold", 0, 1, &s->xtc_threshold));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "dynatemp_range", 0, 100, &s->dynatemp_range));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "dynatemp_exponent", 0, 100, &s->dynatemp_exponent));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "mirostat_tau", 0, 100, &s->mirostat_tau));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "mirostat_eta", 0, 1, &s->mirostat_eta));
  std::optional<int64_t> v;
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "mirostat", 0, 2, &v));
  if (v) s->mirostat = static_cast<int>(*v);
  v.reset();
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "min_keep", 0, 1 << 30, &v));
  if (v) s->min_keep = static_cast<int>(*v);
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "dry_multiplier", 0, 100, &s->dry_multiplier));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "dry_base", 1, 100, &s->dry_base));
  v.reset();
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "dry_allowed_length", 0, 1 << 30, &v));
  if (v) s->dry_allowed_length = static_cast<int>(*v);
  v.reset();
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "dry_penalty_last_n", -1, 1 << 30, &v));
  if (v) s->dry_penalty_last_n = static_cast<int>(*v);
  return std::nullopt;
}

}  // namespace

MaybeError ReadSampling(const json& obj, SamplingParams* s) {
  // OpenAI's defaults for its own fields; the extensions default to off.
  s->temperature = 1.0f;
  s->top_p = 1.0f;
  s->top_k = 0;
  s->min_p = 0.0f;
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "temperature", 0, 2, &s->temperature));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "top_p", 0, 1, &s->top_p));
  if (s->top_p == 0) {  // OpenAI accepts 0: only the most likely token is left
    s->temperature = 0;
    s->top_p = 1;
  }
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "presence_penalty", -2, 2, &s->presence_penalty));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "frequency_penalty", -2, 2, &s->frequency_penalty));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "min_p", 0, 1, &s->min_p));
  PC_RETURN_IF_API_ERROR(ReadFloat(obj, "repeat_penalty", 0.01, 100, &s->repeat_penalty));
  std::optional<int64_t> v;
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "top_k", 0, 1 << 30, &v));
  if (v) s->top_k = static_cast<int>(*v);
  v.reset();
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "repeat_last_n", -1, 1 << 30, &v));
  if (v) s->repeat_last_n = static_cast<int>(*v);
  v.reset();
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "seed", std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), &v));
  if (v) {
    // SamplingParams reads seed 0 as "random"; a client that sends 0 wants a fixed seed.
    s->seed = *v == 0 ? 0x9E3779B97F4A7C15ull : static_cast<uint64_t>(*v);
  }
  PC_RETURN_IF_API_ERROR(ReadLlamaSamplers(obj, s));
  PC_RETURN_IF_API_ERROR(ReadLogitBias(obj, s));
  if (Status st = s->Validate(); !st.ok()) return ApiError::BadRequest(st.message());
  return std::nullopt;
}

MaybeError ReadDryBreakers(const json& obj, std::vector<std::string>* out) {
  // Each breaker costs a pass over the vocabulary when the request is admitted.
  constexpr size_t kMaxBreakers = 64;
  constexpr size_t kMaxBreakerBytes = 64;
  const json* v = Find(obj, "dry_sequence_breakers");
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) return WrongType("dry_sequence_breakers", "an array of strings", *v);
  if (v->size() > kMaxBreakers) {
    return ApiError::BadRequest("'dry_sequence_breakers' has " + std::to_string(v->size()) +
                                    " entries, at most " + std::to_string(kMaxBreakers) +
                                    " are allowed",
                                "dry_sequence_breakers");
  }
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string param = "dry_sequence_breakers[" + std::to_string(i) + "]";
    const json& b = (*v)[i];
    if (!b.is_string()) return WrongType(param, "a string", b);
    const std::string& text = b.get_ref<const std::string&>();
    if (text.empty() || text.size() > kMaxBreakerBytes) {
      return ApiError::BadRequest(
          "'" + param + "' must be 1 to " + std::to_string(kMaxBreakerBytes) + " bytes long",
          param);
    }
    out->push_back(text);
  }
  return std::nullopt;
}

}  // namespace openai_request

std::optional<ApiError> CheckLogitBias(const SamplingParams& sampling, int vocab_size) {
  for (const LogitBias& b : sampling.logit_bias) {
    if (b.token >= vocab_size) {
      return ApiError::BadRequest("'logit_bias' key '" + std::to_string(b.token) +
                                      "' is outside the vocabulary of " +
                                      std::to_string(vocab_size) + " tokens",
                                  "logit_bias");
    }
  }
  return std::nullopt;
}

}  // namespace promptcache
