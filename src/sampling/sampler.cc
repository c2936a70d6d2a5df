#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "sampling/dry.h"

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

// Best first by weight (probability), ties as Better: the order of the cuts that work on
// probabilities.
struct ByWeight {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    if (a.weight != b.weight) return a.weight > b.weight;
    return Better(a.logit, a.id, b.logit, b.id);
  }
};

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
  if (min_keep < 0) return InvalidArgument("min_keep must be >= 0, got " + Num(min_keep));
  if (!(dynatemp_range >= 0) || std::isinf(dynatemp_range)) {
    return InvalidArgument("dynatemp_range must be a finite number >= 0 (0 disables it), got " +
                           Num(dynatemp_range));
  }
  if (!(dynatemp_exponent >= 0) || std::isinf(dynatemp_exponent)) {
    return InvalidArgument("dynatemp_exponent must be a finite number >= 0, got " +
                           Num(dynatemp_exponent));
  }
  if (!(top_n_sigma >= 0 || top_n_sigma == -1.0f) || std::isinf(top_n_sigma)) {
    return InvalidArgument("top_n_sigma must be a finite number >= 0 (-1 disables it), got " +
                           Num(top_n_sigma));
  }
  if (!(typical_p > 0 && typical_p <= 1)) {
    return InvalidArgument("typical_p must be in (0, 1] (1 disables it), got " + Num(typical_p));
  }
  if (!(xtc_probability >= 0 && xtc_probability <= 1)) {
    return InvalidArgument("xtc_probability must be in [0, 1] (0 disables it), got " +
                           Num(xtc_probability));
  }
  if (!(xtc_threshold >= 0 && xtc_threshold <= 1)) {
    return InvalidArgument("xtc_threshold must be in [0, 1], got " + Num(xtc_threshold));
  }
  if (mirostat < 0 || mirostat > 2) {
    return InvalidArgument("mirostat must be 0 (off), 1 or 2, got " + Num(mirostat));
  }
  if (!(mirostat_tau >= 0) || std::isinf(mirostat_tau)) {
    return InvalidArgument("mirostat_tau must be a finite number >= 0, got " + Num(mirostat_tau));
  }
  if (!(mirostat_eta >= 0) || std::isinf(mirostat_eta)) {
    return InvalidArgument("mirostat_eta must be a finite number >= 0, got " + Num(mirostat_eta));
  }
  if (!(dry_multiplier >= 0) || std::isinf(dry_multiplier)) {
    return InvalidArgument("dry_multiplier must be a finite number >= 0 (0 disables it), got " +
                           Num(dry_multiplier));
  }
  if (!(dry_base >= 1) || std::isinf(dry_base)) {
    return InvalidArgument("dry_base must be a finite number >= 1, got " + Num(dry_base));
  }
  if (dry_allowed_length < 0) {
    return InvalidArgument("dry_allowed_length must be >= 0, got " + Num(dry_allowed_length));
  }
  if (dry_penalty_last_n < -1) {
    return InvalidArgument("dry_penalty_last_n must be >= -1 (-1: whole history, 0: off), got " +
                           Num(dry_penalty_last_n));
  }
  for (const std::vector<int32_t>& seq : dry_breakers) {
    if (seq.empty()) return InvalidArgument("dry_breakers holds an empty sequence");
    for (int32_t id : seq) {
      if (id < 0) return InvalidArgument("dry_breakers holds token " + Num(id));
    }
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
  mu_ = 2.0f * params_.mirostat_tau;
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

const float* Sampler::Penalize(const float* logits, int32_t n_vocab,
                               std::span<const int32_t> history) {
  const SamplingParams& p = params_;
  const bool any_penalty =
      p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const bool penalize = any_penalty && p.repeat_last_n != 0 && !history.empty();
  const bool dry = p.dry_multiplier > 0 && p.dry_penalty_last_n != 0 && !history.empty();
  if (!penalize && !dry && p.logit_bias.empty()) return logits;
  work_.assign(logits, logits + n_vocab);
  // The bias comes first, as llama.cpp's logit-bias sampler heads its chain: a penalty then
  // scales the biased logit.
  for (const LogitBias& b : p.logit_bias) {
    PC_CHECK(b.token < n_vocab);
    work_[b.token] += b.bias;
  }
  if (penalize) Penalties(history, n_vocab);
  if (dry) ApplyDry(p, history, work_.data(), n_vocab, &dry_);  // after the penalties, as llama.cpp
  return work_.data();
}

void Sampler::Penalties(std::span<const int32_t> history, int32_t n_vocab) {
  const SamplingParams& p = params_;
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

bool Sampler::SelectTopK(const float* logits, int32_t n_vocab, bool all) {
  candidates_.clear();
  const int32_t k = params_.top_k;
  if (all || k == 0 || k >= n_vocab) {
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
  const auto min_keep = static_cast<size_t>(params_.min_keep);  // sorted when above 1
  for (size_t i = lo; i < hi; ++i) {
    cumulative += candidates_[i].weight;
    if (cumulative >= need && i + 1 >= min_keep) {
      candidates_.resize(i + 1);
      return;
    }
  }
  candidates_.resize(hi);  // rounding: the whole undecided range is needed
}

double Sampler::Weigh(float temperature) {
  float max_logit = candidates_[0].logit;
  for (const Candidate& c : candidates_) max_logit = std::max(max_logit, c.logit);
  const float inv_t = 1.0f / temperature;  // infinite at a dynamic temperature of 0: greedy
  double total = 0;
  for (Candidate& c : candidates_) {
    // The equality test keeps the maximum at weight 1 even for infinite logits.
    c.weight = c.logit == max_logit ? 1.0f : std::exp((c.logit - max_logit) * inv_t);
    total += c.weight;
  }
  return total;
}

double Sampler::Entropy(double total) const {
  double entropy = 0;
  for (const Candidate& c : candidates_) {
    const double p = c.weight / total;
    if (p > 0) entropy -= p * std::log(p);
  }
  return entropy;
}

float Sampler::DynamicTemperature() {
  const float t = params_.temperature;
  if (params_.dynatemp_range <= 0 || candidates_.size() <= 1) return t;
  const double total = Weigh(1.0f);  // the set's own distribution
  const double normalized = Entropy(total) / std::log(static_cast<double>(candidates_.size()));
  const float lo = std::max(0.0f, t - params_.dynatemp_range);
  const float hi = t + params_.dynatemp_range;
  return lo + (hi - lo) * static_cast<float>(std::pow(normalized, params_.dynatemp_exponent));
}

void Sampler::CutTopNSigma() {
  // Over the finite logits: a banned token (-infinity) would make the spread infinite.
  double sum = 0;
  size_t n = 0;
  float best = -std::numeric_limits<float>::infinity();
  for (const Candidate& c : candidates_) {
    if (!std::isfinite(c.logit)) continue;
    sum += c.logit;
    ++n;
    best = std::max(best, c.logit);
  }
  if (n == 0) return;
  const double mean = sum / static_cast<double>(n);
  double var = 0;
  for (const Candidate& c : candidates_) {
    if (std::isfinite(c.logit)) var += (c.logit - mean) * (c.logit - mean);
  }
  const double floor = best - params_.top_n_sigma * std::sqrt(var / static_cast<double>(n));
  // Erasing keeps the order: a sorted set stays sorted, and the best token always stays.
  std::erase_if(candidates_, [floor](const Candidate& c) { return c.logit < floor; });
}

void Sampler::SortBestFirst() { std::sort(candidates_.begin(), candidates_.end(), ByWeight()); }

double Sampler::CutTypical(double total, bool* sorted) {
  // Surprise -log p against the entropy H: the tokens whose surprise is nearest H come first.
  const double entropy = Entropy(total);
  struct Scored {
    double distance;
    Candidate c;
  };
  std::vector<Scored> scored;
  scored.reserve(candidates_.size());
  for (const Candidate& c : candidates_) {
    const double p = c.weight / total;
    const double d =
        p > 0 ? std::abs(-std::log(p) - entropy) : std::numeric_limits<double>::infinity();
    scored.push_back({d, c});
  }
  std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    return Better(a.c.logit, a.c.id, b.c.logit, b.c.id);
  });
  const size_t min_keep = std::max<size_t>(1, static_cast<size_t>(params_.min_keep));
  double cumulative = 0;
  size_t keep = scored.size();
  for (size_t i = 0; i < scored.size(); ++i) {
    cumulative += scored[i].c.weight / total;
    if (cumulative > params_.typical_p && i + 1 >= min_keep) {
      keep = i + 1;
      break;
    }
  }
  candidates_.clear();
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) {
    candidates_.push_back(scored[i].c);
    kept += scored[i].c.weight;
  }
  *sorted = false;
  return kept;
}

