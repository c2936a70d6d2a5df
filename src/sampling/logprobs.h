// Log-probabilities for clients (OpenAI's logprobs, top_logprobs and echo): one token's
// log-softmax with its best alternatives, and a memo of prompt tokens' values keyed by their
// prefix, so that a prompt whose prefix comes from the block cache (whose logits were never
// kept) still reports every prompt token without recomputing it. Scoring many continuations of
// one long shared context, as evaluation harnesses do, then computes only each continuation.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>

#include "promptcache/engine.h"

namespace promptcache {

// `token`'s log-probability under log-softmax(logits[0..n_vocab)) and the `top` most likely
// tokens (ties: lower id first). NaN logits count as -infinity.
TokenLogprob ComputeLogprob(const float* logits, int32_t n_vocab, int32_t token, int top);

// Hashes of a token sequence's prefixes: PrefixHashes(t)[i] identifies t[0..i].
std::vector<uint64_t> PrefixHashes(std::span<const int32_t> tokens);

// Bounded memo of prompt-token log-probabilities: the entry for prefix hash h is the
// log-probability of the prefix's last token given the tokens before it, with `top`
// alternatives. Oldest entries go first beyond the capacity.
class LogprobMemo {
 public:
  explicit LogprobMemo(size_t capacity) : capacity_(capacity) {}
  // The entry for `hash` when it holds `token` with at least `top` alternatives (trimmed to top).
  bool Find(uint64_t hash, int32_t token, int top, TokenLogprob* out) const;
  void Insert(uint64_t hash, const TokenLogprob& value);
  size_t size() const { return map_.size(); }

 private:
  size_t capacity_;
  std::unordered_map<uint64_t, TokenLogprob> map_;
  std::deque<uint64_t> order_;  // insertion order, for eviction
};

}  // namespace promptcache
