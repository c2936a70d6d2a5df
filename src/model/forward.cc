// The transformer forward pass, read top to bottom like the paper:
//   x = embed(tokens) · embed_scale
//   per layer:  x += post_norm(Wo · Attention(RoPE(Wq·norm(x)), RoPE(Wk·norm(x)), Wv·norm(x)))
//               x += post_norm(Wdown · (act(Wgate·norm(x)) * Wup·norm(x)))
//   hidden = norm(x)                   (what embeddings pool, for the tokens that ask)
//   logits = softcap(Wout · hidden)
// One pass for every architecture (model/config.h): the optional parts are there when the file
// has them: biases on Q, K, V (Qwen2), a norm on each Q and K head (Qwen3, Gemma 3), the
// post-norms (Gemma 2/3); act is SiLU or GELU; attention may be soft-capped and, on sliding
// layers, windowed (model/attention.cc); RoPE's frequencies may differ per layer (Gemma 3).
// Shapes in comments: T tokens in the batch, D = n_embd, H/KVH query/KV heads of size hd.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/kv_rows.h"
#include "model/model.h"
#include "ops/quant.h"
#include "ops/vec.h"

namespace promptcache {
namespace {

// Where one batch token's K/V row lives in its sequence's cache.
struct SlotRef {
  BlockId block;
  int offset;  // slot within the block
};

// Runs fn(t) for every t in [0, n), spread over the pool when there is enough work.
template <typename Fn>
void ForEachToken(ThreadPool* pool, int n, Fn&& fn) {
  if (pool == nullptr || n < 32) {  // per-token work is small: batch it up first
    for (int t = 0; t < n; ++t) fn(t);
    return;
  }
  pool->ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) fn(static_cast<int>(t));
  });
}

