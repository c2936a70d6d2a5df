// Token sampling: turns one step's logits into the next token id.
//
// Knows nothing about models or tokenizers; it sees a logits array and the tokens generated so
// far. The pipeline is fixed: logit biases, repetition/presence/frequency penalties, top-k,
// softmax with temperature, top-p (nucleus), min-p, then a draw from the seeded generator.
// Temperature 0 is greedy decoding. It is built for vocabularies of 32k-256k entries sampled once
// per token, so it never sorts the whole vocabulary unless top-p truly needs most of it.
// SamplingParams, the settings, are public (include/promptcache/sampling.h).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"
#include "promptcache/sampling.h"

namespace promptcache {

class Sampler {
 public:
  // `params` must pass Validate() (checked: an invalid one is a caller bug).
  explicit Sampler(const SamplingParams& params);

  // The next token for `logits[0..n_vocab)`. `history` is the token sequence so far (prompt and
  // generated tokens, oldest first); only its last repeat_last_n entries matter, and only when a
  // penalty is set. Its ids must be in [0, n_vocab). NaN logits count as -infinity. Ties between
  // equal logits resolve to the lowest id in greedy mode and in the top-k and top-p cuts. Every
  // logit_bias token must be below n_vocab.
  int32_t Sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }
  // The seed actually in use (the random one when params().seed was 0), for reproducing a run.
  uint64_t seed() const { return seed_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float weight;  // exp((logit - max logit) / temperature): probability times a constant
  };

  // `logits` itself when no bias or penalty applies, else work_ holding a biased, penalized copy.
  const float* Penalize(const float* logits, int32_t n_vocab, std::span<const int32_t> history);
  static int32_t Greedy(const float* logits, int32_t n_vocab);
  // Fills candidates_ with the top_k best tokens, best first, or with every token in id order
  // when there is no top-k cut. Returns whether candidates_ is sorted best first.
  bool SelectTopK(const float* logits, int32_t n_vocab);
  // Keeps the nucleus: the shortest best-first prefix of candidates_ whose weights add up to
  // top_p * total, `total` being the weight sum of the set before min-p removed its tail. An
  // unsorted set stays unsorted (only the boundary is ordered).
  void CutTopP(double total, bool sorted);
  // A uniform double in [0, 1) from 53 bits of rng_: the same on every standard library,
  // unlike std::uniform_real_distribution.
  double NextUniform();

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<float> work_;  // biased, penalized copy of the logits (Penalize)
  std::vector<Candidate> candidates_;
  std::vector<int32_t> window_;  // sorted copy of the penalty window of the history
};

}  // namespace promptcache
