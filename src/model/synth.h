// Synthetic models: GGUF files with the exact shapes of real Llama-family models (SmolLM2,
// TinyLlama, Llama-3.2), seeded random weights and a real vocabulary copied from a vocabulary
// GGUF. No real weights of that size can be brought onto the development machines, yet speed
// and memory work needs files of realistic shape; their output is noise, their timings are real.
// The files use llama.cpp's key and tensor names, so other engines can load them too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

struct SynthOptions {
  std::string preset;      // one of SynthPresets()
  std::string vocab_path;  // a GGUF holding tokenizer.* keys (e.g. ggml-vocab-gpt-2.gguf)
  // Matrices (token_embd too); norms are always F32. Rows whose width the type's block does not
  // divide get llama.cpp's fallback type (FallbackForWidth in quant_mix.h).
  GgmlType type = GgmlType::kF16;
  uint64_t seed = 1;
  // Multiplies the query and key projections by this factor (weights and biases; with per-head
  // Q/K norms, their weights instead, since the norms undo any scale before them), so attention
  // scores grow by its square; an attention soft-cap grows with them, so it bites as much. With
  // random weights scores sit near 0.1 and attention is nearly uniform: a position error then
  // barely moves the logits. Sharpened, a RoPE error shows (src/model/testdata/architectures).
  float attn_sharpen = 1.0f;
  // > 0: write only the first `layers` layers of the preset (block_count says so): a real
  // shape's speed per layer at a fraction of its size.
  int layers = 0;
  std::string out_path;
};

// The shape of a preset (what Synthesize writes, apart from the vocabulary): the keys and
// tensors llama.cpp's converter writes for that architecture.
struct SynthShape {
  std::string name;
  std::string display_name;            // for general.name
  std::string architecture = "llama";  // general.architecture and the prefix of its keys
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  int n_ctx = 0;
  int head_dim = 0;  // 0: n_embd / n_head
  float rope_base = 10000.0f;
  bool tied_embeddings = true;
  // Llama-3 RoPE scaling, written as a rope_freqs.weight tensor (factor 0: none).
  float rope_scale_factor = 0.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_ctx = 8192;
  bool qkv_bias = false;       // attn_{q,k,v}.bias (qwen2)
  bool qk_norm = false;        // attn_{q,k}_norm.weight (qwen3, gemma3)
  bool post_norms = false;     // post_attention_norm, post_ffw_norm (gemma2, gemma3)
  int sliding_window = 0;      // {arch}.attention.sliding_window (0: not written)
  float attn_softcap = 0.0f;   // {arch}.attn_logit_softcapping (gemma2; 0: not written)
  float final_softcap = 0.0f;  // {arch}.final_logit_softcapping
  // Gemma 3's linear RoPE scaling of global layers (rope.scaling.factor; 0: none).
  float rope_linear_factor = 0.0f;
  // Phi-3: Q, K, V in one attn_qkv tensor and gate/up in one ffn_up tensor; LongRoPE factors
  // (rope_factors_short/long.weight) with rope_original_ctx and an attention factor.
  bool fused = false;
  bool longrope = false;
  // Mixture of experts (qwen3moe, qwen2moe, Mixtral-style llama): n_expert experts of width
  // n_ff_exp per layer (ffn_gate_inp and the 3-D ffn_{gate,up,down}_exps tensors), n_expert_used
  // per token. qwen3moe writes n_ff_exp as expert_feed_forward_length; llama's experts are n_ff
  // wide.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  // qwen2moe: a shared expert of this width in every layer (ffn_{gate,up,down}_shexp, written
  // as expert_shared_feed_forward_length) with its gate ffn_gate_inp_shexp (0: none).
  int n_ff_shexp = 0;
  // gpt-oss: YaRN RoPE scaling by this factor from rope_original_ctx (0: none); the attention
  // output's bias and per-head sinks; post_attention_norm as the FFN's input norm; the router's
  // and experts' biases.
  float rope_yarn_factor = 0.0f;
  bool oai_layout = false;

  int HeadDim() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
};

// Names of the presets: real shapes (smollm2-135m, smollm2-360m, tinyllama-1.1b, llama3.2-1b,
// mistral-7b, qwen2.5-0.5b, qwen3-0.6b, qwen3-30b-a3b, qwen1.5-moe-a2.7b, gemma2-2b, gemma3-1b,
// phi3.5-mini, gpt-oss-20b) and tiny test fixtures (tiny-test, tiny-256, tiny-256-llama3,
// tiny-qwen2, tiny-qwen3, tiny-qwen3moe, tiny-qwen2moe, tiny-mixtral, tiny-gemma2, tiny-gemma3,
// tiny-phi3, tiny-mistral, tiny-gpt-oss).
std::vector<std::string> SynthPresets();
// The shape of a preset; NotFound naming the known presets for an unknown name.
Result<SynthShape> SynthPresetShape(const std::string& preset);

// Phi-3's LongRoPE divisors, one per rotated pair: short ones near 1, long ones growing to
// about the context's ratio to the original for the lowest frequencies.
std::vector<float> LongRopeFactors(const SynthShape& shape, bool long_factors);

// Llama-3 frequency factors for RoPE, one per rotated pair (head_dim / 2 values): 1 for high
// frequencies, `factor` for low ones, a smooth blend between.
std::vector<float> Llama3RopeFactors(const SynthShape& shape);

// The weight types synth writes: every type with a quantizer (SynthTypes), by name.
bool SynthSupports(GgmlType type);
std::vector<GgmlType> SynthTypes();
std::string SynthTypeNames();  // "F32, F16, Q4_0, ..."

// Writes the model to options.out_path (atomically). `progress(done, total)` counts bytes of
// tensor data. Errors: unknown preset, unreadable vocabulary or one without tokenizer keys,
// unsupported type, attn_sharpen not in (0, 100], layers not in [0, the preset's], I/O failures.
Status Synthesize(const SynthOptions& options,
                  const std::function<void(size_t done, size_t total)>& progress = nullptr);

}  // namespace promptcache
