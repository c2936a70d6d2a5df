// The transformer forward pass, read top to bottom like the paper:
//   x = embed(tokens) · embed_scale
//   per layer:  x += post_norm(Wo · Attention(RoPE(Wq·norm(x)), RoPE(Wk·norm(x)), Wv·norm(x)))
//               x += post_norm(Wdown · (act(Wgate·norm(x)) * Wup·norm(x)))   (+ biases)
//                    or, in a mixture-of-experts layer, the same FFN of each of the token's
//                    experts (the top k of softmax(Wrouter·norm(x))), weighted (ExpertsBlock),
//                    plus a shared expert's FFN, sigmoid-gated, where the layer has one
//   hidden = norm(x)                   (what embeddings pool, for the tokens that ask)
//   logits = softcap(Wout · hidden)
// One pass for every architecture (model/config.h): the optional parts are there when the file
// has them: biases on Q, K, V (Qwen2, gpt-oss), on the attention output, the router and the
// experts (gpt-oss), a norm on each Q and K head (Qwen3, Gemma 3), the post-norms (Gemma 2/3),
// attention sinks (gpt-oss); act is SiLU, GELU or gpt-oss's clamped SwiGLU; attention may be
// soft-capped and, on sliding layers, windowed (model/attention.cc); RoPE's frequencies may
// differ per layer (Gemma 3) and YaRN scales the rotated vectors (gpt-oss).
// Shapes in comments: T tokens in the batch, D = n_embd, H/KVH query/KV heads of size hd.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/profile.h"
#include "model/kv_rows.h"
#include "model/model.h"
#include "ops/quant.h"
#include "ops/vec.h"

namespace promptcache {
namespace {

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

// gpt-oss's gated activation (config.h), element by element in scalar code, as ggml computes
// it: the gate clamped above and the up projection both ways at 7, the gate's sigmoid taken at
// 1.702 times it, the up projection offset by 1.
void SwiGluOai(float* gate, const float* up, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::max(std::min(up[i], kLimit), -kLimit);
    gate[i] = g / (1.0f + std::exp(kAlpha * -g)) * (u + 1.0f);
  }
}

void Resize(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Ends the profiled pass (if one is profiled) however Forward returns.
class ProfiledPass {
 public:
  ProfiledPass(Profiler* p, int tokens) : p_(p) {
    if (p_ != nullptr) p_->BeginPass(tokens);
  }
  ~ProfiledPass() {
    if (p_ != nullptr) p_->EndPass();
  }
  ProfiledPass(const ProfiledPass&) = delete;
  ProfiledPass& operator=(const ProfiledPass&) = delete;

 private:
  Profiler* p_;
};

// Reserves each token's slot in its sequence (slot[t]): per sequence in order of first
// appearance, so a token's slot index says which earlier tokens of the batch it may attend to;
// `order` gets the same grouping, for attention. On failure no sequence is changed.
Status ReserveSlots(std::span<const BatchToken> batch, std::vector<int>* slot,
                    std::vector<int>* order) {
  const int T = static_cast<int>(batch.size());
  order->clear();
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
      order->push_back(u);
      if (batch[u].slot >= 0) {
        // Recomputed in place: before any appended token, slots ascending, an owned slot.
        PC_CHECK(positions.empty() && batch[u].slot > last_in_place && batch[u].slot < seq->size());
        PC_CHECK(seq->Position(batch[u].slot) == batch[u].pos);
        const KvSpan at = seq->Locate(batch[u].slot);
        PC_CHECK(seq->pool()->RefCount(at.block) == 1 && at.shift == 0);
        (*slot)[u] = last_in_place = batch[u].slot;
        continue;
      }
      (*slot)[u] = seq->size() + static_cast<int>(positions.size());
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
  return Status::Ok();
}

// Every stage's activations for T tokens (grown, never shrunk).
void SizeScratch(const ModelConfig& c, int T, ForwardScratch* s) {
  const int D = c.n_embd;
  Resize(s->x, size_t(T) * D);
  Resize(s->xn, size_t(T) * D);
  Resize(s->q, size_t(T) * c.q_dim());
  Resize(s->k, size_t(T) * c.kv_dim());
  Resize(s->v, size_t(T) * c.kv_dim());
  Resize(s->attn, size_t(T) * c.q_dim());
  Resize(s->out_rows, size_t(T) * D);
  if (!c.Moe()) {
    Resize(s->gate, size_t(T) * c.n_ff);
    Resize(s->up, size_t(T) * c.n_ff);
    return;
  }
  const size_t rows = size_t(T) * c.n_expert_used;
  MoeScratch& m = s->moe;
  if (c.n_ff_shexp > 0) {
    Resize(s->gate, size_t(T) * c.n_ff_shexp);
    Resize(s->up, size_t(T) * c.n_ff_shexp);
    Resize(m.shared_gate, size_t(T));
    Resize(m.shared_out, size_t(T) * D);
  }
  Resize(m.router, size_t(T) * c.n_expert);
  m.ids.resize(rows);
  m.weights.resize(rows);
  Resize(m.x, rows * D);
  Resize(m.gate, rows * c.n_ff_exp);
  Resize(m.up, rows * c.n_ff_exp);
  Resize(m.out, rows * D);
}

// A gated activation, row by row: a SIMD kernel's scalar tail computes differently from its
// vectors, and over the whole batch which elements fall in the tail would depend on the batch
// size.
void GatedActivation(FfnActivation act, float* gate, const float* up, int64_t n_ff, int64_t r0,
                     int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    if (act == FfnActivation::kSwiGluOai) {
      SwiGluOai(gate + r * n_ff, up + r * n_ff, n_ff);
    } else if (act == FfnActivation::kGeluTanh) {
      GeluGlu(gate + r * n_ff, up + r * n_ff, n_ff);
    } else {
      SwiGlu(gate + r * n_ff, up + r * n_ff, n_ff);
    }
  }
}

const float* PostNorm(const std::vector<float>& w) { return w.empty() ? nullptr : w.data(); }

}  // namespace

