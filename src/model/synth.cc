// Synthetic model generation (see synth.h). Weights come from a counter-based generator seeded
// by (seed, tensor name, row), so the bytes depend only on the options, never on the number of
// threads, and rows can be produced in parallel straight into the writer's buffer.
#include "model/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numbers>
#include <tuple>

#include "core/hash.h"
#include "core/thread_pool.h"
#include "model/quant_mix.h"
#include "ops/quant.h"

namespace promptcache {

namespace {

constexpr float kWeightStd = 0.02f;
constexpr float kRmsEps = 1e-5f;

// What sets a preset apart besides its dimensions and architecture: SynthShape's fields of the
// same names, with its defaults.
struct Extras {
  int head_dim = 0;
  float rope_base = SynthShape().rope_base;
  bool tied_embeddings = SynthShape().tied_embeddings;
  float rope_scale_factor = 0.0f;
  int rope_original_ctx = SynthShape().rope_original_ctx;
  int sliding_window = 0;
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  float rope_linear_factor = 0.0f;
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;  // qwen3moe, gpt-oss (llama's experts are n_ff wide)
  int n_ff_shexp = 0;
  float rope_yarn_factor = 0.0f;
};

struct Preset {
  const char* name;
  const char* display_name;
  const char* architecture;
  int n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
  Extras extras = {};
};

// One preset a row: name, display name, architecture, n_embd, n_layer, n_head, n_head_kv, n_ff,
// n_ctx, then its extras. The optional tensors follow from the architecture (ShapeOf).
const Preset kPresets[] = {
    {"smollm2-135m", "SmolLM2-135M", "llama", 576, 30, 9, 3, 1536, 8192,
     Extras{.rope_base = 100000.0f}},
    {"smollm2-360m", "SmolLM2-360M", "llama", 960, 32, 15, 5, 2560, 8192,
     Extras{.rope_base = 100000.0f}},
    {"tinyllama-1.1b", "TinyLlama-1.1B", "llama", 2048, 22, 32, 4, 5632, 2048,
     Extras{.tied_embeddings = false}},
    {"llama3.2-1b", "Llama-3.2-1B", "llama", 2048, 16, 32, 8, 8192, 131072,
     Extras{.rope_base = 500000.0f, .rope_scale_factor = 32.0f}},
    // Mistral 7B v0.1: a llama file with a 4096-token sliding window on every layer.
    {"mistral-7b", "Mistral-7B-v0.1", "llama", 4096, 32, 32, 8, 14336, 32768,
     Extras{.tied_embeddings = false, .sliding_window = 4096}},
    {"qwen2.5-0.5b", "Qwen2.5-0.5B", "qwen2", 896, 24, 14, 2, 4864, 32768,
     Extras{.rope_base = 1000000.0f}},
    // Qwen3's heads are 128 wide: q_dim 2048 against n_embd 1024.
    {"qwen3-0.6b", "Qwen3-0.6B", "qwen3", 1024, 28, 16, 8, 3072, 40960,
     Extras{.head_dim = 128, .rope_base = 1000000.0f}},
    // Qwen3-30B-A3B (and Qwen3-Coder-30B-A3B): 128 experts of width 768, 8 per token; the
    // dense feed_forward_length its config also gives (6144) is written but unused.
    {"qwen3-30b-a3b", "Qwen3-30B-A3B", "qwen3moe", 2048, 48, 32, 4, 6144, 40960,
     Extras{.head_dim = 128,
            .rope_base = 1000000.0f,
            .tied_embeddings = false,
            .n_expert = 128,
            .n_expert_used = 8,
            .n_ff_exp = 768}},
    // Qwen1.5-MoE-A2.7B: 60 experts of width 1408, 4 per token, beside a gated shared expert
    // of 5632 (its feed_forward_length too).
    {"qwen1.5-moe-a2.7b", "Qwen1.5-MoE-A2.7B", "qwen2moe", 2048, 24, 16, 16, 5632, 8192,
     Extras{.rope_base = 1000000.0f,
            .tied_embeddings = false,
            .n_expert = 60,
            .n_expert_used = 4,
            .n_ff_exp = 1408,
            .n_ff_shexp = 5632}},
    {"gemma2-2b", "Gemma-2-2B", "gemma2", 2304, 26, 8, 4, 9216, 8192,
     Extras{
         .head_dim = 256, .sliding_window = 4096, .attn_softcap = 50.0f, .final_softcap = 30.0f}},
    {"gemma3-1b", "Gemma-3-1B", "gemma3", 1152, 26, 4, 1, 6912, 32768,
     Extras{.head_dim = 256, .rope_base = 1000000.0f, .sliding_window = 512}},
    {"phi3.5-mini", "Phi-3.5-mini", "phi3", 3072, 32, 32, 32, 8192, 131072,
     Extras{.tied_embeddings = false, .rope_original_ctx = 4096, .sliding_window = 262144}},
    {"tiny-test", "tiny-test", "llama", 64, 2, 4, 2, 128, 256, Extras{.tied_embeddings = false}},
    // The shape of the llama.cpp conformance fixtures (shared/models/conformance): rows that
    // 256-element blocks divide, so K-quant files need no fallback types.
    {"tiny-256", "tiny-256", "llama", 256, 4, 4, 2, 768, 8192},
    // tiny-256 with Llama-3's RoPE (base 500000, frequency factors for a 131072-token context
    // from 8192): the end-to-end reference fixture of src/model/testdata/llama3-tied.
    {"tiny-256-llama3", "tiny-256-llama3", "llama", 256, 4, 4, 2, 768, 131072,
     Extras{.rope_base = 500000.0f, .rope_scale_factor = 32.0f}},
    // The conformance shape in the other architectures (src/model/testdata/architectures).
    // Windows are shorter than the 64-token reference prompt, so the masks are exercised, and
    // soft-caps near the random weights' scores (about 0.1 for attention, 0.3 for logits), so
    // that they matter. llama.cpp runs Gemma 2 only in its real layer counts (26 is 2B's).
    {"tiny-qwen2", "tiny-qwen2", "qwen2", 256, 4, 4, 2, 768, 8192, Extras{.rope_base = 1000000.0f}},
    {"tiny-qwen3", "tiny-qwen3", "qwen3", 256, 4, 4, 2, 768, 8192,
     Extras{.head_dim = 128, .rope_base = 1000000.0f}},
    {"tiny-gemma2", "tiny-gemma2", "gemma2", 256, 26, 4, 2, 768, 8192,
     Extras{.head_dim = 128, .sliding_window = 24, .attn_softcap = 0.1f, .final_softcap = 0.5f}},
    {"tiny-gemma3", "tiny-gemma3", "gemma3", 256, 8, 4, 2, 768, 32768,
     Extras{.head_dim = 128,
            .rope_base = 1000000.0f,
            .sliding_window = 24,
            .rope_linear_factor = 4.0f}},
    // (Not named "phi3" inside: llama.cpp then expects Phi-3's own <|endoftext|> token.)
    {"tiny-phi3", "tiny-phi", "phi3", 256, 4, 4, 4, 768, 8192,
     Extras{.tied_embeddings = false, .rope_original_ctx = 256, .sliding_window = 8192}},
    {"tiny-mistral", "tiny-mistral", "llama", 256, 4, 4, 2, 768, 8192,
     Extras{.tied_embeddings = false, .sliding_window = 4096}},
    // Mixtures of experts: 8 experts, 2 per token. Qwen3-MoE's experts (256 wide) are narrower
    // than its dense feed_forward_length (768) and than that divided by the experts used (384,
    // what ik_llama.cpp assumes without the key); Mixtral's are feed_forward_length (512) wide.
    {"tiny-qwen3moe", "tiny-qwen3moe", "qwen3moe", 256, 4, 4, 2, 768, 8192,
     Extras{.head_dim = 128,
            .rope_base = 1000000.0f,
            .tied_embeddings = false,
            .n_expert = 8,
            .n_expert_used = 2,
            .n_ff_exp = 256}},
    // Qwen2-MoE: qwen2's attention, 8 experts of 256, 2 per token (their weights not
    // renormalized), a shared expert of 512 (neither feed_forward_length, 768, nor the 384 of
    // that divided by the experts used) with its sigmoid gate.
    {"tiny-qwen2moe", "tiny-qwen2moe", "qwen2moe", 256, 4, 4, 2, 768, 8192,
     Extras{.rope_base = 1000000.0f,
            .tied_embeddings = false,
            .n_expert = 8,
            .n_expert_used = 2,
            .n_ff_exp = 256,
            .n_ff_shexp = 512}},
    {"tiny-mixtral", "tiny-mixtral", "llama", 256, 4, 4, 2, 512, 8192,
     Extras{.rope_base = 1000000.0f, .tied_embeddings = false, .n_expert = 8, .n_expert_used = 2}},
    // gpt-oss-20b: 64 query heads of 64 over a 2880-wide stream, 32 experts of width 2880, 4
    // per token, a 128-token window on even layers, YaRN x32 from 4096. (Its real file has the
    // experts in MXFP4 and the rest in F16/Q8_0: `synth --type mxfp4` makes every matrix
    // MXFP4.)
    {"gpt-oss-20b", "gpt-oss-20b", "gpt-oss", 2880, 24, 64, 8, 2880, 131072,
     Extras{.head_dim = 64,
            .rope_base = 150000.0f,
            .tied_embeddings = false,
            .rope_original_ctx = 4096,
            .sliding_window = 128,
            .n_expert = 32,
            .n_expert_used = 4,
            .n_ff_exp = 2880,
            .rope_yarn_factor = 32.0f}},
    // gpt-oss in the conformance shape: 8 experts of 256, 2 per token, a 16-token window on even
    // layers, YaRN x32 from an original context of 256 (so that its ramp spans pairs 0 to 10 of
    // the 32).
    {"tiny-gpt-oss", "tiny-gpt-oss", "gpt-oss", 256, 4, 4, 2, 256, 8192,
     Extras{.head_dim = 64,
            .rope_base = 150000.0f,
            .tied_embeddings = false,
            .rope_original_ctx = 256,
            .sliding_window = 16,
            .n_expert = 8,
            .n_expert_used = 2,
            .n_ff_exp = 256,
            .rope_yarn_factor = 32.0f}},
    // tiny-mistral with a 20-token window: every layer slides and a short prompt passes it
    // (the sliding-window cache tests: blocks then have no global layers at all).
    {"tiny-mistral-w20", "tiny-mistral-w20", "llama", 256, 4, 4, 2, 768, 8192,
     Extras{.tied_embeddings = false, .sliding_window = 20}},
};

// The preset's shape, with the layout its architecture's converter writes: Q/K/V biases
// (qwen2), per-head Q/K norms (qwen3, gemma3), post-norms (gemma2, gemma3), fused QKV and
// gate/up tensors with LongRoPE factors (phi3).
SynthShape ShapeOf(const Preset& p) {
  const Extras& e = p.extras;
  const std::string arch = p.architecture;
  return {.name = p.name,
          .display_name = p.display_name,
          .architecture = arch,
          .n_embd = p.n_embd,
          .n_layer = p.n_layer,
          .n_head = p.n_head,
          .n_head_kv = p.n_head_kv,
          .n_ff = p.n_ff,
          .n_ctx = p.n_ctx,
          .head_dim = e.head_dim,
          .rope_base = e.rope_base,
          .tied_embeddings = e.tied_embeddings,
          .rope_scale_factor = e.rope_scale_factor,
          .rope_original_ctx = e.rope_original_ctx,
          .qkv_bias = arch == "qwen2" || arch == "qwen2moe" || arch == "gpt-oss",
          .qk_norm = arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3",
          .post_norms = arch == "gemma2" || arch == "gemma3",
          .sliding_window = e.sliding_window,
          .attn_softcap = e.attn_softcap,
          .final_softcap = e.final_softcap,
          .rope_linear_factor = e.rope_linear_factor,
          .fused = arch == "phi3",
          .longrope = arch == "phi3",
          .n_expert = e.n_expert,
          .n_expert_used = e.n_expert_used,
          .n_ff_exp = e.n_expert > 0 && e.n_ff_exp == 0 ? p.n_ff : e.n_ff_exp,
          .n_ff_shexp = e.n_ff_shexp,
          .rope_yarn_factor = e.rope_yarn_factor,
          .oai_layout = arch == "gpt-oss"};
}

// SplitMix64 finaliser: a strong 64-bit mix, used both to derive seeds and as the generator
// (state advanced by a Weyl increment).
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills `out` with approximately normal values of standard deviation `std`: the sum of four
// 16-bit uniforms (Irwin-Hall), all taken from one 64-bit draw.
void RandomRow(uint64_t row_seed, float std, float* out, int64_t n) {
  constexpr float kMean = 4 * 32767.5f;
  const float scale = std / (65536.0f / std::sqrt(3.0f));
  uint64_t state = row_seed;
  for (int64_t i = 0; i < n; ++i) {
    state += 0x9e3779b97f4a7c15ull;
    const uint64_t r = Mix64(state);
    const uint32_t sum =
        static_cast<uint32_t>(r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48);
    out[i] = (static_cast<float>(sum) - kMean) * scale;
  }
}

// The tokenizer.* metadata of the vocabulary file and its number of tokens.
Status ReadVocab(const std::string& path, std::vector<std::pair<std::string, GgufValue>>* keys,
                 int64_t* n_vocab) {
  PC_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  for (const auto& [key, value] : file->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) keys->emplace_back(key, value);
  }
  if (keys->empty()) return InvalidArgument(path + ": no tokenizer.* keys (not a vocabulary file)");
  const GgufValue* tokens = file->Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || !tokens->is_array() || tokens->array.empty()) {
    return InvalidArgument(path + ": no tokenizer.ggml.tokens array");
  }
  *n_vocab = static_cast<int64_t>(tokens->array.size());
  return Status::Ok();
}

