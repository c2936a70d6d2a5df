#include "sampling/dry.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer/tokenizer.h"

namespace promptcache {
namespace {

// How many of the window's newest tokens a repeat may span: those after the latest complete
// breaker (head token, then its tail in order). The whole window when there is none.
int RepeatLimit(const SamplingParams& p, const std::vector<int32_t>& reversed,
                const DryState& state) {
  const int n = static_cast<int>(reversed.size());
  for (int i = 0; i < n; ++i) {
    auto [first, last] = state.by_head.equal_range(reversed[i]);
    int longest = -1;
    for (auto it = first; it != last; ++it) {
      const std::vector<int32_t>& seq = p.dry_breakers[it->second];
      const int tail = static_cast<int>(seq.size()) - 1;
      if (tail <= longest || tail > i) continue;  // the tail must lie inside the window
      bool match = true;
      for (int k = 1; k <= tail && match; ++k) match = seq[k] == reversed[i - k];
      if (match) longest = tail;
    }
    if (longest >= 0) return i - longest;  // the tokens after the breaker's last one
  }
  return n;
}

// z[k] = the length of the longest common prefix of s and s[k..] (z[0] = |s|), in linear time.
void ZArray(const std::vector<int32_t>& s, std::vector<int32_t>* z) {
  const int n = static_cast<int>(s.size());
  z->assign(n, 0);
  if (n == 0) return;
  (*z)[0] = n;
  int box_lo = 0, box_hi = 0;  // s[box_lo, box_hi) matches s's prefix
  for (int k = 1; k < n; ++k) {
    int len = 0;
    if (k < box_hi) len = std::min(box_hi - k, (*z)[k - box_lo]);
    while (k + len < n && s[len] == s[k + len]) ++len;
    (*z)[k] = len;
    if (k + len > box_hi) {
      box_lo = k;
      box_hi = k + len;
    }
  }
}

}  // namespace

void ApplyDry(const SamplingParams& p, std::span<const int32_t> history, float* logits,
              int32_t n_vocab, DryState* state) {
  if (p.dry_multiplier <= 0 || p.dry_penalty_last_n == 0) return;
  if (!state->indexed) {
    for (size_t i = 0; i < p.dry_breakers.size(); ++i) {
      if (p.dry_breakers[i].empty()) continue;
      state->by_head.emplace(p.dry_breakers[i][0], i);
      if (p.dry_breakers[i].size() == 1) state->single.insert(p.dry_breakers[i][0]);
    }
    state->indexed = true;
  }
  size_t n = history.size();
  if (p.dry_penalty_last_n > 0) n = std::min(n, static_cast<size_t>(p.dry_penalty_last_n));
  if (n <= static_cast<size_t>(p.dry_allowed_length)) return;
  // Newest first: a repeat of the text's ending is then a common prefix (the Z-array's).
  state->reversed.assign(history.rbegin(), history.rbegin() + static_cast<ptrdiff_t>(n));
  const int limit = RepeatLimit(p, state->reversed, *state);
  if (limit < p.dry_allowed_length) return;
  ZArray(state->reversed, &state->z);
  // reversed[k - 1] followed the run that ends at reversed[k] (k >= 1); z[k] tokens of that run
  // repeat the text's ending.
  state->longest.clear();
  for (size_t k = 1; k < n; ++k) {
    const int len = std::min(state->z[k], limit);
    if (len < p.dry_allowed_length) continue;
    const int32_t next = state->reversed[k - 1];
    int32_t& best = state->longest[next];
    best = std::max(best, len);
  }
  // base^e overflows a float past log(FLT_MAX) / log(base): the exponent stops there (whole,
  // as llama.cpp counts it).
  const int max_exponent =
      p.dry_base > 1.000001f
          ? static_cast<int>(std::log(std::numeric_limits<float>::max()) / std::log(p.dry_base))
          : 0;
  for (const auto& [token, len] : state->longest) {
    PC_CHECK(token >= 0 && token < n_vocab);
    // A breaker token itself is never penalized: it ends the repeat.
    if (state->single.count(token) != 0) continue;
    int e = len - p.dry_allowed_length;
    if (max_exponent > 0) e = std::min(e, max_exponent);
    logits[token] -= p.dry_multiplier * std::pow(p.dry_base, static_cast<float>(e));
  }
}

std::vector<std::vector<int32_t>> DryBreakerSequences(const Tokenizer& tok,
                                                      const std::vector<std::string>& breakers) {
  constexpr size_t kMaxTail = 8;
  // Per breaker, the tokens of the rest after each possible beginning, tokenized once.
  std::vector<std::vector<std::vector<int32_t>>> tails(breakers.size());
  for (size_t k = 0; k < breakers.size(); ++k) {
    const std::string& b = breakers[k];
    tails[k].resize(b.size());
    for (size_t i = 1; i < b.size(); ++i) {
      tails[k][i] = tok.EncodeContinuation(b.substr(i));
      if (tails[k][i].size() > kMaxTail) tails[k][i].resize(kMaxTail);
    }
  }
  std::vector<std::vector<int32_t>> out;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string text = tok.TokenBytes(id, /*special=*/true);  // once for every breaker
    for (size_t k = 0; k < breakers.size(); ++k) {
      const std::string& b = breakers[k];
      if (b.empty()) continue;
      if (text.find(b) != std::string::npos) {
        out.push_back({id});
        continue;
      }
      // The text ends with b's first i bytes: the token, then the rest's tokens.
      for (size_t i = std::min(text.size(), b.size() - 1); i >= 1; --i) {
        if (text.compare(text.size() - i, i, b, 0, i) != 0) continue;
        std::vector<int32_t> seq = {id};
        seq.insert(seq.end(), tails[k][i].begin(), tails[k][i].end());
        out.push_back(std::move(seq));
      }
    }
  }
  return out;
}

}  // namespace promptcache
