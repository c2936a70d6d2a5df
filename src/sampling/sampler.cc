#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace promptcache {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// A NaN logit counts as -infinity: it would break the ordering the heap and sorts rely on.
float NotNan(float logit) {
  return logit != logit ? -std::numeric_limits<float>::infinity() : logit;
}

// Best first: higher logit, then lower id, so that every cut is deterministic under ties.
bool Better(float logit_a, int32_t id_a, float logit_b, int32_t id_b) {
  return logit_a > logit_b || (logit_a == logit_b && id_a < id_b);
}

}  // namespace

Status SamplingParams::Validate() const {
  if (!(temperature >= 0) || std::isinf(temperature)) {
    return InvalidArgument("temperature must be a finite number >= 0, got " + Num(temperature));
  }
  if (top_k < 0) return InvalidArgument("top_k must be >= 0 (0 disables it), got " + Num(top_k));
  if (!(top_p > 0 && top_p <= 1)) {
    return InvalidArgument("top_p must be in (0, 1] (1 disables it), got " + Num(top_p));
  }
  if (!(min_p >= 0 && min_p <= 1)) {
    return InvalidArgument("min_p must be in [0, 1] (0 disables it), got " + Num(min_p));
  }
  if (!(repeat_penalty > 0) || std::isinf(repeat_penalty)) {
    return InvalidArgument("repeat_penalty must be a finite number > 0 (1 disables it), got " +
                           Num(repeat_penalty));
  }
  if (repeat_last_n < -1) {
    return InvalidArgument("repeat_last_n must be >= -1 (-1: whole history, 0: none), got " +
                           Num(repeat_last_n));
  }
  if (!std::isfinite(presence_penalty)) {
    return InvalidArgument("presence_penalty must be finite, got " + Num(presence_penalty));
  }
  if (!std::isfinite(frequency_penalty)) {
    return InvalidArgument("frequency_penalty must be finite, got " + Num(frequency_penalty));
  }
  return ValidateLogitBias();
}

Status SamplingParams::ValidateLogitBias() const {
  if (logit_bias.size() > kMaxLogitBias) {
    return InvalidArgument("logit_bias has " + std::to_string(logit_bias.size()) +
                           " entries, at most " + std::to_string(kMaxLogitBias) + " are allowed");
  }
  std::vector<int32_t> ids;
  ids.reserve(logit_bias.size());
  for (const LogitBias& b : logit_bias) {
    if (b.token < 0) return InvalidArgument("logit_bias token " + Num(b.token) + " is negative");
    if (!(b.bias >= -kMaxLogitBiasValue && b.bias <= kMaxLogitBiasValue)) {
      return InvalidArgument("logit_bias of token " + Num(b.token) +
                             " must be in [-100, 100], got " + Num(b.bias));
    }
    ids.push_back(b.token);
  }
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  if (dup != ids.end()) return InvalidArgument("logit_bias lists token " + Num(*dup) + " twice");
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  PC_CHECK(params_.Validate().ok());
  seed_ = params_.seed;
  if (seed_ == 0) {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    if (seed_ == 0) seed_ = 1;  // keep 0 meaning "random" when the seed is reported and reused
  }
  rng_.seed(seed_);
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

const float* Sampler::Penalize(const float* logits, int32_t n_vocab,
                               std::span<const int32_t> history) {
  const SamplingParams& p = params_;
  const bool any_penalty =
      p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const bool penalize = any_penalty && p.repeat_last_n != 0 && !history.empty();
  if (!penalize && p.logit_bias.empty()) return logits;
  work_.assign(logits, logits + n_vocab);
  // The bias comes first, as llama.cpp's logit-bias sampler heads its chain: a penalty then
  // scales the biased logit.
  for (const LogitBias& b : p.logit_bias) {
    PC_CHECK(b.token < n_vocab);
    work_[b.token] += b.bias;
  }
  if (!penalize) return work_.data();
  size_t n = history.size();
  if (p.repeat_last_n > 0) n = std::min(n, static_cast<size_t>(p.repeat_last_n));
  window_.assign(history.end() - static_cast<ptrdiff_t>(n), history.end());
  std::sort(window_.begin(), window_.end());
  for (size_t i = 0; i < window_.size();) {
    const int32_t token = window_[i];
    size_t j = i;
    while (j < window_.size() && window_[j] == token) ++j;
    PC_CHECK(token >= 0 && token < n_vocab);
    const auto count = static_cast<float>(j - i);
    float& l = work_[token];
    if (p.repeat_penalty != 1.0f) l = l <= 0 ? l * p.repeat_penalty : l / p.repeat_penalty;
    l -= count * p.frequency_penalty + p.presence_penalty;
    i = j;
  }
  return work_.data();
}

int32_t Sampler::Greedy(const float* logits, int32_t n_vocab) {
  // The best value lives in a register: comparing against logits[best] would make every load
  // wait for the previous comparison. NaN never compares greater, so it is never picked.
  int32_t best = 0;
  float best_logit = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (logits[i] > best_logit) {
      best_logit = logits[i];
      best = i;
    }
  }
  return best;
}

