// A loaded Llama-family model: its configuration, weights (views into the memory-mapped GGUF
// file; quantized matrices repacked once for the kernels, their file pages released), tokenizer
// and fingerprint, and the forward pass.
//
// The forward pass takes a batch of tokens, each with its own position and its own KV sequence,
// so one call can prefill a prompt, decode one token, or decode one token for each of several
// sequences (continuous batching). Each token's K/V are appended to its sequence, and it attends
// to everything its sequence held before the batch plus the tokens of its sequence earlier in the
// batch: positions are data, not indices, so they may have gaps.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/moe.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/packed.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  WeightMatrix wq, wk, wv, wo;   // [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim]
  // Optional, present when the file has them (empty otherwise): biases of Q, K and V (qwen2)
  // [q_dim], [kv_dim] x2; RMSNorm weights applied to each Q and K head before RoPE (qwen3,
  // gemma3) [head_dim]; RMSNorms of the attention and FFN outputs before their residual adds
  // (gemma2, gemma3) [n_embd].
  std::vector<float> bq, bk, bv, q_norm, k_norm, attn_post_norm, ffn_post_norm;
  // Optional (gpt-oss): the attention output's bias [n_embd]; per query head a learned logit
  // that joins its softmax's denominator (an "attention sink": weight for no value) [n_heads].
  std::vector<float> bo, attn_sinks;
  std::vector<float> ffn_norm;  // [n_embd]
  WeightMatrix w_gate, w_up;    // [n_ff x n_embd]
  WeightMatrix w_down;          // [n_embd x n_ff]
  // Mixture-of-experts layers instead of w_gate, w_up, w_down (empty in dense layers): the
  // router [n_expert x n_embd] and each expert's matrices, views of the 3-D
  // ffn_{gate,up,down}_exps tensors (one expert a contiguous slice).
  WeightMatrix router;
  std::vector<WeightMatrix> gate_exps, up_exps;  // [n_expert] of [n_ff_exp x n_embd]
  std::vector<WeightMatrix> down_exps;           // [n_expert] of [n_embd x n_ff_exp]
  // Optional (gpt-oss): the router's bias [n_expert] and each expert's biases, expert-major:
  // [n_expert x n_ff_exp] for gate and up, [n_expert x n_embd] for down.
  std::vector<float> router_b, gate_exps_b, up_exps_b, down_exps_b;
  // Optional in mixture-of-experts layers (ModelConfig::n_ff_shexp > 0): the shared expert, a
  // gated FFN every token goes through, [n_ff_shexp x n_embd] x2 and [n_embd x n_ff_shexp], and
  // its optional gate, one row [1 x n_embd] whose sigmoid scales its output (Qwen2-MoE).
  WeightMatrix gate_shexp, up_shexp, down_shexp, gate_inp_shexp;
  bool moe() const { return !down_exps.empty(); }
  bool shared_expert() const { return down_shexp.rows > 0; }
  bool shared_expert_gated() const { return gate_inp_shexp.rows > 0; }
};

struct BatchToken {
  int32_t token;
  int32_t pos;
  KvSequence* seq;
  bool want_logits;
  // >= 0: recompute the token already in this slot of seq (its position must be pos, its block
  // seq's alone), overwriting its K/V; it attends to the slots before it, as if computed there.
  // In-place tokens of a sequence come first in the batch, in ascending slot order. -1: append.
  int32_t slot = -1;
  // Write the token's final hidden state (after the output norm, before the output matrix):
  // what embeddings pool. Independent of want_logits.
  bool want_hidden = false;
};

// Attention's plan and buffers (attention.cc). The plan (the batch's tokens grouped by sequence,
// the work items, whether they are split by chunks of keys and by KV heads) depends only on the
// batch and the thread count, so it is
// made once per forward pass, not per layer. Buffers: per pool thread, its item's chunk states
// and query lists; per query head of the batch, its running state; partial chunk states when the
// items are split.
struct AttentionScratch {
  struct Item {
    const KvSequence* seq;  // its first token's (an item may hold several sequences' tokens)
    int first;              // index into `order` of the item's first token
    int count;              // its tokens (slots ascending)
    int chunk;              // -1: every chunk its tokens read
    int64_t cost;           // queries × keys, for scheduling
    int kv_begin = 0;       // its KV heads [kv_begin, kv_end) (with their query heads)
    int kv_end = INT32_MAX;
  };
  struct Thread {
    std::vector<float> o;
    std::vector<AttnState> state;
    std::vector<const float*> q;
    std::vector<int> n_valid;
    std::vector<AttnState*> state_ptr;
    std::vector<float*> o_ptr;
    std::vector<int> first_valid;
  };
  std::vector<int> order;  // batch indices grouped by sequence (first appearance), slots ascending
  // [T], models with sliding layers: the first slot each token sees there (the first whose
  // position is within the window: positions increase along a sequence).
  std::vector<int> window_first;
  std::vector<Item> items;
  int max_keys = 0;  // keys read by the batch's longest-reaching token
  int n_chunks = 0;
  bool split = false;
  std::vector<Thread> threads;
  std::vector<AttnState> state;          // [T * H]
  std::vector<AttnState> partial_state;  // [T * H * chunks]
  std::vector<float> partial_o;          // [T * H * chunks * head_dim]
  // The distinct non-zero shifts of the batch's sequences' spans (KvSpan::shift), and for each,
  // every query of the batch rotated by -shift: what reads those spans' keys. [shifts][T * q_dim]
  std::vector<int32_t> shifts;
  std::vector<float> shifted_q;
};