// One pass's state, shared by Forward's steps. What runs per token between two matrix
// multiplies runs inside the job that quantizes the next multiply's input rows (MatMul's
// `before`), not in jobs of its own, nor on the calling thread alone: the residual add of the
// block before (post-normed where the model has post-norms) with the norm after it; attention's
// merge; the gated activation. So a block's output waits in out_rows (`pending`) until the next
// block's input job adds it to x.
struct Model::Pass {
  // Where one batch token's K/V row lives in its sequence's cache.
  struct SlotRef {
    BlockId block;
    int offset;  // slot within the block
  };

  Pass(std::span<const BatchToken> b, ThreadPool* tp, ForwardScratch* fs, const ModelConfig& c)
      : batch(b),
        pool(tp),
        s(fs),
        prof(tp != nullptr ? tp->profiler() : nullptr),
        T(static_cast<int>(b.size())),
        D(c.n_embd),
        eps(c.rms_eps),
        slot(T),
        kv_pool(b[0].seq->pool()),
        kv_type(kv_pool->layout().type),
        kv_row_bytes(kv_pool->layout().row_bytes()) {}

  const std::span<const BatchToken> batch;
  ThreadPool* const pool;
  ForwardScratch* const s;
  Profiler* const prof;
  const int T, D;
  const float eps;
  std::vector<int> slot;       // [T] each token's slot in its sequence
  std::vector<SlotRef> where;  // [T] where that slot's K/V row is
  BlockPool* const kv_pool;    // the cache of the batch's sequences
  const KvType kv_type;
  const size_t kv_row_bytes;
  float* x = nullptr;                // [T, D] the residual stream
  const float* prev_post = nullptr;  // the block whose output out_rows holds: its post-norm
  const float* prev_bias = nullptr;  // ... and its output bias (gpt-oss's attention)
  bool pending = false;              // out_rows holds a block's output not yet added to x

  // x[t] += post_norm(out_rows[t] + bias), when a block's output is pending.
  void AddResidual(int t) const {
    if (!pending) return;
    float* out = s->out_rows.data() + size_t(t) * D;
    if (prev_bias != nullptr) Add(out, prev_bias, D);
    if (prev_post != nullptr) RmsNorm(out, prev_post, D, eps, out);
    Add(x + size_t(t) * D, out, D);
  }
  // xn[row] = norm(x[t]) with weights w, after x[t]'s pending residual add.
  void AddResidualAndNorm(int t, const float* w, int64_t row) const {
    AddResidual(t);
    RmsNorm(x + size_t(t) * D, w, D, eps, s->xn.data() + row * D);
  }
};

