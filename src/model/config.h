// Hyperparameters of a Llama-family model, read from GGUF metadata (`{arch}.*` keys), and the
// rotary-embedding frequencies they imply (base, Llama-3 scaling, linear scaling, or per-pair
// factors stored in a `rope_freqs.weight` tensor).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

struct ModelConfig {
  std::string architecture;  // "llama"
  std::string name;          // general.name, for display
  int n_vocab = 0;
  int n_embd = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_ff = 0;
  int context_length = 0;  // what the model was trained for
  // What linear RoPE scaling extends it to (rope.scaling.original_context_length × factor);
  // 0: no such scaling.
  int rope_scaled_context = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  std::string rope_scaling;     // "", "linear", "llama3"
  std::vector<float> inv_freq;  // head_dim / 2 rotation frequencies, scaling applied

  // The longest context the file says the model handles.
  int MaxContext() const { return std::max(context_length, rope_scaled_context); }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// A context beyond MaxContext() is refused unless `allow_long` (positions the model never saw:
// its output degrades, as vLLM refuses too); the error names both numbers and the flag.
Status CheckContext(const ModelConfig& c, int context, bool allow_long);

// Reads and checks the hyperparameters. Errors name the key, e.g.
// "llama.attention.head_count_kv = 5 does not divide llama.attention.head_count = 8".
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace promptcache