void Sampler::CutMinP(bool* sorted) {
  // Relative to the most probable token left (typical-p may have removed the best one).
  float top = 0;
  for (const Candidate& c : candidates_) top = std::max(top, c.weight);
  const float floor = params_.min_p * top;
  const auto min_keep = static_cast<size_t>(params_.min_keep);
  if (min_keep > 1) {
    if (!*sorted) SortBestFirst();
    *sorted = true;
    size_t keep = min_keep;
    while (keep < candidates_.size() && candidates_[keep].weight >= floor) ++keep;
    if (keep < candidates_.size()) candidates_.resize(keep);
    return;
  }
  std::erase_if(candidates_, [floor](const Candidate& c) { return c.weight < floor; });
}

void Sampler::CutXtc(bool* sorted) {
  if (!*sorted) SortBestFirst();
  *sorted = true;
  double sum = 0;
  for (const Candidate& c : candidates_) sum += c.weight;
  // The last of the best-first run of tokens at least xtc_threshold probable.
  size_t last = 0;
  while (last + 1 < candidates_.size() &&
         candidates_[last + 1].weight >= params_.xtc_threshold * sum) {
    ++last;
  }
  if (candidates_[0].weight < params_.xtc_threshold * sum) return;  // none is that probable
  const size_t min_keep = static_cast<size_t>(params_.min_keep);
  if (last > 0 && candidates_.size() - last >= min_keep) {
    candidates_.erase(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(last));
  }
}

