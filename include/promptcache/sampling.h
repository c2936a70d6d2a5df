// Sampling parameters: how a request turns each step's logits into the next token.
//
// The pipeline is fixed: logit biases, repetition/presence/frequency penalties, DRY, top-k,
// top-n-sigma, softmax with temperature (dynamic when dynatemp_range > 0), typical-p, top-p
// (nucleus), min-p, XTC, then a draw from a seeded generator; temperature 0 is greedy decoding.
// Mirostat, when on, takes the place of the cuts after the penalties (top-k to XTC), as in
// llama.cpp. A CompletionRequest (promptcache/completion.h) carries one SamplingParams.
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

  // llama.cpp's further samplers; each is off at its default. Each cut below keeps at least
  // min_keep tokens (and top-p and min-p too; 0 and 1 both mean one).
  int min_keep = 0;
  // > 0: the temperature follows the entropy H of the top-k set at temperature 1, from
  // lo = max(0, temperature - range) for a certain step to hi = temperature + range for a
  // uniform one: lo + (hi - lo) * (H / log(set size))^exponent.
  float dynatemp_range = 0.0f;
  float dynatemp_exponent = 1.0f;
  // >= 0: keeps the tokens whose logit is at least the best minus top_n_sigma standard
  // deviations of the top-k set's logits (Tang et al. 2024). -1: off.
  float top_n_sigma = -1.0f;
  // < 1: locally typical sampling (Meister et al. 2022): keeps the tokens whose surprise is
  // nearest the distribution's entropy, until they hold typical_p of the probability.
  float typical_p = 1.0f;
  // Exclude Top Choices: with probability xtc_probability per step, of the tokens at least
  // xtc_threshold probable (when there are two or more), all but the least probable are
  // removed. A threshold above 0.5 never finds two.
  float xtc_probability = 0.0f;
  float xtc_threshold = 0.1f;
  // Mirostat (Basu et al. 2021), 1 or 2 (0: off): keeps the surprise of the sampled tokens near
  // mirostat_tau bits, adapting its cut with learning rate mirostat_eta.
  int mirostat = 0;
  float mirostat_tau = 5.0f;
  float mirostat_eta = 0.1f;
  // DRY (src/sampling/dry.h), after the penalties: a token that would continue a repeat of the
  // text's last L >= dry_allowed_length tokens loses dry_multiplier * dry_base^(L - allowed)
  // from its logit; repeats are looked for in the last dry_penalty_last_n tokens (-1: all) and
  // do not reach back across a breaker. 0 multiplier: off.
  float dry_multiplier = 0.0f;
  float dry_base = 1.75f;
  int dry_allowed_length = 2;
  int dry_penalty_last_n = -1;
  // Each breaker as token sequences (DryBreakerSequences turns strings into them).
  std::vector<std::vector<int32_t>> dry_breakers;

  // InvalidArgument naming the first bad field and its allowed range.
  Status Validate() const;
  // The logit_bias part of Validate.
  Status ValidateLogitBias() const;
};

}  // namespace promptcache
