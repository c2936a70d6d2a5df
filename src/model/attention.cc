// Attention of a forward batch over the paged KV cache: grouped-query, causal by slot.
//
// The work is cut into items: up to 64 tokens of one sequence (× one chunk of 512 keys when
// there are too few items to keep every thread busy, × a group of KV heads when there are still
// too few: a decode step, or a short prompt, over a few heads), or the few tokens each of several
// sequences forked from one prefix, which then read their shared blocks' tiles once for all. An
// item walks its keys in tiles of 128 whole cache rows (every KV head: contiguous memory within a
// block, which streams well, and the next tile is prefetched) and, for each KV head, folds the tile
// into the running softmax state (online softmax, ops/attention.h) of every query that reads it, in
// one call: the item's tokens × the query heads of that KV head. So a K/V row leaves memory once
// per item instead of once per query head and token, which is what makes a short prompt after a
// long cached prefix, and decoding at depth, cheap.
//
// On sliding layers (Gemma, Mistral) a token sees only the keys of its window: the tiles from
// the one holding its first visible slot; rows before that slot weigh 0 in the first of them.
// Blocks a sequence released on sliding layers (kv/kv_cache.h) lie before every window that
// reads them, so only those masked rows can be theirs: they are read as zeros (checked).
//
// A query's arithmetic never depends on the rest of the batch: tiles and chunks start at fixed
// key indices (multiples of kAttnTileRows and of 512), each chunk's state starts empty, chunks are
// merged in key order whether one item or several computed them, a head's queries are computed
// alike whichever item holds the head, and a query is given only the tiles it has keys in. A
// token's attention is thus bit-identical whether its prompt was computed whole, in pieces, or
// after a cache hit, and with any number of threads.
//
// Model::PlanAttention, which orders the batch and cuts it into items, is in attention_plan.cc.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "core/profile.h"
#include "model/attention_items.h"
#include "model/kv_rows.h"
#include "model/model.h"

namespace promptcache {
namespace {

using attention_items::kChunkRows;
using attention_items::kItemTokens;
using Item = attention_items::Item;

constexpr int kTileRows = kAttnTileRows;

// Walks one KV head's K and V rows of a sequence, tile by tile, in key order.
class TileCursor {
 public:
  TileCursor(const KvSequence& seq, int layer, int key)
      : seq_(seq), spans_(seq.spans()), layer_(layer) {
    const KvLayout& l = seq.pool()->layout();
    row_bytes_ = l.row_bytes();
    type_ = KvRowAttnType(l.type);
    sliding_ = l.Sliding(layer);
    while (span_ < spans_.size() && spans_[span_].count <= key) key -= spans_[span_++].count;
    off_ = key;
  }

  // Points `tile` at the next n rows (all KV heads; ForHead narrows) and moves past them. With
  // `prefetch`, also asks for the rows' cache lines ahead of use: a long context's rows come from
  // DRAM, and the tile before keeps the core busy meanwhile. (Inline here: GCC drops a call to a
  // function whose only effect is prefetching.)
  // On a sliding layer, the rows of a block whose sliding part is gone point at the pool's zero
  // row: the sequence released them as out of every later window, so they can only be rows of
  // the window's first tile before a query's first visible key, which weigh exactly 0 (and 0
  // times a zero row adds what 0 times the real row would). *zero_end is one past the last such
  // row in the tile (0: none), for GatherQueries to check that.
  // shift[r] is row r's span's shift (KvSpan::shift).
  void Next(int n, AttnTile* tile, int* zero_end, int32_t* shift, bool prefetch = false) {
    PC_CHECK(span_ < spans_.size() || n == 0);
    const BlockPool& kv = *seq_.pool();
    tile->type = type_;
    tile->n = n;
    *zero_end = 0;
    for (int r = 0; r < n;) {
      const KvSpan& sp = spans_[span_];
      const int take = std::min(sp.count - off_, n - r);
      std::fill(shift + r, shift + r + take, sp.shift);
      if (sliding_ && !kv.Complete(sp.block)) {
        for (int i = 0; i < take; ++i, ++r) tile->k[r] = tile->v[r] = kv.ZeroRow();
        *zero_end = r;
        Advance(sp, take);
        continue;
      }
      const uint8_t* k = kv.K(sp.block, layer_) + size_t(sp.begin + off_) * row_bytes_;
      const uint8_t* v = kv.V(sp.block, layer_) + size_t(sp.begin + off_) * row_bytes_;
      for (int i = 0; i < take; ++i, ++r, k += row_bytes_, v += row_bytes_) {
        tile->k[r] = k;
        tile->v[r] = v;
        if (prefetch) {
          for (size_t b = 0; b < row_bytes_; b += 64) {
            __builtin_prefetch(k + b);
            __builtin_prefetch(v + b);
          }
        }
      }
      Advance(sp, take);
    }
  }