void Sampler::CutMirostat(double total, int32_t n_vocab) {
  if (params_.mirostat == 2) {
    // Surprise -log2(p) at most mu: p at least 2^-mu. The best token stays in any case.
    const double floor = total * std::exp2(-static_cast<double>(mu_));
    // The best token has weight 1 (Weigh); only what passes is sorted.
    std::erase_if(candidates_,
                  [floor](const Candidate& c) { return c.weight < floor && c.weight < 1.0f; });
    SortBestFirst();
    candidates_.resize(1 +
                       std::count_if(candidates_.begin() + 1, candidates_.end(),
                                     [floor](const Candidate& c) { return c.weight >= floor; }));
    return;
  }
  // Mirostat 1: estimate the Zipf exponent s from the 100 most probable tokens, then keep the
  // top k that makes the expected surprise mu.
  const size_t m = std::min<size_t>(100, candidates_.size());
  const auto mid = candidates_.begin() + static_cast<ptrdiff_t>(m);
  std::partial_sort(candidates_.begin(), mid, candidates_.end(), ByWeight());
  double sum_tb = 0, sum_tt = 0;
  for (size_t i = 0; i + 1 < m && candidates_[i + 1].weight > 0; ++i) {
    const double t = std::log(static_cast<double>(i + 2) / static_cast<double>(i + 1));
    const double b = std::log(static_cast<double>(candidates_[i].weight) /
                              static_cast<double>(candidates_[i + 1].weight));
    sum_tb += t * b;
    sum_tt += t * t;
  }
  if (sum_tt == 0) {  // a single token with any weight
    candidates_.resize(1);
    return;
  }
  const double s = sum_tb / sum_tt;
  const double eps = s - 1;
  const double k = std::pow(eps * std::exp2(static_cast<double>(mu_)) /
                                (1 - std::pow(static_cast<double>(n_vocab), -eps)),
                            1 / s);
  size_t keep = candidates_.size();
  if (std::isfinite(k) && k < static_cast<double>(keep)) {
    keep = std::max<size_t>(1, static_cast<size_t>(k));
  }
  if (keep > m) {
    std::nth_element(mid, candidates_.begin() + static_cast<ptrdiff_t>(keep - 1), candidates_.end(),
                     ByWeight());
  }
  candidates_.resize(keep);
}

