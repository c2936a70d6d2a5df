// Hyperparameters of a Llama-family model, read from GGUF metadata (`{arch}.*` keys), and the
// rotary-embedding frequencies they imply (base, Llama-3 scaling, linear scaling, or per-pair
// factors stored in a `rope_freqs.weight` tensor).
#pragma once

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
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  std::string rope_scaling;     // "", "linear", "llama3"
  std::vector<float> inv_freq;  // head_dim / 2 rotation frequencies, scaling applied

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and checks the hyperparameters. Errors name the key, e.g.
// "llama.attention.head_count_kv = 5 does not divide llama.attention.head_count = 8".
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace promptcache