Status Model::Forward(std::span<const BatchToken> batch, float* logits, ThreadPool* pool,
                      ForwardScratch* s, int layers, float* hidden) const {
  const ModelConfig& c = config_;
  const int T = static_cast<int>(batch.size());
  if (T == 0) return Status::Ok();
  for (const BatchToken& b : batch) {
    if (b.token < 0 || b.token >= c.n_vocab) {
      return InvalidArgument("token id " + std::to_string(b.token) + " is outside the vocabulary");
    }
    PC_CHECK(b.seq != nullptr);
  }

  Pass p(batch, pool, s, c);
  const ProfiledPass profiled(p.prof, T);
  ProfileOp(p.prof, "slots, attention plan", OpKind::kOther);
  if (Status st = ReserveSlots(batch, &p.slot, &s->attention.order); !st.ok()) return st;
  p.where.resize(T);
  for (int t = 0; t < T; ++t) {
    const KvSpan sp = batch[t].seq->Locate(p.slot[t]);
    p.where[t] = {sp.block, sp.begin};
  }
  SizeScratch(c, T, s);
  PlanAttention(batch, p.slot, pool, s);
  p.x = s->x.data();

  ProfileOp(p.prof, "embed", OpKind::kOther);
  Embed(batch, p.x);  // x: [T, D]

  PC_CHECK(layers <= 0 || (logits == nullptr && hidden == nullptr));
  const int n_layers = layers > 0 ? std::min(layers, c.n_layers) : c.n_layers;
  for (int l = 0; l < n_layers; ++l) {
    AttentionBlock(p, l);    // x += post_norm(Wo · Attention(...)), pending in out_rows
    FeedForwardBlock(p, l);  // x += post_norm(Wdown · act(...)), pending in out_rows
  }
  if (n_layers < c.n_layers) return Status::Ok();
  HiddenOutputs(p, hidden);  // [n_hidden, D]: norm(x) of the tokens that want hidden states
  LogitOutputs(p, logits);   // [n_out, n_vocab]: softcap(Wout · norm(x)) of those that want logits
  return Status::Ok();
}

void Model::Embed(std::span<const BatchToken> batch, float* x) const {
  const ModelConfig& c = config_;
  const int D = c.n_embd;
  for (size_t t = 0; t < batch.size(); ++t) {
    float* xt = x + t * D;
    DequantizeRow(token_embd_.type, token_embd_.data + batch[t].token * token_embd_.row_bytes, D,
                  xt);
    if (c.embed_scale != 1.0f) {
      for (int i = 0; i < D; ++i) xt[i] *= c.embed_scale;
    }
  }
}

void Model::AttentionBlock(Pass& p, int l) const {
  const LayerWeights& w = layers_[l];
  ForwardScratch* s = p.s;
  // q: [T, H*hd], k and v: [T, KVH*hd], in one parallel job over one input.
  const TokenRowsFn attn_in = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      p.AddResidualAndNorm(static_cast<int>(t), w.attn_norm.data(), t);
    }
  };
  const WeightMatrix qkv[3] = {w.wq, w.wk, w.wv};
  float* const qkv_out[3] = {s->q.data(), s->k.data(), s->v.data()};
  ProfileOp(p.prof, "residual, attn_norm, matmul q,k,v", OpKind::kMatMul, l);
  MatMulMulti(qkv, 3, s->xn.data(), p.T, qkv_out, p.pool, &attn_in);
  ProfileOp(p.prof, "q,k bias/norm, rope, K/V store", OpKind::kRope, l);
  ForEachToken(p.pool, p.T, [&](int t) { BiasNormRopeStore(p, l, t); });
  Attention(p.batch, p.slot, l, p.pool, s);
  const TokenRowsFn attn_out = [&](int64_t t0, int64_t t1) {
    FinishAttention(p.batch, p.slot, l, s, static_cast<int>(t0), static_cast<int>(t1));
  };
  ProfileOp(p.prof, "attention merge, matmul attn_output", OpKind::kMatMul, l);
  MatMul(w.wo, s->attn.data(), p.T, s->out_rows.data(), p.pool, &attn_out);  // [T, D]
  p.prev_post = PostNorm(w.attn_post_norm);
  p.prev_bias = w.bo.empty() ? nullptr : w.bo.data();
  p.pending = true;
}