// Scratch buffers of the forward pass, reused across calls; one per thread that runs forwards.
struct ForwardScratch {
  std::vector<float> x, xn, q, k, v, attn, gate, up, out_rows;
  AttentionScratch attention;
  MoeScratch moe;
};

class Model {
 public:
  // Maps and validates the file: architecture, hyperparameters, every tensor's presence, shape
  // and type; with `pack` (to run it, not only describe it) repacks the quantized matrices.
  // Errors are one line naming the file and the problem.
  static Result<std::unique_ptr<Model>> Load(const std::string& path, bool pack = true);

  const ModelConfig& config() const { return config_; }
  // Prepares the model to run with `context` positions: LongRoPE files (Phi-3) switch to their
  // long frequencies past the original context, as llama.cpp does, and the fingerprint changes
  // with them (their K/V differ). Call before running anything; other models ignore it.
  void UseContext(int context);
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }
  // 32 hex digits over the metadata, the tensor table and samples of every tensor's data: what
  // cache files are keyed on, so K/V are never reused across different weights.
  const std::string& fingerprint() const { return fingerprint_; }
  // The chat template text (tokenizer.chat_template), empty when the file has none.
  const std::string& chat_template() const { return chat_template_; }
  // Replaces the file's chat template (a user's --chat-template file).
  void set_chat_template(std::string text) { chat_template_ = std::move(text); }
  GgmlType weight_type() const { return layers_[0].wq.type; }
  size_t weight_bytes() const;
  // Bytes of the repacked copies of the quantized matrices (in memory instead of the file's).
  size_t packed_bytes() const;
  // The matrices Forward multiplies by, with their tensor names: the output matrix (the token
  // embedding when tied) and every layer's. An untied token embedding is only looked up.
  std::vector<std::pair<std::string, const WeightMatrix*>> Matrices() const;

  KvLayout MakeKvLayout(KvType type, int block_size = 16) const;
  // Scratch bytes one token of a batch needs in Forward (activations of every stage).
  size_t ScratchBytesPerToken() const;
  // The largest prefill batch (a multiple of 32, from 32 to 512) whose scratch fits `budget`:
  // keeps peak memory near the weights plus the KV cache for large models.
  int DefaultBatchSize(size_t budget = size_t(32) << 20) const;

  // Runs the batch. For every token with want_logits, writes n_vocab logits, in batch order, to
  // `logits`; for every token with want_hidden, n_embd floats of its final normed hidden state,
  // in batch order, to `hidden` (no logits are computed for the tokens that want only that).
  // Sequences must have room (their pool may run out: the Status says so and no sequence is
  // changed). layers > 0: run only the first `layers` layers (their K/V written, no logits or
  // hidden states: `logits` and `hidden` must be null).
  Status Forward(std::span<const BatchToken> batch, float* logits, ThreadPool* pool,
                 ForwardScratch* scratch, int layers = 0, float* hidden = nullptr) const;

 private:
  Model() = default;
  Status BindWeights();
  // Matrices() of a const or mutable model (W: const WeightMatrix or WeightMatrix).
  template <class W, class Self>
  static std::vector<std::pair<std::string, W*>> MatricesOf(Self& m);
  // Repacks every quantized matrix for the int8 kernels (packed.h) and releases the mapped pages
  // of the originals (the token embedding's stay: lookups read its rows).
  void PackWeights();
  // Fills s->attention's plan for the batch (its `order` already set) and sizes its buffers.
  void PlanAttention(std::span<const BatchToken> batch, const std::vector<int>& slot,
                     ThreadPool* pool, ForwardScratch* s) const;
  // Forward's steps (forward.cc) on one pass's state (Pass, defined there): the token
  // embedding into x [T, D]; per layer the attention block (its per-token q/k bias and norm,
  // RoPE and K/V store in BiasNormRopeStore) and the feed-forward block, each leaving its output
  // for the next step to add to x; then the final hidden states and the logits.
  struct Pass;
  void Embed(std::span<const BatchToken> batch, float* x) const;
  void AttentionBlock(Pass& p, int layer) const;
  void BiasNormRopeStore(const Pass& p, int layer, int t) const;
  void FeedForwardBlock(Pass& p, int layer) const;
  // The feed-forward block of a mixture-of-experts layer (moe.h), `ffn_in` writing its input.
  void ExpertsBlock(Pass& p, int layer, const TokenRowsFn& ffn_in) const;
  void SharedExpert(Pass& p, int layer) const;
  void SumExperts(const Pass& p, int layer) const;
  void HiddenOutputs(const Pass& p, float* hidden) const;
  void LogitOutputs(const Pass& p, float* logits) const;
  // Attention's items for one layer: every query's state, chunk by chunk, in s->attention.
  void Attention(std::span<const BatchToken> batch, const std::vector<int>& slot, int layer,
                 ThreadPool* pool, ForwardScratch* s) const;
  // Attention's output rows [t0, t1) into s->attn: each query's chunks merged and normalized.
  // Per token, so it runs inside the job that quantizes the rows for the output projection.
  void FinishAttention(std::span<const BatchToken> batch, const std::vector<int>& slot, int layer,
                       ForwardScratch* s, int t0, int t1) const;

  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelConfig config_;
  std::string fingerprint_;
  std::string chat_template_;
  WeightMatrix token_embd_;
  WeightMatrix output_;  // token_embd_ when the embeddings are tied
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  // Phi-3 stores Q, K, V as one tensor (attn_qkv) and gate and up as one (ffn_up, gate first):
  // the matrices are views of their rows.
  bool fused_qkv_ = false, fused_gate_up_ = false;
  std::vector<std::unique_ptr<PackedMatrix>> packed_;
};

}  // namespace promptcache