// Declares a matrix of `rows` rows of `cols` random values in `type`, or in its fallback type
// where the type's block does not divide `cols` (as llama.cpp's quantizer does). The first
// `scaled_rows` rows are multiplied by `scale` (attn_sharpen; Phi-3's fused QKV scales Q and K).
// With experts > 0, a 3-D tensor of that many such matrices (scaling none), each a contiguous
// slice, as the converter stacks Mixtral's and Qwen3-MoE's experts.
void AddRandomMatrix(GgufWriter* w, ThreadPool* pool, const std::string& name, int64_t cols,
                     int64_t rows, GgmlType file_type, uint64_t seed, float scale = 1.0f,
                     int64_t scaled_rows = 0, int64_t experts = 0) {
  const GgmlType type = FallbackForWidth(file_type, cols);
  const uint64_t tensor_seed = Mix64(seed ^ Hash64(name.data(), name.size()));
  std::vector<int64_t> dims = {cols, rows};
  if (experts > 0) {
    dims.push_back(experts);
    rows *= experts;
  }
  w->AddTensor(name, dims, type, [=](uint8_t* dst, size_t nbytes) {
    const size_t row_bytes = RowBytes(type, cols);
    PC_CHECK(row_bytes * static_cast<size_t>(rows) == nbytes);
    pool->ParallelFor(rows, [&](int64_t begin, int64_t end) {
      std::unique_ptr<float[]> buf(new float[static_cast<size_t>(cols)]);
      for (int64_t r = begin; r < end; ++r) {
        const float std = r < scaled_rows ? kWeightStd * scale : kWeightStd;
        RandomRow(Mix64(tensor_seed + static_cast<uint64_t>(r)), std, buf.get(), cols);
        QuantizeRow(type, buf.get(), cols, dst + static_cast<size_t>(r) * row_bytes);
      }
    });
  });
}