void Model::BiasNormRopeStore(const Pass& p, int l, int t) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[l];
  const int hd = c.head_dim;
  float* q = p.s->q.data() + size_t(t) * c.q_dim();
  float* k = p.s->k.data() + size_t(t) * c.kv_dim();
  float* v = p.s->v.data() + size_t(t) * c.kv_dim();
  if (!w.bq.empty()) Add(q, w.bq.data(), c.q_dim());
  if (!w.bk.empty()) Add(k, w.bk.data(), c.kv_dim());
  if (!w.bv.empty()) Add(v, w.bv.data(), c.kv_dim());
  for (int h = 0; h < c.n_heads && !w.q_norm.empty(); ++h) {
    RmsNorm(q + size_t(h) * hd, w.q_norm.data(), hd, c.rms_eps, q + size_t(h) * hd);
  }
  for (int h = 0; h < c.n_kv_heads && !w.k_norm.empty(); ++h) {
    RmsNorm(k + size_t(h) * hd, w.k_norm.data(), hd, c.rms_eps, k + size_t(h) * hd);
  }
  const float pos = static_cast<float>(p.batch[t].pos);
  ApplyRope(c, l, q, c.n_heads, pos);
  ApplyRope(c, l, k, c.n_kv_heads, pos);
  if (c.rope_mscale != 1.0f) {  // YaRN: outside ApplyRope, which also shifts cached keys
    for (int i = 0; i < c.q_dim(); ++i) q[i] *= c.rope_mscale;
    for (int i = 0; i < c.kv_dim(); ++i) k[i] *= c.rope_mscale;
  }
  uint8_t* kdst = p.kv_pool->K(p.where[t].block, l) + p.where[t].offset * p.kv_row_bytes;
  uint8_t* vdst = p.kv_pool->V(p.where[t].block, l) + p.where[t].offset * p.kv_row_bytes;
  StoreKvRow(p.kv_type, k, c.kv_dim(), kdst);
  StoreKvRow(p.kv_type, v, c.kv_dim(), vdst);
}

void Model::FeedForwardBlock(Pass& p, int l) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[l];
  ForwardScratch* s = p.s;
  const TokenRowsFn ffn_in = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      p.AddResidualAndNorm(static_cast<int>(t), w.ffn_norm.data(), t);
    }
  };
  if (w.moe()) {
    ExpertsBlock(p, l, ffn_in);
  } else {
    // Gated: SwiGLU or GELU.
    const WeightMatrix gate_up[2] = {w.w_gate, w.w_up};  // [T, n_ff] each
    float* const gate_up_out[2] = {s->gate.data(), s->up.data()};
    ProfileOp(p.prof, "residual, ffn_norm, matmul gate,up", OpKind::kMatMul, l);
    MatMulMulti(gate_up, 2, s->xn.data(), p.T, gate_up_out, p.pool, &ffn_in);
    const TokenRowsFn act = [&](int64_t t0, int64_t t1) {
      GatedActivation(c.ffn_activation, s->gate.data(), s->up.data(), c.n_ff, t0, t1);
    };
    ProfileOp(p.prof, "activation, matmul ffn_down", OpKind::kMatMul, l);
    MatMul(w.w_down, s->gate.data(), p.T, s->out_rows.data(), p.pool, &act);  // [T, D]
  }
  p.prev_post = PostNorm(w.ffn_post_norm);
  p.prev_bias = nullptr;
}