  // Where the next row lives (its block and row), for telling shared rows apart cheaply.
  std::pair<BlockId, int> Where() const {
    if (span_ >= spans_.size()) return {BlockId(-1), 0};
    return {spans_[span_].block, spans_[span_].begin + off_};
  }

 private:
  // Moves past `rows` rows of span sp (the current one).
  void Advance(const KvSpan& sp, int rows) {
    off_ += rows;
    if (off_ == sp.count) {
      ++span_;
      off_ = 0;
    }
  }

  const KvSequence& seq_;
  const std::vector<KvSpan>& spans_;
  int layer_;
  size_t row_bytes_ = 0;
  AttnRowType type_ = AttnRowType::kF16;
  bool sliding_ = false;
  size_t span_ = 0;
  int off_ = 0;
};

// The tile's rows narrowed to one KV head.
AttnTile ForHead(const AttnTile& rows, int kvh, const KvLayout& layout) {
  AttnTile t;
  t.type = rows.type;
  t.n = rows.n;
  t.column = layout.head_column(kvh);
  const size_t at = layout.head_offset(kvh);
  for (int r = 0; r < rows.n; ++r) {
    t.k[r] = static_cast<const uint8_t*>(rows.k[r]) + at;
    t.v[r] = static_cast<const uint8_t*>(rows.v[r]) + at;
  }
  return t;
}

// A run of an item's tokens that belong to one sequence.
struct Member {
  const KvSequence* seq;
  int first;  // index of its first token within the item
  int count;
  int keys;  // keys read by its furthest-reaching token
};

// The tiles of a chunk's keys [k0, k1) for each member of an item, walked together; members
// whose tile holds the very same rows (a shared prefix) are grouped under the first of them,
// their leader, so the tile is read once for all. Each member's next tile is fetched (and
// prefetched, once per distinct position) while the current one is used.
class MemberTiles {
 public:
  MemberTiles(const Member* members, int n, int layer, int k0, int k1) : n_(n) {
    for (int m = 0; m < n; ++m) {
      end_[m] = std::min(k1, members[m].keys);
      if (k0 >= end_[m]) continue;
      cursor_[m].emplace(*members[m].seq, layer, k0);
      cursor_[m]->Next(std::min(kTileRows, end_[m] - k0), &next_[m], &next_zero_[m],
                       next_shift_[m]);
    }
  }

  // Moves every member that reads keys from ts on to its tile starting at ts.
  void Advance(int ts) {
    std::pair<BlockId, int> where[kItemTokens];
    for (int m = 0; m < n_; ++m) {
      leader_[m] = m;
      if (!Active(m, ts)) continue;
      rows_[m] = next_[m];
      zero_end_[m] = next_zero_[m];
      std::copy(next_shift_[m], next_shift_[m] + rows_[m].n, shift_[m]);
      const int te = ts + rows_[m].n;
      where[m] = cursor_[m]->Where();
      bool prefetch = true;
      for (int p = 0; p < m; ++p) {
        if (Active(p, ts) && where[p] == where[m]) prefetch = false;
      }
      if (te < end_[m]) {
        cursor_[m]->Next(std::min(kTileRows, end_[m] - te), &next_[m], &next_zero_[m],
                         next_shift_[m], prefetch);
      }
      for (int p = 0; p < m; ++p) {
        if (leader_[p] == p && Active(p, ts) && SameRows(rows_[p], rows_[m]) &&
            std::equal(shift_[p], shift_[p] + rows_[p].n, shift_[m])) {
          leader_[m] = p;
          break;
        }
      }
    }
    ts_ = ts;
  }

