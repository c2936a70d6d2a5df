// Sampling parameters: how a request turns each step's logits into the next token.
//
// The pipeline is fixed: logit biases, repetition/presence/frequency penalties, top-k, softmax
// with temperature, top-p (nucleus), min-p, then a draw from a seeded generator; temperature 0
// is greedy decoding. A CompletionRequest (promptcache/completion.h) carries one SamplingParams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "promptcache/status.h"

namespace promptcache {

// OpenAI's logit_bias entry: `bias` is added to token `token`'s logit before anything else
// (penalties, a grammar's mask, the cuts). -100 all but bans the token, 100 all but forces it.
struct LogitBias {
  int32_t token = 0;
  float bias = 0;
};
// The most logit_bias entries one request may carry: each costs a write per sampled token, and
// a client that needs more is better served by a grammar.
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr float kMaxLogitBiasValue = 100.0f;  // |bias| bound, OpenAI's

// One request's sampling settings; the defaults are llama.cpp's.
struct SamplingParams {
  float temperature = 0.8f;  // 0: greedy (argmax after penalties)
  int top_k = 40;            // 0: no top-k cut
  float top_p = 0.95f;       // in (0, 1]; 1: no nucleus cut
  float min_p = 0.05f;       // in [0, 1]; 0: no min-p cut
  // llama.cpp semantics: a logit of a token seen in the last repeat_last_n tokens of the history
  // is divided by repeat_penalty when positive and multiplied by it when not. 1: off.
  float repeat_penalty = 1.0f;
  // How much history the penalties look at: -1 the whole history, 0 none (disables all three
  // penalties, as in llama.cpp).
  int repeat_last_n = 64;
  // OpenAI semantics over the same window: logit -= count * frequency_penalty
  // + (count > 0) * presence_penalty. Negative values encourage repetition.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;  // 0: a random seed from std::random_device
  // Each token at most once, ids >= 0 (the engine checks them against the model's vocabulary),
  // biases in [-100, 100]. Log-probabilities are not biased (TokenLogprob), as OpenAI's.
  std::vector<LogitBias> logit_bias;

  // InvalidArgument naming the first bad field and its allowed range.
  Status Validate() const;
  // The logit_bias part of Validate.
  Status ValidateLogitBias() const;
};

}  // namespace promptcache
