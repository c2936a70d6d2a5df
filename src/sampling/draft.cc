#include "sampling/draft.h"

#include <algorithm>
#include <utility>

namespace promptcache {

int FindRepeat(std::span<const int32_t> hay, std::span<const int32_t> key, size_t from) {
  const size_t n = key.size();
  if (n == 0 || hay.size() <= n) return -1;
  const size_t last = hay.size() - n - 1;  // the last start with a token after the match
  const auto matches = [&](size_t j) {
    return std::equal(key.begin(), key.end(), hay.begin() + j);
  };
  for (size_t j = from; j <= last; ++j) {
    if (matches(j)) return static_cast<int>(j);
  }
  for (size_t j = std::min(from, last + 1); j-- > 0;) {
    if (matches(j)) return static_cast<int>(j);
  }
  return -1;
}

Drafter::Drafter(const DraftOptions& options, std::vector<int32_t> prediction)
    : options_(options), prediction_(std::move(prediction)), length_(options.max) {}

bool Drafter::FollowsPrediction(std::span<const int32_t> output) {
  while (!diverged_ && checked_ < static_cast<int>(output.size())) {
    if (checked_ >= static_cast<int>(prediction_.size()) ||
        output[checked_] != prediction_[checked_]) {
      diverged_ = true;
      // An edit near here: the prediction is picked up again from about this point on.
      resume_ = std::max(0, checked_ - options_.ngram_max);
    } else {
      ++checked_;
    }
  }
  return !diverged_;
}

std::vector<int32_t> Drafter::Propose(std::span<const int32_t> text, int generated, int limit) {
  std::vector<int32_t> out;
  const int most = std::min(limit, length_);
  if (!enabled() || most <= 0) return out;
  if (pause_ > 0) {
    --pause_;
    return out;
  }
  const auto take = [&](std::span<const int32_t> from, size_t at) {
    const size_t n = std::min(static_cast<size_t>(most), from.size() - at);
    out.assign(from.begin() + at, from.begin() + at + n);
  };
  generated = std::clamp(generated, 0, static_cast<int>(text.size()));
  if (!prediction_.empty()) {
    if (FollowsPrediction(text.last(generated)) &&
        generated < static_cast<int>(prediction_.size())) {
      take(prediction_, generated);
      return out;
    }
    // The caller's prediction is the only source, and trusted down to one token: the nearest
    // occurrence from where it was last picked up (an edit moves forward).
    for (int n = std::min<int>(options_.ngram_max, text.size()); n >= 1; --n) {
      const int j = FindRepeat(prediction_, text.last(n), resume_);
      if (j >= 0) {
        resume_ = j;
        take(prediction_, j + n);
        return out;
      }
    }
    return out;
  }
  // Prompt lookup, in one pass back over the text: each earlier end e (a token follows it) with
  // how many tokens before it match the text's last ones (at most ngram_max); the longest match,
  // the most recent among equals.
  const int least = std::max(1, options_.ngram_min);
  const int L = static_cast<int>(text.size());
  int best_end = -1, best_len = least - 1;
  for (int e = L - 1; e >= least && best_len < options_.ngram_max; --e) {
    int len = 0;
    while (len < options_.ngram_max && len < e && text[e - 1 - len] == text[L - 1 - len]) ++len;
    if (len > best_len) {
      best_len = len;
      best_end = e;
    }
  }
  if (best_end >= 0) take(text, best_end);
  return out;
}

void Drafter::Observe(int drafted, int accepted) {
  if (drafted <= 0 || !enabled()) return;
  length_ = accepted >= drafted ? std::min(options_.max, length_ * 2) : std::max(1, accepted + 1);
  backoff_ = accepted > 0 ? 0 : std::min(2 * backoff_ + 1, kMaxDraftPause);
  pause_ = backoff_;
}

}  // namespace promptcache