  bool Active(int m) const { return Active(m, ts_); }
  bool Leads(int m) const { return Active(m) && leader_[m] == m; }
  int Leader(int m) const { return leader_[m]; }
  const AttnTile& Rows(int m) const { return rows_[m]; }
  // One past the last zero row (of a released sliding part) in member m's tile; 0: none.
  int ZeroEnd(int m) const { return zero_end_[m]; }
  // Row r's shift in member m's tile.
  int32_t Shift(int m, int r) const { return shift_[m][r]; }

 private:
  bool Active(int m, int ts) const { return ts < end_[m]; }
  static bool SameRows(const AttnTile& a, const AttnTile& b) {
    if (a.n != b.n) return false;
    for (int r = 0; r < a.n; ++r) {
      if (a.k[r] != b.k[r]) return false;
    }
    return true;
  }

  int n_;
  int ts_ = 0;
  int end_[kItemTokens];
  int leader_[kItemTokens];
  std::optional<TileCursor> cursor_[kItemTokens];
  AttnTile rows_[kItemTokens], next_[kItemTokens];
  int zero_end_[kItemTokens] = {}, next_zero_[kItemTokens] = {};
  int32_t shift_[kItemTokens][kTileRows], next_shift_[kItemTokens][kTileRows];
};

// One layer's attention over the plan's items: what every item needs, gathered once.
class LayerAttention {
 public:
  LayerAttention(const ModelConfig& c, std::span<const BatchToken> batch,
                 const std::vector<int>& slot, int layer, ForwardScratch* s)
      : c_(c),
        batch_(batch),
        slot_(slot),
        layer_(layer),
        s_(*s),
        as_(s->attention),
        order_(s->attention.order),
        H_(c.n_heads),
        KVH_(c.n_kv_heads),
        hd_(c.head_dim),
        group_(c.n_heads / c.n_kv_heads),
        scoring_{c.attn_scale, c.attn_softcap},
        sliding_(c.Sliding(layer)),
        layout_(batch[0].seq->pool()->layout()) {}

  // Folds every key the item's tokens read (of its chunk, or all) into their states. Returns the
  // bytes of K and V read (rows that members share counted once, as they are read once).
  int64_t RunItem(const Item& it, AttentionScratch::Thread& th) const {
    int64_t head_rows = 0;  // one KV head's row of K and its row of V
    Member members[kItemTokens];
    int keys = 0;
    const int n_members = Members(it, members, &keys);
    // On a sliding layer, the tile holding the item's earliest visible key.
    const int first_tile = sliding_ ? FirstKey(it) / kTileRows * kTileRows : 0;
    int ch_begin = it.chunk < 0 ? first_tile / kChunkRows : it.chunk;
    const int ch_end = it.chunk < 0 ? (keys + kChunkRows - 1) / kChunkRows : it.chunk + 1;
    const int M = it.count * H_;  // queries: token-major, then heads
    const int kv_end = std::min(it.kv_end, KVH_);
    for (int ch = ch_begin; ch < ch_end; ++ch) {
      // A chunk before the window keeps its empty state (stored all the same: a split item's
      // partial state must not be the previous layer's).
      const int k0 = std::max(ch * kChunkRows, first_tile);
      const int k1 = std::min(ch * kChunkRows + kChunkRows, keys);
      std::fill(th.state.begin(), th.state.begin() + M, AttnState{});
      std::fill(th.o.begin(), th.o.begin() + size_t(M) * hd_, 0.0f);
      MemberTiles tiles(members, n_members, layer_, k0, k1);
      for (int ts = k0; ts < k1; ts += kTileRows) {
        tiles.Advance(ts);
        for (int kvh = it.kv_begin; kvh < kv_end; ++kvh) {
          for (int g = 0; g < n_members; ++g) {
            if (!tiles.Leads(g)) continue;
            const AttnTile tile = ForHead(tiles.Rows(g), kvh, layout_);
            head_rows += tile.n;
            // One call per run of rows of one shift, with the queries rotated to match.
            for (int r0 = 0; r0 < tile.n;) {
              int r1 = r0 + 1;
              while (r1 < tile.n && tiles.Shift(g, r1) == tiles.Shift(g, r0)) ++r1;
              const bool whole = r0 == 0 && r1 == tile.n;
              const int n_q = GatherQueries(it, members, n_members, tiles, g, kvh, ts,
                                            tiles.Shift(g, r0), r0, r1, th);
              if (n_q > 0) {
                AttendTile(tile, hd_, scoring_, n_q, th.q.data(),
                           sliding_ || !whole ? th.first_valid.data() : nullptr, th.n_valid.data(),
                           th.state_ptr.data(), th.o_ptr.data());
              }
              r0 = r1;
            }
          }
        }
      }
      StoreChunk(it, ch, th);
    }
    return head_rows * 2 * static_cast<int64_t>(layout_.row_bytes()) / KVH_;
  }