bool Sampler::SelectTopK(const float* logits, int32_t n_vocab) {
  candidates_.clear();
  const int32_t k = params_.top_k;
  if (k == 0 || k >= n_vocab) {
    candidates_.resize(n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) candidates_[i] = {i, NotNan(logits[i]), 0.0f};
    return false;
  }
  // A heap of the k best so far whose top is the worst of them: one comparison rejects almost
  // every token, so this is a single pass over the vocabulary.
  auto better = [](const Candidate& a, const Candidate& b) {
    return Better(a.logit, a.id, b.logit, b.id);
  };
  candidates_.reserve(k);
  for (int32_t i = 0; i < k; ++i) candidates_.push_back({i, NotNan(logits[i]), 0.0f});
  std::make_heap(candidates_.begin(), candidates_.end(), better);
  for (int32_t i = k; i < n_vocab; ++i) {
    // Later ids lose ties, so only a strictly larger logit gets in (never a NaN).
    if (logits[i] > candidates_.front().logit) {
      std::pop_heap(candidates_.begin(), candidates_.end(), better);
      candidates_.back() = {i, logits[i], 0.0f};
      std::push_heap(candidates_.begin(), candidates_.end(), better);
    }
  }
  std::sort_heap(candidates_.begin(), candidates_.end(), better);
  return true;
}

void Sampler::CutTopP(double total, bool sorted) {
  auto better = [](const Candidate& a, const Candidate& b) {
    return Better(a.logit, a.id, b.logit, b.id);
  };
  // The nucleus is the shortest best-first prefix holding top_p * total. Sampling does not
  // need it in order, so for an unsorted set a weighted quickselect finds its boundary in
  // O(n): split the undecided range at its median, keep the better half whole when it holds
  // less than the weight still needed, otherwise look only inside it.
  double need = static_cast<double>(params_.top_p) * total;
  size_t lo = 0;                   // [0, lo) is in the nucleus
  size_t hi = candidates_.size();  // the boundary lies in [lo, hi)
  const auto at = [this](size_t i) { return candidates_.begin() + static_cast<ptrdiff_t>(i); };
  if (!sorted) {
    while (hi - lo > 64) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(at(lo), at(mid), at(hi), better);
      double half = 0;
      for (size_t i = lo; i < mid; ++i) half += candidates_[i].weight;
      if (half >= need) {
        hi = mid;
      } else {
        need -= half;
        lo = mid;
      }
    }
    std::sort(at(lo), at(hi), better);
  }
  double cumulative = 0;
  for (size_t i = lo; i < hi; ++i) {
    cumulative += candidates_[i].weight;
    if (cumulative >= need) {
      candidates_.resize(i + 1);
      return;
    }
  }
  candidates_.resize(hi);  // rounding: the whole undecided range is needed
}

int32_t Sampler::Sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history) {
  PC_CHECK(n_vocab > 0);
  const float* penalized = Penalize(logits, n_vocab, history);
  if (params_.temperature == 0.0f) return Greedy(penalized, n_vocab);

  const bool sorted = SelectTopK(penalized, n_vocab);
  if (candidates_.size() == 1) return candidates_[0].id;

  float max_logit = candidates_[0].logit;
  for (const Candidate& c : candidates_) max_logit = std::max(max_logit, c.logit);
  const float inv_t = 1.0f / params_.temperature;
  double total = 0;
  for (Candidate& c : candidates_) {
    // The equality test keeps the maximum at weight 1 even for infinite logits.
    c.weight = c.logit == max_logit ? 1.0f : std::exp((c.logit - max_logit) * inv_t);
    total += c.weight;
  }

  // min-p and top-p both keep a best-first prefix, so their order does not matter as long as
  // top-p measures mass against the whole set (`total`); filtering by min-p first is cheap
  // (a weight is the probability relative to the top one) and leaves top-p less to sort.
  if (params_.min_p > 0.0f) {
    const float min_p = params_.min_p;
    std::erase_if(candidates_, [min_p](const Candidate& c) { return c.weight < min_p; });
  }
  if (params_.top_p < 1.0f) CutTopP(total, sorted);

  double sum = 0;
  for (const Candidate& c : candidates_) sum += c.weight;
  double r = NextUniform() * sum;
  for (const Candidate& c : candidates_) {
    r -= c.weight;
    if (r < 0) return c.id;
  }
  // Rounding left r at or just above 0: the last token with any weight.
  for (auto it = candidates_.rbegin(); it != candidates_.rend(); ++it) {
    if (it->weight > 0) return it->id;
  }
  return candidates_.front().id;
}

}  // namespace promptcache