// Mixture of experts: the router's logits for every token (its input job writing norm(x) into
// xn), each token's experts and weights (moe.h), then two grouped multiplies over the tokens
// gathered by expert, each expert's matrices multiplying only its own tokens (gate and up with
// the gather as their input job; down with the activation as its), and each token's experts'
// outputs summed with their weights in its choices' order (most probable first), as llama.cpp
// adds them, then the shared expert's output where the layer has one. Every row is computed as
// MatMul computes it alone, so no token's result depends on which others share its experts.
void Model::ExpertsBlock(Pass& p, int l, const TokenRowsFn& ffn_in) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[l];
  MoeScratch& m = p.s->moe;
  const int E = c.n_expert, K = c.n_expert_used, F = c.n_ff_exp, D = p.D;
  const int64_t rows = int64_t(p.T) * K;
  // The router [T, E], with the shared expert's gate and up [T, n_ff_shexp] and its gate's
  // logit [T] where the layer has them: one job over one input.
  ProfileOp(p.prof, "residual, ffn_norm, matmul moe router", OpKind::kMatMul, l);
  WeightMatrix in_ws[4] = {w.router};
  float* in_outs[4] = {m.router.data()};
  int n_in = 1;
  if (w.shared_expert()) {
    in_ws[n_in] = w.gate_shexp;
    in_outs[n_in++] = p.s->gate.data();
    in_ws[n_in] = w.up_shexp;
    in_outs[n_in++] = p.s->up.data();
  }
  if (w.shared_expert_gated()) {
    in_ws[n_in] = w.gate_inp_shexp;
    in_outs[n_in++] = m.shared_gate.data();
  }
  MatMulMulti(in_ws, n_in, p.s->xn.data(), p.T, in_outs, p.pool, &ffn_in);
  ProfileOp(p.prof, "moe routing", OpKind::kOther, l);
  for (int t = 0; t < p.T; ++t) {
    float* logits = m.router.data() + size_t(t) * E;
    if (!w.router_b.empty()) Add(logits, w.router_b.data(), E);
    RouteToken(logits, E, K, &m.ids[t * K], &m.weights[t * K], c.expert_weights_norm);
  }
  GroupByExpert(m.ids.data(), p.T, K, E, &m.groups);
  // Each row's expert, for the experts' biases.
  m.row_expert.resize(rows);
  for (int e = 0; e < E; ++e) {
    for (int64_t i = 0; i < m.groups.count[e]; ++i) m.row_expert[m.groups.first[e] + i] = e;
  }
  // The matrices of the experts with tokens, each with its rows: gate and up into m.gate and
  // m.up, or down into m.out.
  auto list = [&](bool down) {
    m.ws.clear();
    m.first.clear();
    m.rows.clear();
    m.outs.clear();
    for (int e = 0; e < E; ++e) {
      const int64_t first = m.groups.first[e], count = m.groups.count[e];
      if (count == 0) continue;
      for (int i = 0; i < (down ? 1 : 2); ++i) {
        m.ws.push_back(down ? w.down_exps[e] : i == 0 ? w.gate_exps[e] : w.up_exps[e]);
        m.first.push_back(first);
        m.rows.push_back(count);
        m.outs.push_back(down ? m.out.data() + first * D
                              : (i == 0 ? m.gate : m.up).data() + first * F);
      }
    }
    return static_cast<int>(m.ws.size());
  };
  const TokenRowsFn gather = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = p.s->xn.data() + size_t(m.groups.row_token[r]) * D;
      std::memcpy(m.x.data() + r * D, src, sizeof(float) * D);
    }
  };
  ProfileOp(p.prof, "moe gather, matmul experts gate,up", OpKind::kMatMul, l);
  int n = list(false);
  MatMulGrouped(m.ws.data(), n, m.first.data(), m.rows.data(), m.x.data(), rows, m.outs.data(),
                p.pool, &gather);
  const TokenRowsFn act = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const size_t e = m.row_expert[r];
      if (!w.gate_exps_b.empty()) Add(&m.gate[r * F], &w.gate_exps_b[e * F], F);
      if (!w.up_exps_b.empty()) Add(&m.up[r * F], &w.up_exps_b[e * F], F);
    }
    GatedActivation(c.ffn_activation, m.gate.data(), m.up.data(), F, r0, r1);
  };
  ProfileOp(p.prof, "moe activation, matmul experts down", OpKind::kMatMul, l);
  n = list(true);
  MatMulGrouped(m.ws.data(), n, m.first.data(), m.rows.data(), m.gate.data(), rows, m.outs.data(),
                p.pool, &act);
  if (w.shared_expert()) SharedExpert(p, l);
  SumExperts(p, l);
}