void Sampler::Cut(const float* logits, int32_t n_vocab) {
  const SamplingParams& p = params_;
  if (p.mirostat != 0) {
    SelectTopK(logits, n_vocab, /*all=*/true);
    CutMirostat(Weigh(p.temperature), n_vocab);
    return;
  }
  bool sorted = SelectTopK(logits, n_vocab, /*all=*/false);
  if (p.top_n_sigma >= 0) CutTopNSigma();
  if (candidates_.size() == 1) return;
  double total = Weigh(DynamicTemperature());
  if (p.typical_p < 1.0f) total = CutTypical(total, &sorted);
  // min-p and top-p both keep a best-first prefix, so their order does not matter as long as
  // top-p measures mass against the whole set (`total`); filtering by min-p first is cheap
  // (a weight is the probability relative to the top one) and leaves top-p less to sort.
  if (p.min_p > 0.0f) CutMinP(&sorted);
  if (p.top_p < 1.0f) {
    if (p.min_keep > 1 && !sorted) {
      SortBestFirst();
      sorted = true;
    }
    CutTopP(total, sorted);
  }
  if (p.xtc_probability > 0 && NextUniform() < p.xtc_probability) CutXtc(&sorted);
}

size_t Sampler::Draw() {
  double sum = 0;
  for (const Candidate& c : candidates_) sum += c.weight;
  double r = NextUniform() * sum;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    r -= candidates_[i].weight;
    if (r < 0) return i;
  }
  // Rounding left r at or just above 0: the last token with any weight.
  for (size_t i = candidates_.size(); i-- > 0;) {
    if (candidates_[i].weight > 0) return i;
  }
  return 0;
}

int32_t Sampler::Sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history) {
  PC_CHECK(n_vocab > 0);
  const float* penalized = Penalize(logits, n_vocab, history);
  if (params_.temperature == 0.0f) return Greedy(penalized, n_vocab);
  Cut(penalized, n_vocab);
  // (Mirostat learns from every step, a certain one too; other settings draw nothing then.)
  if (candidates_.size() == 1 && params_.mirostat == 0) return candidates_[0].id;
  const size_t i = Draw();
  if (params_.mirostat != 0) {
    double sum = 0;
    for (const Candidate& c : candidates_) sum += c.weight;
    const double surprise = -std::log2(static_cast<double>(candidates_[i].weight) / sum);
    mu_ -= params_.mirostat_eta * static_cast<float>(surprise - params_.mirostat_tau);
  }
  return candidates_[i].id;
}

std::vector<Sampler::Choice> Sampler::Distribution(const float* logits, int32_t n_vocab,
                                                   std::span<const int32_t> history) {
  PC_CHECK(n_vocab > 0);
  const float* penalized = Penalize(logits, n_vocab, history);
  if (params_.temperature == 0.0f) return {{Greedy(penalized, n_vocab), 1.0}};
  Cut(penalized, n_vocab);
  if (candidates_.size() == 1) return {{candidates_[0].id, 1.0}};
  SortBestFirst();
  double sum = 0;
  for (const Candidate& c : candidates_) sum += c.weight;
  std::vector<Choice> out;
  out.reserve(candidates_.size());
  for (const Candidate& c : candidates_) out.push_back({c.id, c.weight / sum});
  return out;
}

}  // namespace promptcache