  // The queries of tokens [t0, t1): their chunks merged in key order, then normalized, with
  // each head's sink logit (sinks[h], when not null) in the denominator.
  void Finish(int t0, int t1, const float* sinks) const {
    for (int t = t0; t < t1; ++t) {
      for (int h = 0; h < H_; ++h) {
        AttnState& st = as_.state[size_t(t) * H_ + h];
        float* out = OutRow(t, h);
        if (as_.split) {
          for (int ch = 0; ch * kChunkRows <= slot_[t]; ++ch) {
            const size_t p = (size_t(t) * H_ + h) * as_.n_chunks + ch;
            MergeAttention(as_.partial_state[p], as_.partial_o.data() + p * hd_, &st, out, hd_);
          }
        }
        float inv = 1.0f / st.sum;
        if (sinks != nullptr) {
          // exp(sink - max) joins the sum; a sink above every score rescales the rest instead.
          const float s = sinks[h];
          inv = s <= st.max ? 1.0f / (st.sum + std::exp(s - st.max))
                            : std::exp(st.max - s) / (st.sum * std::exp(st.max - s) + 1.0f);
        }
        for (int j = 0; j < hd_; ++j) out[j] *= inv;
      }
    }
  }

 private:
  // Token t's query of head h, rotated by -shift to read keys moved by `shift`.
  const float* QRow(int t, int h, int32_t shift = 0) const {
    const size_t at = size_t(t) * c_.q_dim() + size_t(h) * hd_;
    if (shift == 0) return s_.q.data() + at;
    const auto i = std::find(as_.shifts.begin(), as_.shifts.end(), shift) - as_.shifts.begin();
    PC_CHECK(i < static_cast<std::ptrdiff_t>(as_.shifts.size()));
    return as_.shifted_q.data() + size_t(i) * batch_.size() * c_.q_dim() + at;
  }
  float* OutRow(int t, int h) const {
    return s_.attn.data() + size_t(t) * c_.q_dim() + size_t(h) * hd_;
  }

  // The earliest slot any of the item's tokens sees on a sliding layer.
  int FirstKey(const Item& it) const {
    int first = INT32_MAX;
    for (int i = 0; i < it.count; ++i) {
      first = std::min(first, as_.window_first[order_[it.first + i]]);
    }
    return first;
  }

  // The item's members (its runs of tokens of one sequence; several when sequences share it)
  // and, in *keys, the keys its furthest-reaching token reads.
  int Members(const Item& it, Member* members, int* keys) const {
    int n = 0;
    for (int i = 0; i < it.count; ++i) {
      const int t = order_[it.first + i];
      if (n == 0 || members[n - 1].seq != batch_[t].seq) members[n++] = {batch_[t].seq, i, 0, 0};
      Member& mb = members[n - 1];
      ++mb.count;
      mb.keys = std::max(mb.keys, slot_[t] + 1);
      *keys = std::max(*keys, mb.keys);
    }
    return n;
  }

  // Lists in th the queries of KV head kvh that read rows [r0, r1) of leader g's tile at ts,
  // whose shift is `shift`: the tokens, of every member reading the same rows, that see some of
  // them. Returns their count.
  int GatherQueries(const Item& it, const Member* members, int n_members, const MemberTiles& tiles,
                    int g, int kvh, int ts, int32_t shift, int r0, int r1,
                    AttentionScratch::Thread& th) const {
    int n_q = 0;
    for (int mi = g; mi < n_members; ++mi) {
      if (!tiles.Active(mi) || tiles.Leader(mi) != g) continue;
      const Member& mb = members[mi];
      for (int i = mb.first; i < mb.first + mb.count; ++i) {
        const int t = order_[it.first + i];
        if (slot_[t] < ts) continue;
        const int lo = sliding_ ? as_.window_first[t] - ts : 0;
        if (lo >= kTileRows) continue;  // the tile is before the token's window
        // Released rows are never inside a window that reads them (KvSequence::ReleaseSliding's
        // contract): a broken promise would read zeros instead of keys, so it stops here.
        PC_CHECK(tiles.ZeroEnd(mi) <= std::max(lo, 0));
        const int n = std::min({ts + kTileRows, slot_[t] + 1, ts + r1}) - ts;
        const int first = std::max(lo, r0);
        if (first >= n) continue;  // none of these rows in the token's range
        for (int h = kvh * group_; h < (kvh + 1) * group_; ++h) {
          const int m = i * H_ + h;
          th.q[n_q] = QRow(t, h, shift);
          th.first_valid[n_q] = first;
          th.n_valid[n_q] = n;
          th.state_ptr[n_q] = &th.state[m];
          th.o_ptr[n_q] = th.o.data() + size_t(m) * hd_;
          ++n_q;
        }
      }
    }
    return n_q;
  }