void AddF32Vector(GgufWriter* w, const std::string& name, std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  w->AddTensor(name, {n}, GgmlType::kF32,
               [values = std::move(values)](uint8_t* dst, size_t nbytes) {
                 PC_CHECK(nbytes == values.size() * sizeof(float));
                 std::memcpy(dst, values.data(), nbytes);
               });
}

// `n` values of mean + N(0, std): norm weights around 1, biases around 0; seeded by the name.
std::vector<float> RandomVector(const std::string& name, int64_t n, float std, float mean,
                                uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  RandomRow(Mix64(seed ^ Hash64(name.data(), name.size())), std, v.data(), n);
  for (float& x : v) x += mean;
  return v;
}

void SetHyperparameters(const SynthShape& s, const SynthOptions& o, int64_t n_vocab,
                        GgufWriter* w) {
  const int head_dim = s.HeadDim();
  const std::string a = s.architecture;
  const float sharpen = o.attn_sharpen;
  w->SetString("general.architecture", a);
  char sharpened[48] = "";
  if (sharpen != 1.0f) std::snprintf(sharpened, sizeof(sharpened), ", attention x%g", sharpen);
  const std::string layers =
      o.layers > 0 ? ", its first " + std::to_string(s.n_layer) + " layers" : "";
  w->SetString("general.name", "synthetic " + s.display_name + layers + " (random weights, seed " +
                                   std::to_string(o.seed) + sharpened + ")");
  w->SetU32("general.file_type", FileTypeIdFor(o.type));
  w->SetU32("general.quantization_version", 2);
  w->SetU32(a + ".vocab_size", static_cast<uint32_t>(n_vocab));
  w->SetU32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w->SetU32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w->SetU32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w->SetU32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w->SetU32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w->SetU32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w->SetU32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
  w->SetU32(a + ".attention.value_length", static_cast<uint32_t>(head_dim));
  w->SetF32(a + ".attention.layer_norm_rms_epsilon", kRmsEps);
  w->SetF32(a + ".rope.freq_base", s.rope_base);
  w->SetU32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim));
  if (s.sliding_window > 0) {
    w->SetU32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  }
  if (s.attn_softcap > 0) {
    w->SetF32(a + ".attn_logit_softcapping", s.attn_softcap * sharpen * sharpen);
  }
  if (s.final_softcap > 0) w->SetF32(a + ".final_logit_softcapping", s.final_softcap);
  if (s.rope_linear_factor > 0) {
    w->SetString(a + ".rope.scaling.type", "linear");
    w->SetF32(a + ".rope.scaling.factor", s.rope_linear_factor);
  }
  if (s.n_expert > 0) {
    w->SetU32(a + ".expert_count", static_cast<uint32_t>(s.n_expert));
    w->SetU32(a + ".expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    if (a == "qwen3moe" || a == "qwen2moe" || a == "gpt-oss") {
      w->SetU32(a + ".expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
    }
    if (s.n_ff_shexp > 0) {
      w->SetU32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(s.n_ff_shexp));
    }
  }
  if (s.rope_yarn_factor > 0) {
    w->SetString(a + ".rope.scaling.type", "yarn");
    w->SetF32(a + ".rope.scaling.factor", s.rope_yarn_factor);
    w->SetU32(a + ".rope.scaling.original_context_length",
              static_cast<uint32_t>(s.rope_original_ctx));
  }
  if (s.longrope) {
    // As the converter computes it from the context's ratio to the original.
    const double scale = double(s.n_ctx) / s.rope_original_ctx;
    w->SetF32(a + ".rope.scaling.attn_factor",
              static_cast<float>(std::sqrt(1 + std::log(scale) / std::log(s.rope_original_ctx))));
    w->SetU32(a + ".rope.scaling.original_context_length",
              static_cast<uint32_t>(s.rope_original_ctx));
  }
}

