#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace promptcache {

TokenLogprob ComputeLogprob(const float* logits, int32_t n_vocab, int32_t token, int top) {
  auto value = [&](int32_t i) {
    const float x = logits[i];
    return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
  };
  float max = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n_vocab; ++i) max = std::max(max, value(i));
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(value(i)) - max);
  const double lse = double(max) + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(value(token) - lse);
  top = std::min<int>(top, n_vocab);
  if (top <= 0) return out;
  // A running list of the best `top`, kept sorted: top is at most 20, so an insertion is cheap
  // and most tokens fail the first comparison.
  std::vector<std::pair<int32_t, float>> best;
  best.reserve(top + 1);
  for (int32_t i = 0; i < n_vocab; ++i) {
    const float x = value(i);
    if (static_cast<int>(best.size()) == top && !(x > best.back().second)) continue;
    auto it =
        std::upper_bound(best.begin(), best.end(), x,
                         [](float v, const std::pair<int32_t, float>& e) { return v > e.second; });
    best.insert(it, {i, x});
    if (static_cast<int>(best.size()) > top) best.pop_back();
  }
  for (auto& [id, x] : best) x = static_cast<float>(x - lse);
  out.top = std::move(best);
  return out;
}

std::vector<uint64_t> PrefixHashes(std::span<const int32_t> tokens) {
  std::vector<uint64_t> out(tokens.size());
  uint64_t h = 0x6a09e667f3bcc908ull;
  for (size_t i = 0; i < tokens.size(); ++i) {
    // splitmix64 over the running state and the token: a 64-bit key per prefix.
    uint64_t z = h ^ (uint64_t(uint32_t(tokens[i])) + 0x9e3779b97f4a7c15ull + (i << 32));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
    out[i] = h;
  }
  return out;
}

bool LogprobMemo::Find(uint64_t hash, int32_t token, int top, TokenLogprob* out) const {
  auto it = map_.find(hash);
  if (it == map_.end() || it->second.token != token) return false;
  if (static_cast<int>(it->second.top.size()) < top) return false;
  *out = it->second;
  out->top.resize(std::max(0, top));
  return true;
}

void LogprobMemo::Insert(uint64_t hash, const TokenLogprob& value) {
  auto [it, inserted] = map_.insert_or_assign(hash, value);
  if (!inserted) return;
  order_.push_back(hash);
  while (map_.size() > capacity_ && !order_.empty()) {
    map_.erase(order_.front());
    order_.pop_front();
  }
}

}  // namespace promptcache