  // The chunk's states of the item's queries: kept for the merge when split, else merged now.
  void StoreChunk(const Item& it, int ch, AttentionScratch::Thread& th) const {
    const int h_end = std::min(it.kv_end, KVH_) * group_;
    for (int i = 0; i < it.count; ++i) {
      const int t = order_[it.first + i];
      for (int h = it.kv_begin * group_; h < h_end; ++h) {
        const int m = i * H_ + h;
        const float* o = th.o.data() + size_t(m) * hd_;
        if (as_.split) {
          const size_t p = (size_t(t) * H_ + h) * as_.n_chunks + ch;
          as_.partial_state[p] = th.state[m];
          std::memcpy(as_.partial_o.data() + p * hd_, o, sizeof(float) * hd_);
        } else {
          MergeAttention(th.state[m], o, &as_.state[size_t(t) * H_ + h], OutRow(t, h), hd_);
        }
      }
    }
  }

  const ModelConfig& c_;
  std::span<const BatchToken> batch_;
  const std::vector<int>& slot_;
  const int layer_;
  ForwardScratch& s_;
  AttentionScratch& as_;
  const std::vector<int>& order_;
  const int H_, KVH_, hd_, group_;
  const AttnScoring scoring_;
  const bool sliding_;
  const KvLayout& layout_;
};

}  // namespace

void Model::Attention(std::span<const BatchToken> batch, const std::vector<int>& slot, int layer,
                      ThreadPool* pool, ForwardScratch* s) const {
  const int T = static_cast<int>(batch.size());
  const int H = config_.n_heads;
  Profiler* const prof = pool != nullptr ? pool->profiler() : nullptr;
  ProfileOp(prof, "attention", OpKind::kAttention, layer);
  AttentionScratch& as = s->attention;
  std::fill(as.state.begin(), as.state.begin() + size_t(T) * H, AttnState{});
  // Queries for moved keys: R(-shift) applied as RoPE applies R(pos), to every head of every
  // token at once (the same rotation for all).
  const size_t q_floats = size_t(T) * config_.q_dim();
  for (size_t i = 0; i < as.shifts.size(); ++i) {
    float* q = as.shifted_q.data() + i * q_floats;
    std::memcpy(q, s->q.data(), q_floats * sizeof(float));
    ApplyRope(config_, layer, q, T * H, -static_cast<float>(as.shifts[i]));
  }
  const LayerAttention attention(config_, batch, slot, layer, s);
  // Items are taken in order (largest first) by whichever threads are free.
  auto run = [&](int64_t i, int thread) {
    const int64_t bytes = attention.RunItem(as.items[i], as.threads[thread]);
    if (pool != nullptr) pool->CountBytes(thread, bytes);
  };
  const int64_t n_items = static_cast<int64_t>(as.items.size());
  // Tiny attention (small models, short contexts) is not worth a fork/join.
  const int64_t flops = int64_t(T) * H * int64_t(as.max_keys) * config_.head_dim;
  if (pool != nullptr && flops >= (int64_t(1) << 16)) {
    pool->RunTasks(n_items, run);
  } else {
    for (int64_t i = 0; i < n_items; ++i) run(i, 0);
  }
}

void Model::FinishAttention(std::span<const BatchToken> batch, const std::vector<int>& slot,
                            int layer, ForwardScratch* s, int t0, int t1) const {
  const std::vector<float>& sinks = layers_[layer].attn_sinks;
  LayerAttention(config_, batch, slot, layer, s)
      .Finish(t0, t1, sinks.empty() ? nullptr : sinks.data());
}

}  // namespace promptcache