// `n` values of mean + N(0, std), times `scale`.
std::vector<float> ScaledVector(const std::string& name, int64_t n, float std, float mean,
                                uint64_t seed, float scale) {
  std::vector<float> v = RandomVector(name, n, std, mean, seed);
  for (float& x : v) x *= scale;
  return v;
}

// A mixture-of-experts layer's FFN: the router (F32, as llama.cpp's quantizer leaves it), its
// rows scaled up so that routing is decided (random weights would make every expert about as
// probable) and the experts' stacked matrices.
void AddExperts(const SynthShape& shape, const std::string& p, const SynthOptions& o,
                ThreadPool* pool, GgufWriter* w) {
  const int64_t n_embd = shape.n_embd, n_ff = shape.n_ff_exp, n = shape.n_expert;
  AddRandomMatrix(w, pool, p + "ffn_gate_inp.weight", n_embd, n, GgmlType::kF32, o.seed, 4.0f, n);
  AddRandomMatrix(w, pool, p + "ffn_gate_exps.weight", n_embd, n_ff, o.type, o.seed, 1, 0, n);
  AddRandomMatrix(w, pool, p + "ffn_up_exps.weight", n_embd, n_ff, o.type, o.seed, 1, 0, n);
  AddRandomMatrix(w, pool, p + "ffn_down_exps.weight", n_ff, n_embd, o.type, o.seed, 1, 0, n);
  if (shape.n_ff_shexp > 0) {
    // The shared expert, and its gate (F32, a vector as the converter writes it), wide enough
    // (std 0.25: logits of about 4) that its sigmoid ranges from near 0 to near 1.
    const int64_t n_sh = shape.n_ff_shexp;
    AddRandomMatrix(w, pool, p + "ffn_gate_shexp.weight", n_embd, n_sh, o.type, o.seed);
    AddRandomMatrix(w, pool, p + "ffn_up_shexp.weight", n_embd, n_sh, o.type, o.seed);
    AddRandomMatrix(w, pool, p + "ffn_down_shexp.weight", n_sh, n_embd, o.type, o.seed);
    const std::string gate = p + "ffn_gate_inp_shexp.weight";
    AddF32Vector(w, gate, RandomVector(gate, n_embd, 0.25f, 0.0f, o.seed));
  }
  if (!shape.oai_layout) return;
  // gpt-oss's biases: the router's, and each expert's (2-D, one row per expert). The gate and up
  // biases are wide enough (std 4) that the activation's clamp at 7 bites on some elements.
  const std::tuple<const char*, int64_t, int64_t, float> biases[] = {
      {"ffn_gate_inp.bias", n, 0, 0.5f},
      {"ffn_gate_exps.bias", n_ff, n, 4.0f},
      {"ffn_up_exps.bias", n_ff, n, 4.0f},
      {"ffn_down_exps.bias", n_embd, n, 0.5f}};
  for (const auto& [name, cols, rows, std] : biases) {
    std::vector<float> v =
        RandomVector(p + name, cols * std::max<int64_t>(rows, 1), std, 0, o.seed);
    if (rows == 0) {
      AddF32Vector(w, p + name, std::move(v));
    } else {
      w->AddTensor(p + name, {cols, rows}, GgmlType::kF32,
                   [v = std::move(v)](uint8_t* dst, size_t nbytes) {
                     PC_CHECK(nbytes == v.size() * sizeof(float));
                     std::memcpy(dst, v.data(), nbytes);
                   });
    }
  }
}

