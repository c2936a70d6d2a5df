// Planning a forward batch's attention (Model::PlanAttention): the order of its tokens, the items
// the work is cut into (see attention.cc, which runs them), each token's first visible slot on
// sliding layers, and the scratch sized for them. Runs once per batch, before the layers.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/check.h"
#include "model/attention_items.h"
#include "model/model.h"

namespace promptcache {
namespace {

using attention_items::kChunkRows;
using attention_items::kItemTokens;
using Item = attention_items::Item;

// Items (after the chunk split) per thread below which they are split by KV heads as well.
constexpr int kItemsPerThread = 2;
// Chunk-split items keep per-chunk partial states: only while they stay this small.
constexpr size_t kMaxPartialBytes = size_t(8) << 20;

// as->window_first for every token of the batch: the first slot of its sequence whose position
// is above pos - window. Positions increase along a sequence, so per sequence this walks back
// over its last spans only as far as its earliest token's window reaches.
void WindowStarts(std::span<const BatchToken> batch, const std::vector<int>& slot, int window,
                  AttentionScratch* as) {
  const int T = static_cast<int>(batch.size());
  as->window_first.assign(T, 0);
  std::vector<int32_t> tail;  // positions of the sequence's last slots
  for (int g = 0; g < T;) {
    const KvSequence& seq = *batch[as->order[g]].seq;
    int end = g;
    int32_t min_pos = INT32_MAX;
    while (end < T && batch[as->order[end]].seq == &seq) {
      min_pos = std::min(min_pos, batch[as->order[end]].pos);
      ++end;
    }
    const std::vector<KvSpan>& spans = seq.spans();
    const int32_t* block_pos = nullptr;
    int base = seq.size();  // slot of tail[0]
    size_t sp = spans.size();
    while (sp > 0) {
      const KvSpan& s = spans[sp - 1];
      block_pos = seq.pool()->Positions(s.block) + s.begin;
      if (block_pos[s.count - 1] + s.shift <= min_pos - window) break;  // before every window
      base -= s.count;
      --sp;
    }
    tail.clear();
    for (size_t i = sp; i < spans.size(); ++i) {
      const int32_t* p = seq.pool()->Positions(spans[i].block) + spans[i].begin;
      for (int j = 0; j < spans[i].count; ++j) tail.push_back(p[j] + spans[i].shift);
    }
    for (int i = g; i < end; ++i) {
      const int t = as->order[i];
      const int64_t lowest = int64_t(batch[t].pos) - window;  // keys must be above it
      const auto it = std::upper_bound(tail.begin(), tail.end(), lowest);
      as->window_first[t] = std::min(base + static_cast<int>(it - tail.begin()), slot[t]);
    }
    g = end;
  }
}

// as->shifts: the distinct non-zero shifts of the batch's sequences' spans; as->shifted_q sized
// for the queries rotated by each.
void CollectShifts(std::span<const BatchToken> batch, int q_dim, AttentionScratch* as) {
  const int T = static_cast<int>(batch.size());
  as->shifts.clear();
  for (int t = 0; t < T; ++t) {
    if (t > 0 && batch[t].seq == batch[t - 1].seq) continue;
    for (const KvSpan& sp : batch[t].seq->spans()) {
      if (sp.shift != 0 &&
          std::find(as->shifts.begin(), as->shifts.end(), sp.shift) == as->shifts.end()) {
        as->shifts.push_back(sp.shift);
      }
    }
  }
  if (!as->shifts.empty()) as->shifted_q.resize(as->shifts.size() * T * q_dim);
}

// as->items: up to kItemTokens tokens of one sequence (order groups them), or of several; and
// as->max_keys, as->n_chunks.
void GroupItems(std::span<const BatchToken> batch, const std::vector<int>& slot, int n_threads,
                AttentionScratch* as) {
  const int T = static_cast<int>(batch.size());
  const std::vector<int>& order = as->order;
  std::vector<Item>& items = as->items;
  items.clear();
  int max_keys = 0;
  for (int t = 0; t < T; ++t) max_keys = std::max(max_keys, slot[t] + 1);
  const int n_chunks = (max_keys + kChunkRows - 1) / kChunkRows;
  // Sequences whose first blocks are the same (forks of one prefix, as in a server's batch of
  // requests with one system prompt) share items while each has few tokens: a tile they share
  // is then read once for all of them. Capped so that items times chunks still give every
  // thread several to take.
  const int share_cap = std::clamp(T * n_chunks / (4 * n_threads), 1, kItemTokens);
  bool joinable = false;  // the last item holds only sequences of at most share_cap tokens
  for (int first = 0; first < T;) {
    const KvSequence* seq = batch[order[first]].seq;
    int count = 1;
    while (first + count < T && batch[order[first + count]].seq == seq) ++count;
    if (joinable && count <= share_cap && items.back().count + count <= share_cap &&
        attention_items::SameFirstBlock(*items.back().seq, *seq)) {
      Item& it = items.back();
      it.count += count;
      it.cost += int64_t(count) * (slot[order[first + count - 1]] + 1);
    } else {
      for (int b = 0; b < count; b += kItemTokens) {
        const int n = std::min(kItemTokens, count - b);
        const int keys = slot[order[first + b + n - 1]] + 1;
        items.push_back({seq, first + b, n, -1, int64_t(n) * keys});
      }
      joinable = count <= share_cap;
    }
    first += count;
  }
  as->max_keys = max_keys;
  as->n_chunks = n_chunks;
}

// Too few items for the threads: split them by chunk of keys, merged afterwards (as->split),
// while the partial states stay small; the partial buffers sized for them.
void SplitByChunks(int T, const std::vector<int>& slot, int H, int hd, int n_threads,
                   AttentionScratch* as) {
  std::vector<Item>& items = as->items;
  const size_t partial_floats = size_t(T) * H * as->n_chunks * hd;
  as->split = n_threads > 1 && as->n_chunks > 1 && static_cast<int>(items.size()) < 4 * n_threads &&
              partial_floats * sizeof(float) <= kMaxPartialBytes;
  if (!as->split) return;
  std::vector<Item> chunked;
  for (const Item& it : items) {
    const int keys = attention_items::ItemKeys(it, as->order, slot);
    for (int ch = 0; ch * kChunkRows < keys; ++ch) {
      const int n_keys = std::min(kChunkRows, keys - ch * kChunkRows);
      chunked.push_back({it.seq, it.first, it.count, ch, int64_t(it.count) * n_keys});
    }
  }
  items.swap(chunked);
  if (as->partial_o.size() < partial_floats) as->partial_o.resize(partial_floats);
  if (as->partial_state.size() < size_t(T) * H * as->n_chunks) {
    as->partial_state.resize(size_t(T) * H * as->n_chunks);
  }
}

// Still too few items for the threads (a decode step; one short prompt): split them by groups
// of KV heads too, as evenly as the heads divide.
void SplitByHeads(int KVH, int n_threads, std::vector<Item>* items) {
  const int64_t n_items = static_cast<int64_t>(items->size());
  if (n_threads <= 1 || KVH <= 1 || n_items >= kItemsPerThread * n_threads) return;
  const int groups = static_cast<int>(
      std::min<int64_t>(KVH, (kItemsPerThread * n_threads + n_items - 1) / n_items));
  std::vector<Item> by_heads;
  for (const Item& it : *items) {
    for (int g = 0; g < groups; ++g) {
      Item part = it;
      part.kv_begin = g * KVH / groups;
      part.kv_end = (g + 1) * KVH / groups;
      part.cost = it.cost * (part.kv_end - part.kv_begin);
      by_heads.push_back(part);
    }
  }
  items->swap(by_heads);
}

// The per-thread buffers and the per-head states. Sized here, on the calling thread: a worker
// that allocated would get a malloc arena of its own, whose freed memory glibc keeps, and peak
// memory would creep up run after run.
void SizeBuffers(int T, int H, int group, int hd, int n_threads, AttentionScratch* as) {
  if (static_cast<int>(as->threads.size()) < n_threads) as->threads.resize(n_threads);
  for (AttentionScratch::Thread& th : as->threads) {
    th.state.resize(size_t(kItemTokens) * H);
    th.q.resize(size_t(kItemTokens) * group);
    th.n_valid.resize(size_t(kItemTokens) * group);
    th.first_valid.resize(size_t(kItemTokens) * group);
    th.state_ptr.resize(size_t(kItemTokens) * group);
    th.o_ptr.resize(size_t(kItemTokens) * group);
    th.o.resize(size_t(kItemTokens) * H * hd);
  }
  if (as->state.size() < size_t(T) * H) as->state.resize(size_t(T) * H);
}

}  // namespace

void Model::PlanAttention(std::span<const BatchToken> batch, const std::vector<int>& slot,
                          ThreadPool* pool, ForwardScratch* s) const {
  const ModelConfig& c = config_;
  const int T = static_cast<int>(batch.size());
  const int H = c.n_heads, hd = c.head_dim, group = H / c.n_kv_heads;
  const int n_threads = pool ? pool->size() : 1;
  AttentionScratch& as = s->attention;
  PC_CHECK(static_cast<int>(as.order.size()) == T);

  if (c.AnySliding()) WindowStarts(batch, slot, c.sliding_window, &as);
  CollectShifts(batch, c.q_dim(), &as);
  GroupItems(batch, slot, n_threads, &as);
  SplitByChunks(T, slot, H, hd, n_threads, &as);
  SplitByHeads(c.n_kv_heads, n_threads, &as.items);
  // Largest first, so the last items to start are short ones.
  std::stable_sort(as.items.begin(), as.items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });
  SizeBuffers(T, H, group, hd, n_threads, &as);
}

}  // namespace promptcache
