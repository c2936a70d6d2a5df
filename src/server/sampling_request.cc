// The sampling fields of OpenAI's requests: OpenAI's (temperature, top_p, penalties, seed,
// logit_bias) and llama.cpp's extensions (top_k, min_p, repeat_penalty, repeat_last_n), read
// into SamplingParams (promptcache/sampling.h).
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
  PC_RETURN_IF_API_ERROR(ReadLogitBias(obj, s));
  if (Status st = s->Validate(); !st.ok()) return ApiError::BadRequest(st.message());
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