void Resize(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

Status Model::Forward(std::span<const BatchToken> batch, float* logits, ThreadPool* pool,
                      ForwardScratch* s, int layers, float* hidden) const {
  const ModelConfig& c = config_;
  const int T = static_cast<int>(batch.size());
  if (T == 0) return Status::Ok();
  const int D = c.n_embd, hd = c.head_dim;
  for (const BatchToken& b : batch) {
    if (b.token < 0 || b.token >= c.n_vocab) {
      return InvalidArgument("token id " + std::to_string(b.token) + " is outside the vocabulary");
    }
    PC_CHECK(b.seq != nullptr);
  }

  // Reserve each token's slot in its sequence: per sequence in order of first appearance, so a
  // token's slot index says which earlier tokens of the batch it may attend to.
  std::vector<int> slot(T);
  std::vector<int>& order = s->attention.order;  // the same grouping, for attention
  order.clear();
  std::vector<std::pair<KvSequence*, int>> appended;  // sequence, its size before
  for (int t = 0; t < T; ++t) {
    KvSequence* seq = batch[t].seq;
    if (std::any_of(appended.begin(), appended.end(), [&](auto& p) { return p.first == seq; })) {
      continue;
    }
    std::vector<int32_t> positions;
    int last_in_place = -1;
    for (int u = t; u < T; ++u) {
      if (batch[u].seq != seq) continue;
      order.push_back(u);
      if (batch[u].slot >= 0) {
        // Recomputed in place: before any appended token, slots ascending, an owned slot.
        PC_CHECK(positions.empty() && batch[u].slot > last_in_place && batch[u].slot < seq->size());
        PC_CHECK(seq->Position(batch[u].slot) == batch[u].pos);
        const KvSpan at = seq->Locate(batch[u].slot);
        PC_CHECK(seq->pool()->RefCount(at.block) == 1 && at.shift == 0);
        slot[u] = last_in_place = batch[u].slot;
        continue;
      }
      slot[u] = seq->size() + static_cast<int>(positions.size());
      positions.push_back(batch[u].pos);
    }
    const int before = seq->size();
    Status st = seq->Append(positions);
    if (!st.ok()) {
      for (auto& [done, size] : appended) done->Truncate(size);
      return st;
    }
    appended.push_back({seq, before});
  }
  std::vector<SlotRef> where(T);
  for (int t = 0; t < T; ++t) {
    const KvSpan sp = batch[t].seq->Locate(slot[t]);
    where[t] = {sp.block, sp.begin};
  }

  Resize(s->x, size_t(T) * D);
  Resize(s->xn, size_t(T) * D);
  Resize(s->q, size_t(T) * c.q_dim());
  Resize(s->k, size_t(T) * c.kv_dim());
  Resize(s->v, size_t(T) * c.kv_dim());
  Resize(s->attn, size_t(T) * c.q_dim());
  Resize(s->gate, size_t(T) * c.n_ff);
  Resize(s->up, size_t(T) * c.n_ff);
  Resize(s->out_rows, size_t(T) * D);
  PlanAttention(batch, slot, pool, s);
  float* x = s->x.data();  // [T, D] the residual stream

  for (int t = 0; t < T; ++t) {
    float* xt = x + size_t(t) * D;
    DequantizeRow(token_embd_.type, token_embd_.data + batch[t].token * token_embd_.row_bytes, D,
                  xt);
    if (c.embed_scale != 1.0f) {
      for (int i = 0; i < D; ++i) xt[i] *= c.embed_scale;
    }
  }

  BlockPool* kv_pool = batch[0].seq->pool();
  const KvLayout& kvl = kv_pool->layout();
  const size_t kv_row_bytes = kvl.row_bytes();

  PC_CHECK(layers <= 0 || (logits == nullptr && hidden == nullptr));
  const int n_layers = layers > 0 ? std::min(layers, c.n_layers) : c.n_layers;
  for (int l = 0; l < n_layers; ++l) {
    const LayerWeights& w = layers_[l];
    // Attention block.
    ForEachToken(pool, T, [&](int t) {
      RmsNorm(x + size_t(t) * D, w.attn_norm.data(), D, c.rms_eps, s->xn.data() + size_t(t) * D);
    });
    // q: [T, H*hd], k and v: [T, KVH*hd], in one parallel job over the same input.
    const WeightMatrix qkv[3] = {w.wq, w.wk, w.wv};
    float* const qkv_out[3] = {s->q.data(), s->k.data(), s->v.data()};
    MatMulMulti(qkv, 3, s->xn.data(), T, qkv_out, pool);
    ForEachToken(pool, T, [&](int t) {
      float* q = s->q.data() + size_t(t) * c.q_dim();
      float* k = s->k.data() + size_t(t) * c.kv_dim();
      float* v = s->v.data() + size_t(t) * c.kv_dim();
      if (!w.bq.empty()) Add(q, w.bq.data(), c.q_dim());
      if (!w.bk.empty()) Add(k, w.bk.data(), c.kv_dim());
      if (!w.bv.empty()) Add(v, w.bv.data(), c.kv_dim());
      for (int h = 0; h < c.n_heads && !w.q_norm.empty(); ++h) {
        RmsNorm(q + size_t(h) * hd, w.q_norm.data(), hd, c.rms_eps, q + size_t(h) * hd);
      }
      for (int h = 0; h < c.n_kv_heads && !w.k_norm.empty(); ++h) {
        RmsNorm(k + size_t(h) * hd, w.k_norm.data(), hd, c.rms_eps, k + size_t(h) * hd);
      }
      const float pos = static_cast<float>(batch[t].pos);
      ApplyRope(c, l, q, c.n_heads, pos);
      ApplyRope(c, l, k, c.n_kv_heads, pos);
      uint8_t* kdst = kv_pool->K(where[t].block, l) + where[t].offset * kv_row_bytes;
      uint8_t* vdst = kv_pool->V(where[t].block, l) + where[t].offset * kv_row_bytes;
      StoreKvRow(kvl.type, k, c.kv_dim(), kdst);
      StoreKvRow(kvl.type, v, c.kv_dim(), vdst);
    });
    Attention(batch, slot, l, pool, s);                         // attn: [T, H*hd]
    MatMul(w.wo, s->attn.data(), T, s->out_rows.data(), pool);  // [T, D]
    PostNorm(w.attn_post_norm, T, pool, s->out_rows.data());
    Add(x, s->out_rows.data(), size_t(T) * D);

    // Feed-forward block (gated: SwiGLU or GELU).
    ForEachToken(pool, T, [&](int t) {
      RmsNorm(x + size_t(t) * D, w.ffn_norm.data(), D, c.rms_eps, s->xn.data() + size_t(t) * D);
    });
    const WeightMatrix gate_up[2] = {w.w_gate, w.w_up};  // [T, n_ff] each
    float* const gate_up_out[2] = {s->gate.data(), s->up.data()};
    MatMulMulti(gate_up, 2, s->xn.data(), T, gate_up_out, pool);
    // Row by row: a SIMD kernel's scalar tail computes differently from its vectors, and over
    // the whole batch which elements fall in the tail would depend on the batch size.
    ForEachToken(pool, T, [&](int t) {
      float* gate = s->gate.data() + size_t(t) * c.n_ff;
      const float* up = s->up.data() + size_t(t) * c.n_ff;
      if (c.ffn_activation == FfnActivation::kGeluTanh) {
        GeluGlu(gate, up, c.n_ff);
      } else {
        SwiGlu(gate, up, c.n_ff);
      }
    });
    MatMul(w.w_down, s->gate.data(), T, s->out_rows.data(), pool);  // [T, D]
    PostNorm(w.ffn_post_norm, T, pool, s->out_rows.data());
    Add(x, s->out_rows.data(), size_t(T) * D);
  }

  if (n_layers < c.n_layers) return Status::Ok();
  // Final hidden states for the tokens that want them: [n_hidden, D], normed as the output
  // matrix's input is.
  float* h = hidden;
  for (int t = 0; t < T; ++t) {
    if (!batch[t].want_hidden) continue;
    PC_CHECK(h != nullptr);
    RmsNorm(x + size_t(t) * D, output_norm_.data(), D, c.rms_eps, h);
    h += D;
  }
  // Logits only for the tokens that want them: [n_out, n_vocab].
  int n_out = 0;
  for (int t = 0; t < T; ++t) {
    if (!batch[t].want_logits) continue;
    RmsNorm(x + size_t(t) * D, output_norm_.data(), D, c.rms_eps, s->xn.data() + size_t(n_out) * D);
    ++n_out;
  }
  if (n_out > 0) {
    PC_CHECK(logits != nullptr);
    MatMul(output_, s->xn.data(), n_out, logits, pool);
    if (c.final_softcap > 0) {
      ForEachToken(pool, n_out, [&](int t) {
        Softcap(logits + size_t(t) * c.n_vocab, c.n_vocab, c.final_softcap);
      });
    }
  }
  return Status::Ok();
}

void Model::PostNorm(const std::vector<float>& weight, int T, ThreadPool* pool, float* rows) const {
  if (weight.empty()) return;
  const int D = config_.n_embd;
  ForEachToken(pool, T, [&](int t) {
    RmsNorm(rows + size_t(t) * D, weight.data(), D, config_.rms_eps, rows + size_t(t) * D);
  });
}

}  // namespace promptcache
