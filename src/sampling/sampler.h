// Token sampling: turns one step's logits into the next token id.
//
// Knows nothing about models or tokenizers; it sees a logits array and the tokens generated so
// far. The pipeline is fixed (include/promptcache/sampling.h lists it): logit biases, penalties
// and DRY on the logits, then cuts of a candidate set, then a draw from the seeded generator.
// Temperature 0 is greedy decoding. It is built for vocabularies of 32k-256k entries sampled once
// per token, so it never sorts the whole vocabulary unless a cut truly needs most of it (top-p
// on a flat distribution, typical-p, mirostat 1's cut past its 100 best). The generator is drawn
// from only by the final draw and by XTC's coin (when xtc_probability > 0), so a stream of tokens
// is a function of the seed, the logits and the settings.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"
#include "promptcache/sampling.h"
#include "sampling/dry.h"

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

  // The set the next draw would pick from, best first, with each token's probability: what
  // Sample does but the draw (for tests and inspection). It flips XTC's coin like Sample, and
  // leaves mirostat's state as it was.
  struct Choice {
    int32_t id;
    double p;
  };
  std::vector<Choice> Distribution(const float* logits, int32_t n_vocab,
                                   std::span<const int32_t> history);

  const SamplingParams& params() const { return params_; }
  // Mirostat's current bound on a token's surprise, in bits (2 * tau at the start). It learns
  // from every draw: a caller that throws a draw away (a grammar's retry) sets it back.
  float mirostat_mu() const { return mu_; }
  void set_mirostat_mu(float mu) { mu_ = mu; }
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
  // The repetition, presence and frequency penalties on work_.
  void Penalties(std::span<const int32_t> history, int32_t n_vocab);
  static int32_t Greedy(const float* logits, int32_t n_vocab);
  // Fills candidates_ with the top_k best tokens, best first, or with every token in id order
  // when there is no top-k cut (or `all`). Returns whether candidates_ is sorted best first.
  bool SelectTopK(const float* logits, int32_t n_vocab, bool all);
  // Leaves candidates_ as the set the draw picks from, with their weights (Sample's pipeline
  // after the penalties).
  void Cut(const float* logits, int32_t n_vocab);
  // Sets every candidate's weight at `temperature` and returns their sum.
  double Weigh(float temperature);
  // dynatemp: the temperature the top-k set's entropy at temperature 1 calls for (it weighs
  // the set at 1 to find it).
  float DynamicTemperature();
  // The entropy (nats) of the candidates' weights, `total` being their sum.
  double Entropy(double total) const;
  void CutTopNSigma();
  // Each returns the weight sum of what it keeps. `sorted`: candidates_ is best first, and
  // stays so (typical-p leaves it unsorted).
  double CutTypical(double total, bool* sorted);
  void CutMinP(bool* sorted);
  // Keeps the nucleus: the shortest best-first prefix of candidates_ whose weights add up to
  // top_p * total, `total` being the weight sum of the set before min-p removed its tail. An
  // unsorted set stays unsorted (only the boundary is ordered).
  void CutTopP(double total, bool sorted);
  void CutXtc(bool* sorted);
  // Mirostat's cut of the whole vocabulary (all candidates weighed).
  void CutMirostat(double total, int32_t n_vocab);
  // Sorts candidates_ best first (higher weight, then logit and id as Better).
  void SortBestFirst();
  // The index in candidates_ of a draw proportional to the weights.
  size_t Draw();
  // A uniform double in [0, 1) from 53 bits of rng_: the same on every standard library,
  // unlike std::uniform_real_distribution.
  double NextUniform();

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<float> work_;  // biased, penalized copy of the logits (Penalize)
  std::vector<Candidate> candidates_;
  std::vector<int32_t> window_;  // sorted copy of the penalty window of the history
  float mu_ = 0;                 // mirostat's bound on surprise, in bits
  DryState dry_;
};

}  // namespace promptcache
