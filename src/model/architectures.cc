// How each architecture's GGUF file maps onto the one forward pass: the features of
// ModelConfig that the common keys do not give, read from the architecture's own keys where its
// converter writes them and otherwise set as llama.cpp sets them (its conventions are what
// every GGUF file was made and checked against).
#include <cmath>

#include "model/config.h"

namespace promptcache {
namespace {

// Per-layer sliding flags from `{arch}.attention.sliding_window_pattern` when the file has it
// (an array of bools, one per layer, or a period n: every n-th layer is global), else `period`.
Status ReadSlidingPattern(const GgufFile& f, const std::string& a, int period, ModelConfig* c) {
  c->layer_sliding.assign(c->n_layers, 0);
  const GgufValue* v = f.Find(a + ".attention.sliding_window_pattern");
  if (v != nullptr && v->is_array()) {
    if (static_cast<int>(v->array.size()) != c->n_layers) {
      return InvalidArgument(a + ".attention.sliding_window_pattern has " +
                             std::to_string(v->array.size()) + " entries for " +
                             std::to_string(c->n_layers) + " layers");
    }
    for (int l = 0; l < c->n_layers; ++l) {
      bool on = false;
      int64_t n = 0;
      if (!v->array[l].AsBool(&on) && !(v->array[l].AsInt64(&n) && (on = n != 0, true))) {
        return InvalidArgument(a + ".attention.sliding_window_pattern must hold booleans");
      }
      c->layer_sliding[l] = on;
    }
    return Status::Ok();
  }
  if (v != nullptr) {
    int64_t n = 0;
    if (!v->AsInt64(&n) || n < 1 || n > c->n_layers + 1) {
      return InvalidArgument(a + ".attention.sliding_window_pattern is out of range");
    }
    period = static_cast<int>(n);
  }
  for (int l = 0; l < c->n_layers; ++l) c->layer_sliding[l] = (l + 1) % period != 0;
  return Status::Ok();
}

// `{arch}.attention.sliding_window`, or `fallback` when the file has none (0: no window).
Status ReadWindow(const GgufFile& f, const std::string& a, int64_t fallback, ModelConfig* c) {
  PC_ASSIGN_OR_RETURN(int64_t w, f.GetIntOr(a + ".attention.sliding_window", fallback));
  if (w < 0 || w > (int64_t(1) << 30)) {
    return InvalidArgument(a + ".attention.sliding_window = " + std::to_string(w) +
                           " is out of range");
  }
  c->sliding_window = static_cast<int>(w);
  return Status::Ok();
}

std::vector<float> Frequencies(double base, int head_dim) {
  std::vector<float> f(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    f[i] = static_cast<float>(std::pow(base, -2.0 * i / head_dim));
  }
  return f;
}

// Llama and Mistral: Mistral-style files are `llama` with `llama.attention.sliding_window`
// (every layer slides). llama.cpp ignores that key for `llama`; Mistral's own code and HF's
// honour it, and so do we.
Status ReadLlama(const GgufFile& f, ModelConfig* c) {
  PC_RETURN_IF_ERROR(ReadWindow(f, c->architecture, 0, c));
  c->layer_sliding.assign(c->n_layers, 1);
  return Status::Ok();
}

// Qwen2/2.5 (Q/K/V biases), Qwen3 and Qwen3-MoE (per-head Q/K norms): NeoX rotary layout; the
// optional tensors say the rest.
Status ReadQwen(const GgufFile&, ModelConfig* c) {
  c->rope_halves = true;
  return Status::Ok();
}

// What Gemma 2 and 3 share: the embedding scaled by sqrt(n_embd), a GELU gate, and, for the
// largest size, queries scaled by 1/sqrt(n_embd / n_heads) instead of 1/sqrt(head_dim)
// (llama.cpp tells that size by its layer count).
void SetGemma(ModelConfig* c, int largest_layers) {
  c->rope_halves = true;
  c->embed_scale = std::sqrt(static_cast<float>(c->n_embd));
  c->ffn_activation = FfnActivation::kGeluTanh;
  if (c->n_layers == largest_layers) {
    c->attn_scale = 1.0f / std::sqrt(static_cast<float>(c->n_embd / c->n_heads));
  }
}

// Gemma 2: sliding-window attention (default 4096) on even layers, attention and final logit
// soft-capping (defaults 50 and 30, as llama.cpp's).
Status ReadGemma2(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->architecture;
  SetGemma(c, 46);
  PC_RETURN_IF_ERROR(ReadWindow(f, a, 4096, c));
  c->layer_sliding.assign(c->n_layers, 0);
  for (int l = 0; l < c->n_layers; l += 2) c->layer_sliding[l] = 1;
  PC_ASSIGN_OR_RETURN(double attn_cap, f.GetFloatOr(a + ".attn_logit_softcapping", 50.0));
  PC_ASSIGN_OR_RETURN(double final_cap, f.GetFloatOr(a + ".final_logit_softcapping", 30.0));
  if (!(attn_cap >= 0) || !(final_cap >= 0)) {
    return InvalidArgument(a + ": logit soft-capping must be >= 0");
  }
  c->attn_softcap = static_cast<float>(attn_cap);
  c->final_softcap = static_cast<float>(final_cap);
  return Status::Ok();
}

// Gemma 3: five sliding layers to one global, the window from the file; sliding layers rotate
// with base 10000 and no scaling, global ones with the file's base and scaling.
Status ReadGemma3(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->architecture;
  SetGemma(c, 62);
  if (f.Find(a + ".attention.sliding_window") == nullptr) {
    return NotFound("missing key '" + a + ".attention.sliding_window'");
  }
  PC_RETURN_IF_ERROR(ReadWindow(f, a, 0, c));
  PC_RETURN_IF_ERROR(ReadSlidingPattern(f, a, 6, c));
  PC_ASSIGN_OR_RETURN(double base, f.GetFloatOr(a + ".rope.freq_base_swa", 10000.0));
  if (!(base > 1.0)) return InvalidArgument(a + ".rope.freq_base_swa must be > 1");
  c->inv_freq_sliding = Frequencies(base, c->head_dim);
  return Status::Ok();
}

// Phi-3/3.5: NeoX layout (fused QKV and gate/up tensors: model.cc), LongRoPE (short and long
// per-pair frequency divisors in tensors, the long ones past the original context, and an
// attention factor that scales both Q and K, so scores by its square), and a sliding window
// llama.cpp defaults by shape when the file has none.
Status ReadPhi3(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->architecture;
  c->rope_halves = true;
  int64_t window = 0;
  if (c->context_length == 4096 && (c->n_layers == 32 || c->n_layers == 40)) window = 2047;
  PC_RETURN_IF_ERROR(ReadWindow(f, a, window, c));
  c->layer_sliding.assign(c->n_layers, 1);
  const int half = c->head_dim / 2;
  auto factors = [&](const char* name, std::vector<float>* freq) -> Status {
    const GgufTensorInfo* t = f.FindTensor(name);
    if (t == nullptr) return Status::Ok();
    if (t->type != GgmlType::kF32 || t->elements() != half) {
      return InvalidArgument(std::string(name) + " must be F32 with " + std::to_string(half) +
                             " elements");
    }
    *freq = Frequencies(c->rope_base, c->head_dim);
    const float* d = reinterpret_cast<const float*>(t->data);
    for (int i = 0; i < half; ++i) {
      if (!(d[i] > 0)) return InvalidArgument(std::string(name) + " has a factor <= 0");
      (*freq)[i] /= d[i];
    }
    return Status::Ok();
  };
  PC_RETURN_IF_ERROR(factors("rope_factors_short.weight", &c->inv_freq));
  PC_RETURN_IF_ERROR(factors("rope_factors_long.weight", &c->inv_freq_long));
  if (!c->inv_freq_long.empty()) {
    PC_ASSIGN_OR_RETURN(int64_t orig, f.GetIntOr(a + ".rope.scaling.original_context_length", 0));
    if (orig <= 0) return NotFound("missing key '" + a + ".rope.scaling.original_context_length'");
    c->rope_original_context = static_cast<int>(std::min<int64_t>(orig, 1 << 30));
    c->rope_scaling = "longrope";
  }
  PC_ASSIGN_OR_RETURN(double attn_factor, f.GetFloatOr(a + ".rope.scaling.attn_factor", 1.0));
  if (!(attn_factor > 0 && attn_factor < 100)) {
    return InvalidArgument(a + ".rope.scaling.attn_factor is out of range");
  }
  c->attn_scale *= static_cast<float>(attn_factor * attn_factor);
  return Status::Ok();
}

// gpt-oss: NeoX rotary layout (YaRN scaling: config.cc), a window (the file's, required, as
// llama.cpp requires it) on even layers, odd ones global; the clamped SwiGLU; the file's
// post_attention_norm is the FFN's input norm. Biases, attention sinks and the MoE are tensors
// (model.cc).
Status ReadGptOss(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->architecture;
  c->rope_halves = true;
  c->ffn_activation = FfnActivation::kSwiGluOai;
  c->ffn_norm_is_post_attention_norm = true;
  if (f.Find(a + ".attention.sliding_window") == nullptr) {
    return NotFound("missing key '" + a + ".attention.sliding_window'");
  }
  PC_RETURN_IF_ERROR(ReadWindow(f, a, 0, c));
  c->layer_sliding.assign(c->n_layers, 0);
  for (int l = 0; l < c->n_layers; l += 2) c->layer_sliding[l] = 1;
  return Status::Ok();
}

// Whether an architecture's layers may be (or are always) mixtures of experts.
enum class Experts { kNone, kOptional, kRequired };

// More experts than any released model has (DeepSeek-V3 and Qwen3-Next: 256 and 512); a file
// asking for more is damaged, and would make the per-layer tables absurd.
constexpr int64_t kMaxExperts = 4096;

// An FFN width key (`fallback` where the file has none): 1 to 2^20.
Result<int> ReadWidth(const GgufFile& f, const std::string& key, int64_t fallback) {
  PC_ASSIGN_OR_RETURN(int64_t ff, f.GetIntOr(key, fallback));
  if (ff < 1 || ff > (int64_t(1) << 20)) {
    return InvalidArgument(key + " = " + std::to_string(ff) + " is out of range");
  }
  return static_cast<int>(ff);
}

// `{arch}.expert_count` and `{arch}.expert_used_count`, and the experts' FFN width:
// `{arch}.expert_feed_forward_length` where the architecture has one (qwen3moe; without it
// n_ff / n_expert_used, as ik_llama.cpp falls back), else feed_forward_length (Mixtral).
Status ReadExperts(const GgufFile& f, Experts kind, ModelConfig* c) {
  const std::string& a = c->architecture;
  PC_ASSIGN_OR_RETURN(int64_t n, f.GetIntOr(a + ".expert_count", 0));
  if (n == 0 && kind != Experts::kRequired) return Status::Ok();
  if (kind == Experts::kNone) {
    return Unimplemented(a + ".expert_count = " + std::to_string(n) + ": mixture-of-experts " + a +
                         " files are not supported");
  }
  if (n < 1 || n > kMaxExperts) {
    return InvalidArgument(a + ".expert_count = " + std::to_string(n) + " is out of range (1 to " +
                           std::to_string(kMaxExperts) + ")");
  }
  PC_ASSIGN_OR_RETURN(int64_t used, f.GetIntOr(a + ".expert_used_count", 0));
  if (used < 1 || used > n) {
    return InvalidArgument(a + ".expert_used_count = " + std::to_string(used) +
                           " is out of range (1 to " + a + ".expert_count = " + std::to_string(n) +
                           ")");
  }
  c->n_expert = static_cast<int>(n);
  c->n_expert_used = static_cast<int>(used);
  c->n_ff_exp = c->n_ff;
  if (kind == Experts::kRequired) c->n_ff_exp = c->n_ff / c->n_expert_used;
  PC_ASSIGN_OR_RETURN(c->n_ff_exp, ReadWidth(f, a + ".expert_feed_forward_length", c->n_ff_exp));
  return Status::Ok();
}

// Qwen1.5-MoE and Qwen2-MoE: qwen2's attention (Q/K/V biases, NeoX layout); routed experts
// whose weights are the softmax's probabilities as they are, not renormalized over the chosen;
// a shared expert in every layer, `{arch}.expert_shared_feed_forward_length` wide (without it
// feed_forward_length, as llama.cpp falls back).
Status ReadQwen2Moe(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->architecture;
  c->rope_halves = true;
  c->expert_weights_norm = false;
  PC_ASSIGN_OR_RETURN(c->n_ff_shexp,
                      ReadWidth(f, a + ".expert_shared_feed_forward_length", c->n_ff));
  return Status::Ok();
}

struct Architecture {
  const char* name;
  Status (*read)(const GgufFile&, ModelConfig*);
  Experts experts = Experts::kNone;
};

// Mixtral is `llama` with `llama.expert_count`; Qwen3-MoE is Qwen 3 (per-head Q/K norms, NeoX
// rotary layout) with expert FFNs in every layer; so are Qwen2-MoE (qwen2's attention, a shared
// expert) and gpt-oss (its own attention).
constexpr Architecture kArchitectures[] = {
    {"llama", ReadLlama, Experts::kOptional},
    {"qwen2", ReadQwen},
    {"qwen2moe", ReadQwen2Moe, Experts::kRequired},
    {"qwen3", ReadQwen},
    {"qwen3moe", ReadQwen, Experts::kRequired},
    {"gemma2", ReadGemma2},
    {"gemma3", ReadGemma3},
    {"phi3", ReadPhi3},
    {"gpt-oss", ReadGptOss, Experts::kRequired},
};

}  // namespace

std::string SupportedArchitectures() {
  std::string names;
  for (const Architecture& a : kArchitectures) {
    names += (names.empty() ? "" : ", ") + std::string(a.name);
  }
  return names;
}

bool KnownArchitecture(const std::string& name) {
  for (const Architecture& a : kArchitectures) {
    if (name == a.name) return true;
  }
  return false;
}

Status ReadArchitecture(const GgufFile& f, ModelConfig* c) {
  for (const Architecture& a : kArchitectures) {
    if (c->architecture != a.name) continue;
    PC_RETURN_IF_ERROR(a.read(f, c));
    PC_RETURN_IF_ERROR(ReadExperts(f, a.experts, c));
    // A window as long as any context the model runs is no window.
    if (c->sliding_window >= c->MaxContext() && c->MaxContext() > 0) c->sliding_window = 0;
    if (c->layer_sliding.empty()) c->layer_sliding.assign(c->n_layers, 0);
    return Status::Ok();
  }
  return Unimplemented("unsupported architecture '" + c->architecture + "' (promptcache runs " +
                       SupportedArchitectures() + ")");
}

}  // namespace promptcache
