// Hyperparameters of a model, read from GGUF metadata (`{arch}.*` keys), and the
// rotary-embedding frequencies they imply (base, Llama-3 scaling, linear scaling, or per-pair
// factors stored in a `rope_freqs.weight` tensor).
//
// Architectures differ as data, not as code: every supported architecture (llama with its
// Mistral-style and Mixtral-style files, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3, phi3,
// gpt-oss) runs through one forward pass, and what sets them apart is in this struct: the rotary
// layout and scaling (YaRN's frequencies and magnitude factor included), an embedding scale, the
// attention scale and soft-capping, the gate's activation (SiLU, GELU, or gpt-oss's clamped
// SwiGLU), which layers see only a sliding window of keys and with which rotary frequencies,
// which tensor is the FFN's input norm, and whether the FFNs are mixtures of experts, whose
// chosen experts' weights are renormalized, and whether beside them every token also goes
// through a shared expert (Qwen1.5/2-MoE: scaled by a sigmoid gate where the file has one).
// architectures.cc fills these from the file and from each architecture's conventions (what
// llama.cpp assumes where its converter writes no key); the optional tensors of a layer (biases
// of Q/K/V, the attention output, the router and the experts; Q/K norms; post-norms; attention
// sinks) are found by model.cc.
//
// Gemma's RMSNorm weights are stored as 1 + w by the GGUF converter, so they are applied like
// everyone else's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

// kSwiGluOai (gpt-oss): with g = min(gate, 7) and u = clamp(up, -7, 7),
// g * sigmoid(1.702 g) * (u + 1).
enum class FfnActivation { kSilu, kGeluTanh, kSwiGluOai };

struct ModelConfig {
  std::string architecture;  // one of SupportedArchitectures()
  std::string name;          // general.name, for display
  int n_vocab = 0;
  int n_embd = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_ff = 0;
  // Mixture of experts (qwen3moe, Mixtral-style llama): each layer's FFN is n_expert experts of
  // width n_ff_exp, of which a router picks n_expert_used per token. 0 experts: dense FFNs.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  // The chosen experts' probabilities are divided by their sum (Mixtral, qwen3moe, gpt-oss), or
  // used as they are (qwen2moe).
  bool expert_weights_norm = true;
  // > 0: each mixture-of-experts layer also has a shared expert, a dense gated FFN of this width
  // (ffn_{gate,up,down}_shexp) that every token goes through, its output added to the routed
  // experts' (scaled by sigmoid(ffn_gate_inp_shexp · x) in layers that have that gate).
  int n_ff_shexp = 0;
  int context_length = 0;  // what the model was trained for
  // What linear RoPE scaling extends it to (rope.scaling.original_context_length × factor);
  // 0: no such scaling.
  int rope_scaled_context = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  std::string rope_scaling;     // "", "linear", "llama3", "yarn"
  std::vector<float> inv_freq;  // head_dim / 2 rotation frequencies, scaling applied
  // YaRN's attention magnitude factor: rotated queries and keys are multiplied by it (as
  // llama.cpp scales its rotation's cos and sin), so scores by its square. 1: none.
  float rope_mscale = 1.0f;
  // Rotary pairs are (i, i + head_dim/2) (GPT-NeoX layout: qwen, gemma, phi3), not (2i, 2i+1).
  bool rope_halves = false;

  // Architecture features (architectures.cc).
  float embed_scale = 1.0f;    // token embeddings are multiplied by it (Gemma: sqrt(n_embd))
  float attn_scale = 0.0f;     // multiplies q·k: 1/sqrt(head_dim) unless the architecture says
  float attn_softcap = 0.0f;   // > 0: attention scores become cap * tanh(score / cap) (Gemma 2)
  float final_softcap = 0.0f;  // > 0: the same on the logits (Gemma 2)
  FfnActivation ffn_activation = FfnActivation::kSilu;
  // gpt-oss: the FFN's input norm is the file's post_attention_norm (it has no ffn_norm), not
  // a norm of the attention's output as in Gemma.
  bool ffn_norm_is_post_attention_norm = false;
  // > 0: on sliding layers a query at position p sees only keys at positions > p - window.
  int sliding_window = 0;
  std::vector<uint8_t> layer_sliding;  // [n_layers]: 1 where the layer slides
  // Rotary frequencies of sliding layers when they differ (Gemma 3: base 10000, unscaled).
  std::vector<float> inv_freq_sliding;
  // LongRoPE (Phi-3): frequencies for a context past rope_original_context (UseContext picks
  // them), the short ones being in inv_freq.
  std::vector<float> inv_freq_long;
  int rope_original_context = 0;
  bool rope_long = false;  // inv_freq holds the long frequencies

  bool Sliding(int layer) const { return sliding_window > 0 && layer_sliding[layer] != 0; }
  bool AnySliding() const { return sliding_window > 0; }
  const std::vector<float>& InvFreq(int layer) const {
    return Sliding(layer) && !inv_freq_sliding.empty() ? inv_freq_sliding : inv_freq;
  }
  // Picks the rotary frequencies for running with `context` positions: LongRoPE's long ones
  // past the original context, as llama.cpp does. Returns whether that changed them.
  bool UseContext(int context);
  // The longest context the file says the model handles.
  int MaxContext() const { return std::max(context_length, rope_scaled_context); }
  bool Moe() const { return n_expert > 0; }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// A context beyond MaxContext() is refused unless `allow_long` (positions the model never saw:
// its output degrades, as vLLM refuses too); the error names both numbers and the flag.
Status CheckContext(const ModelConfig& c, int context, bool allow_long);

// "llama, qwen2, ...": what ReadModelConfig accepts.
std::string SupportedArchitectures();
bool KnownArchitecture(const std::string& name);

// Rotates n_heads heads of x (head_dim each) to position `pos` in the model's rotary layout,
// with layer `layer`'s frequencies.
void ApplyRope(const ModelConfig& c, int layer, float* x, int n_heads, float pos);

// Sets the architecture's features (the fields after rope_halves) once the common keys are
// read: architectures.cc. Unimplemented for an architecture it does not know, naming it and
// the supported ones.
Status ReadArchitecture(const GgufFile& file, ModelConfig* c);

// Reads and checks the hyperparameters. Errors name the key, e.g.
// "llama.attention.head_count_kv = 5 does not divide llama.attention.head_count = 8".
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace promptcache