// One layer's tensors, in the converter's names for the shape's architecture. attn_sharpen
// scales Q and K where the scale survives to the scores: after the per-head norms if there are
// any, else the projections and their biases.
void AddLayer(const SynthShape& shape, int l, const SynthOptions& o, ThreadPool* pool,
              GgufWriter* w) {
  const GgmlType t = o.type;
  const uint64_t seed = o.seed;
  const float qk_scale = shape.qk_norm ? 1.0f : o.attn_sharpen;
  const std::string p = "blk." + std::to_string(l) + ".";
  const int64_t n_embd = shape.n_embd, n_ff = shape.n_ff, head_dim = shape.HeadDim();
  const int64_t n_embd_q = head_dim * shape.n_head;
  const int64_t n_embd_kv = head_dim * shape.n_head_kv;
  const std::vector<float> ones_embd(static_cast<size_t>(n_embd), 1.0f);
  AddF32Vector(w, p + "attn_norm.weight", ones_embd);
  if (shape.fused) {
    AddRandomMatrix(w, pool, p + "attn_qkv.weight", n_embd, n_embd_q + 2 * n_embd_kv, t, seed,
                    qk_scale, n_embd_q + n_embd_kv);
  } else {
    AddRandomMatrix(w, pool, p + "attn_q.weight", n_embd, n_embd_q, t, seed, qk_scale, n_embd_q);
    AddRandomMatrix(w, pool, p + "attn_k.weight", n_embd, n_embd_kv, t, seed, qk_scale, n_embd_kv);
    AddRandomMatrix(w, pool, p + "attn_v.weight", n_embd, n_embd_kv, t, seed);
  }
  AddRandomMatrix(w, pool, p + "attn_output.weight", n_embd_q, n_embd, t, seed);
  if (shape.qkv_bias) {
    // Larger than the weights' products, so that a missing bias shows in the logits.
    const std::tuple<const char*, int64_t, float> biases[] = {{"attn_q.bias", n_embd_q, qk_scale},
                                                              {"attn_k.bias", n_embd_kv, qk_scale},
                                                              {"attn_v.bias", n_embd_kv, 1.0f}};
    for (const auto& [name, n, scale] : biases) {
      AddF32Vector(w, p + name, ScaledVector(p + name, n, 0.5f, 0.0f, seed, scale));
    }
  }
  if (shape.qk_norm) {
    for (const char* name : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
      AddF32Vector(w, p + name, ScaledVector(p + name, head_dim, 0.2f, 1.0f, seed, o.attn_sharpen));
    }
  }
  // Post-norms away from 1, so that a missing one shows.
  if (shape.post_norms) {
    const std::string name = p + "post_attention_norm.weight";
    AddF32Vector(w, name, RandomVector(name, n_embd, 0.3f, 1.0f, seed));
  }
  if (shape.oai_layout) {
    // The attention output's bias; per head a sink logit of the scores' size; and the FFN's
    // input norm under gpt-oss's name for it (away from 1 too).
    AddF32Vector(w, p + "attn_output.bias",
                 RandomVector(p + "attn_output.bias", n_embd, 0.5f, 0, seed));
    AddF32Vector(w, p + "attn_sinks.weight",
                 RandomVector(p + "attn_sinks.weight", shape.n_head, 1.0f, 0.0f, seed));
    const std::string name = p + "post_attention_norm.weight";
    AddF32Vector(w, name, RandomVector(name, n_embd, 0.3f, 1.0f, seed));
  } else {
    AddF32Vector(w, p + "ffn_norm.weight", ones_embd);
  }
  if (shape.n_expert > 0) {
    AddExperts(shape, p, o, pool, w);
  } else if (shape.fused) {
    AddRandomMatrix(w, pool, p + "ffn_up.weight", n_embd, 2 * n_ff, t, seed);
  } else {
    AddRandomMatrix(w, pool, p + "ffn_gate.weight", n_embd, n_ff, t, seed);
    AddRandomMatrix(w, pool, p + "ffn_up.weight", n_embd, n_ff, t, seed);
  }
  if (shape.n_expert == 0) AddRandomMatrix(w, pool, p + "ffn_down.weight", n_ff, n_embd, t, seed);
  if (shape.post_norms) {
    const std::string name = p + "post_ffw_norm.weight";
    AddF32Vector(w, name, RandomVector(name, n_embd, 0.3f, 1.0f, seed));
  }
}

}  // namespace

