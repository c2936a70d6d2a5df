// DRY ("Don't Repeat Yourself", as llama.cpp and KoboldCpp have it): a penalty on the tokens
// that would continue a repeat. When the text's last L tokens also stand earlier in the window,
// followed there by token t, emitting t would make the repeat L + 1 long; once L reaches
// dry_allowed_length, t's logit loses dry_multiplier * dry_base^(L - dry_allowed_length), L the
// longest such repeat that t continues (a one-token breaker is never penalized). A repeat never
// reaches back across a sequence breaker (a newline, a colon, a quote, an asterisk by default):
// what came before the latest breaker does not count, so a list's items or a dialogue's turns
// may start alike.
//
// Breakers are strings to clients and token sequences here (SamplingParams::dry_breakers):
// DryBreakerSequences finds them in a vocabulary, as llama.cpp does: every token whose text holds
// the string, and every token whose text ends with the string's beginning followed by the
// tokens of the rest.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/check.h"
#include "promptcache/sampling.h"

namespace promptcache {

class Tokenizer;

// What ApplyDry keeps between calls of one request (the breakers' index, buffers).
struct DryState {
  bool indexed = false;
  std::unordered_multimap<int32_t, size_t> by_head;  // first token -> index in dry_breakers
  std::unordered_set<int32_t> single;                // one-token breakers
  std::vector<int32_t> reversed;                     // the window, newest first
  std::vector<int32_t> z;                            // Z-array of `reversed`
  std::unordered_map<int32_t, int32_t> longest;      // token -> longest repeat it continues
};

// Subtracts the DRY penalty from logits[0..n_vocab) for the history's tokens (prompt and output,
// oldest first), over its last dry_penalty_last_n (-1: all). No-op unless dry_multiplier > 0.
void ApplyDry(const SamplingParams& p, std::span<const int32_t> history, float* logits,
              int32_t n_vocab, DryState* state);

// The breaker strings' token sequences in `tok`'s vocabulary (see above); a tail is cut at 8
// tokens, an empty string breaks nothing.
std::vector<std::vector<int32_t>> DryBreakerSequences(const Tokenizer& tok,
                                                      const std::vector<std::string>& breakers);

}  // namespace promptcache
