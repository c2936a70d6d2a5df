#include "engine/blend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>

#include "model/kv_rows.h"
#include "ops/vec.h"

namespace promptcache {
namespace {

// Layer `l`'s V row of `slot`, as floats.
void ReadV(const KvSequence& seq, int slot, int l, std::vector<float>* out) {
  const KvLayout& layout = seq.pool()->layout();
  const int d = layout.kv_dim();
  out->resize(d);
  const uint8_t* p = seq.SlotV(slot, l);
  LoadKvRow(layout.type, p, d, out->data());
}

// Runs `tokens` at `slots` of seq in place, in batches, through the first `layers` (0: all).
Status RunInPlace(const Model& model, KvSequence* seq, const std::vector<int>& slots,
                  const std::vector<int32_t>& tokens, int layers, int batch_size, ThreadPool* pool,
                  ForwardScratch* scratch) {
  std::vector<BatchToken> batch;
  for (size_t b = 0; b < slots.size(); b += batch_size) {
    batch.clear();
    for (size_t i = b; i < std::min(slots.size(), b + batch_size); ++i) {
      batch.push_back({tokens[i], seq->Position(slots[i]), seq, false, slots[i]});
    }
    PC_RETURN_IF_ERROR(model.Forward(batch, nullptr, pool, scratch, layers));
  }
  return Status::Ok();
}

// Runs the tokens at `slots` through the first `layers` in place and keeps the `keep` whose
// values on the last of them moved most (ties to the earlier token), in slot order.
Status Select(const Model& model, KvSequence* seq, int layers, int keep, int batch_size,
              ThreadPool* pool, ForwardScratch* scratch, std::vector<int>* slots,
              std::vector<int32_t>* tokens) {
  const int n = static_cast<int>(slots->size());
  if (keep >= n) return Status::Ok();
  const int l = layers - 1;
  std::vector<std::vector<float>> cached(n);
  for (int i = 0; i < n; ++i) ReadV(*seq, (*slots)[i], l, &cached[i]);
  PC_RETURN_IF_ERROR(RunInPlace(model, seq, *slots, *tokens, layers, batch_size, pool, scratch));
  std::vector<double> deviation(n);
  std::vector<float> fresh;
  for (int i = 0; i < n; ++i) {
    ReadV(*seq, (*slots)[i], l, &fresh);
    double d = 0;
    for (size_t j = 0; j < fresh.size(); ++j) {
      const double x = double(fresh[j]) - cached[i][j];
      d += x * x;
    }
    deviation[i] = d;
  }
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), [&](int a, int b) {
    return deviation[a] != deviation[b] ? deviation[a] > deviation[b] : a < b;
  });
  idx.resize(keep);
  std::sort(idx.begin(), idx.end());
  std::vector<int> kept_slots;
  std::vector<int32_t> kept_tokens;
  for (int i : idx) {
    kept_slots.push_back((*slots)[i]);
    kept_tokens.push_back((*tokens)[i]);
  }
  *slots = std::move(kept_slots);
  *tokens = std::move(kept_tokens);
  return Status::Ok();
}

}  // namespace

Status Blend(const Model& model, KvSequence* seq, const BlendInput& in, double ratio,
             int batch_size, ThreadPool* pool, ForwardScratch* scratch, BlendStats* stats) {
  PC_CHECK(in.slots.size() == in.tokens.size());
  PC_CHECK(in.computed_slots.size() == in.computed_tokens.size());
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(in.slots.size());
  // The share picks among the candidates that are not forced.
  std::vector<int> chosen_slots;
  std::vector<int32_t> chosen_tokens;
  std::vector<std::pair<int, int32_t>> run;  // every token of the last pass
  for (int i = 0; i < n; ++i) {
    if (std::binary_search(in.forced.begin(), in.forced.end(), in.slots[i])) {
      run.push_back({in.slots[i], in.tokens[i]});
    } else {
      chosen_slots.push_back(in.slots[i]);
      chosen_tokens.push_back(in.tokens[i]);
    }
  }
  const int forced = static_cast<int>(run.size());
  const int k = std::clamp(static_cast<int>(std::lround(ratio * n)), 0, n - forced);
  stats->candidates += n;
  if (k == 0 && forced == 0) return Status::Ok();
  // The first slot whose K/V change: computed tokens before it saw nothing that does.
  int first_changed = forced > 0 ? run.front().first : INT32_MAX;
  if (k > 0 && !chosen_slots.empty()) first_changed = std::min(first_changed, chosen_slots[0]);
  const int n_layers = model.config().n_layers;
  // CacheBlend's gradual filtering: every candidate through two layers, the 3k whose values
  // move most through three, the k that move most of those through every layer. (On the story
  // prompts at 15%: top-1 agreement 98.1% and first-token KL 0.0025 against 96.2% and 0.0058
  // with one round, and 97.5% with 2k kept in the first round.)
  const int rounds[][2] = {{2, 3 * k}, {3, k}};
  const int first_candidate = chosen_slots.empty() ? INT32_MAX : chosen_slots[0];
  for (const auto& [layers, keep] : rounds) {
    // k 0 (only forced tokens): nothing to pick, and no probe (it would rewrite every
    // candidate's first layers, a partial recompute the share does not count).
    if (k == 0 || static_cast<int>(chosen_slots.size()) <= k || layers >= n_layers) break;
    first_changed = std::min(first_changed, first_candidate);  // probed in place
    PC_RETURN_IF_ERROR(Select(model, seq, layers, std::max(keep, k), batch_size, pool, scratch,
                              &chosen_slots, &chosen_tokens));
  }
  if (static_cast<int>(chosen_slots.size()) > k) {
    chosen_slots.resize(k);  // too few layers to probe: the first k
    chosen_tokens.resize(k);
  }
  // The chosen, the forced and the computed tokens after the first change, in slot order, in one
  // in-place pass.
  for (size_t i = 0; i < chosen_slots.size(); ++i) {
    run.push_back({chosen_slots[i], chosen_tokens[i]});
  }
  for (size_t i = 0; i < in.computed_slots.size(); ++i) {
    if (in.computed_slots[i] > first_changed) {
      run.push_back({in.computed_slots[i], in.computed_tokens[i]});
    }
  }
  std::sort(run.begin(), run.end());
  chosen_slots.clear();
  chosen_tokens.clear();
  for (const auto& [slot, token] : run) {
    chosen_slots.push_back(slot);
    chosen_tokens.push_back(token);
  }
  PC_RETURN_IF_ERROR(
      RunInPlace(model, seq, chosen_slots, chosen_tokens, 0, batch_size, pool, scratch));
  stats->recomputed += k + forced;
  stats->forced += forced;
  stats->ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

}  // namespace promptcache