// Each token's experts' outputs (their down biases added) summed with their weights in its
// choices' order (most probable first), as llama.cpp adds them, into out_rows; then the shared
// expert's output where the layer has one, as the peers add it, times its gate's sigmoid where
// it has one.
void Model::SumExperts(const Pass& p, int l) const {
  const LayerWeights& w = layers_[l];
  MoeScratch& m = p.s->moe;
  const int K = config_.n_expert_used, D = p.D;
  ProfileOp(p.prof, "moe weighted sum", OpKind::kOther, l);
  ForEachToken(p.pool, p.T, [&](int t) {
    float* out = p.s->out_rows.data() + size_t(t) * D;
    for (int j = 0; j < K; ++j) {
      float* y = m.out.data() + size_t(m.groups.choice_row[t * K + j]) * D;
      if (!w.down_exps_b.empty()) Add(y, &w.down_exps_b[size_t(m.ids[t * K + j]) * D], D);
      const float wj = m.weights[t * K + j];
      for (int i = 0; i < D; ++i) out[i] = j == 0 ? wj * y[i] : out[i] + wj * y[i];
    }
    if (!w.shared_expert()) return;
    const float* y = m.shared_out.data() + size_t(t) * D;
    if (!w.shared_expert_gated()) {
      Add(out, y, D);
      return;
    }
    const float g = 1.0f / (1.0f + std::exp(-m.shared_gate[t]));
    for (int i = 0; i < D; ++i) out[i] += g * y[i];
  });
}

// The shared expert's down projection [T, D] into moe.shared_out, its gated activation (of the
// gate and up rows the router's job computed) as the multiply's input job.
void Model::SharedExpert(Pass& p, int l) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_[l];
  ForwardScratch* s = p.s;
  const TokenRowsFn act = [&](int64_t t0, int64_t t1) {
    GatedActivation(c.ffn_activation, s->gate.data(), s->up.data(), c.n_ff_shexp, t0, t1);
  };
  ProfileOp(p.prof, "shared expert activation, matmul down", OpKind::kMatMul, l);
  MatMul(w.down_shexp, s->gate.data(), p.T, s->moe.shared_out.data(), p.pool, &act);
}

// Final hidden states for the tokens that want them: [n_hidden, D], normed as the output
// matrix's input is. Their residual streams get the last block's output here, once (the logits
// then skip it).
void Model::HiddenOutputs(const Pass& p, float* hidden) const {
  const ModelConfig& c = config_;
  std::vector<int> hidden_tokens;
  for (int t = 0; t < p.T; ++t) {
    if (p.batch[t].want_hidden) hidden_tokens.push_back(t);
  }
  if (hidden_tokens.empty()) return;
  PC_CHECK(hidden != nullptr);
  ForEachToken(p.pool, static_cast<int>(hidden_tokens.size()), [&](int o) {
    const int t = hidden_tokens[o];
    p.AddResidual(t);
    RmsNorm(p.x + size_t(t) * p.D, output_norm_.data(), p.D, c.rms_eps, hidden + size_t(o) * p.D);
  });
}

// Logits only for the tokens that want them: [n_out, n_vocab]; only their residual streams need
// the last block's output.
void Model::LogitOutputs(const Pass& p, float* logits) const {
  const ModelConfig& c = config_;
  std::vector<int> out_tokens;
  for (int t = 0; t < p.T; ++t) {
    if (p.batch[t].want_logits) out_tokens.push_back(t);
  }
  const int n_out = static_cast<int>(out_tokens.size());
  if (n_out == 0) return;
  PC_CHECK(logits != nullptr);
  const TokenRowsFn out_in = [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int t = out_tokens[o];
      if (!p.batch[t].want_hidden) p.AddResidual(t);
      RmsNorm(p.x + size_t(t) * p.D, output_norm_.data(), p.D, c.rms_eps, p.s->xn.data() + o * p.D);
    }
  };
  ProfileOp(p.prof, "residual, output_norm, matmul output", OpKind::kMatMul);
  MatMul(output_, p.s->xn.data(), n_out, logits, p.pool, &out_in);
  if (c.final_softcap > 0) {
    ProfileOp(p.prof, "softcap", OpKind::kActivation);
    ForEachToken(p.pool, n_out, [&](int t) {
      Softcap(logits + size_t(t) * c.n_vocab, c.n_vocab, c.final_softcap);
    });
  }
}

}  // namespace promptcache