std::vector<std::string> SynthPresets() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

Result<SynthShape> SynthPresetShape(const std::string& preset) {
  for (const Preset& p : kPresets) {
    if (p.name == preset) return ShapeOf(p);
  }
  std::string known;
  for (const Preset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  return NotFound("unknown synth preset '" + preset + "' (known: " + known + ")");
}

bool SynthSupports(GgmlType type) { return QuantizeSupports(type); }

std::vector<GgmlType> SynthTypes() {
  std::vector<GgmlType> types;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = static_cast<GgmlType>(id);
    if (SynthSupports(t)) types.push_back(t);
  }
  return types;
}

std::string SynthTypeNames() {
  std::string names;
  for (GgmlType t : SynthTypes()) names += (names.empty() ? "" : ", ") + GgmlTypeName(t);
  return names;
}

std::vector<float> Llama3RopeFactors(const SynthShape& s) {
  const int head_dim = s.HeadDim();
  const double low_wavelen = s.rope_original_ctx / s.rope_low_freq_factor;
  const double high_wavelen = s.rope_original_ctx / s.rope_high_freq_factor;
  std::vector<float> factors(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(static_cast<double>(s.rope_base), -2.0 * i / head_dim);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = s.rope_scale_factor;
    } else {
      const double smooth = (s.rope_original_ctx / wavelen - s.rope_low_freq_factor) /
                            (s.rope_high_freq_factor - s.rope_low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.rope_scale_factor + smooth);
    }
    factors[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return factors;
}

std::vector<float> LongRopeFactors(const SynthShape& s, bool long_factors) {
  const int half = s.HeadDim() / 2;
  const double ratio = double(s.n_ctx) / s.rope_original_ctx;
  std::vector<float> factors(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // Rising from 1 at the highest frequency; the short ones stay within 10% of it.
    const double x = double(i) / std::max(half - 1, 1);
    factors[i] = static_cast<float>(long_factors ? 1.0 + (ratio - 1.0) * x * x : 1.0 + 0.1 * x);
  }
  return factors;
}

Status Synthesize(const SynthOptions& options,
                  const std::function<void(size_t done, size_t total)>& progress) {
  PC_ASSIGN_OR_RETURN(SynthShape shape, SynthPresetShape(options.preset));
  if (options.layers < 0 || options.layers > shape.n_layer) {
    return InvalidArgument("synth: --layers must be from 1 to " + std::to_string(shape.n_layer) +
                           " for " + shape.name);
  }
  if (options.layers > 0) shape.n_layer = options.layers;
  if (!SynthSupports(options.type)) {
    return Unimplemented("synth: tensor type " + GgmlTypeName(options.type) +
                         " is not supported (" + SynthTypeNames() + " are)");
  }
  if (options.out_path.empty()) return InvalidArgument("synth: no output path");
  if (!(options.attn_sharpen > 0.0f && options.attn_sharpen <= 100.0f)) {
    return InvalidArgument("synth: the attention sharpening factor must be in (0, 100]");
  }
  std::vector<std::pair<std::string, GgufValue>> vocab_keys;
  int64_t n_vocab = 0;
  PC_RETURN_IF_ERROR(ReadVocab(options.vocab_path, &vocab_keys, &n_vocab));

  GgufWriter w;
  SetHyperparameters(shape, options, n_vocab, &w);
  for (auto& [key, value] : vocab_keys) w.SetValue(key, std::move(value));
  vocab_keys.clear();

  ThreadPool pool(ThreadPool::DefaultThreads());
  const GgmlType t = options.type;
  const uint64_t seed = options.seed;
  const int64_t n_embd = shape.n_embd;
  const std::vector<float> ones_embd(static_cast<size_t>(n_embd), 1.0f);
  AddRandomMatrix(&w, &pool, "token_embd.weight", n_embd, n_vocab, t, seed);
  if (shape.rope_scale_factor > 0) AddF32Vector(&w, "rope_freqs.weight", Llama3RopeFactors(shape));
  if (shape.longrope) {
    AddF32Vector(&w, "rope_factors_short.weight", LongRopeFactors(shape, false));
    AddF32Vector(&w, "rope_factors_long.weight", LongRopeFactors(shape, true));
  }
  for (int l = 0; l < shape.n_layer; ++l) AddLayer(shape, l, options, &pool, &w);
  AddF32Vector(&w, "output_norm.weight", ones_embd);
  if (!shape.tied_embeddings) AddRandomMatrix(&w, &pool, "output.weight", n_embd, n_vocab, t, seed);
  return w.Write(options.out_path, progress);
}

}  // namespace promptcache
