#include "model/moe.h"

#include "core/check.h"
#include "ops/vec.h"

namespace promptcache {

void RouteToken(float* logits, int n_expert, int k, int32_t* ids, float* weights, bool normalize) {
  PC_CHECK(k >= 1 && k <= n_expert);
  Softmax(logits, n_expert);
  // k passes of a selection: O(k * n_expert), cheaper than sorting when k is small.
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int i = 0; i < j && !taken; ++i) taken = ids[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ids[j] = best;
  }
  if (!normalize) {
    for (int j = 0; j < k; ++j) weights[j] = logits[ids[j]];
    return;
  }
  // Summed in double and divided in float, as ggml's sum_rows and div do.
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += logits[ids[j]];
  const float total = static_cast<float>(sum);
  for (int j = 0; j < k; ++j) weights[j] = logits[ids[j]] / total;
}

void GroupByExpert(const int32_t* ids, int T, int k, int n_expert, ExpertGroups* g) {
  g->first.assign(n_expert, 0);
  g->count.assign(n_expert, 0);
  const int n = T * k;
  for (int i = 0; i < n; ++i) {
    PC_CHECK(ids[i] >= 0 && ids[i] < n_expert);
    ++g->count[ids[i]];
  }
  int64_t next = 0;
  for (int e = 0; e < n_expert; ++e) {
    g->first[e] = next;
    next += g->count[e];
  }
  g->row_token.resize(n);
  g->choice_row.resize(n);
  std::vector<int64_t>& fill = g->first;  // advanced as rows are placed, then restored
  for (int i = 0; i < n; ++i) {
    const int64_t row = fill[ids[i]]++;
    g->row_token[row] = i / k;
    g->choice_row[i] = static_cast<int32_t>(row);
  }
  for (int e = 0; e < n_expert; ++e) fill[e] -= g->count[e];
}

}  // namespace promptcache
