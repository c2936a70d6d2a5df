// Synthetic model generation (see synth.h). Weights come from a counter-based generator seeded
// by (seed, tensor name, row), so the bytes depend only on the options, never on the number of
// threads, and rows can be produced in parallel straight into the writer's buffer.
#include "model/synth.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <numbers>

#include "core/hash.h"
#include "core/thread_pool.h"
#include "model/quant_mix.h"
#include "ops/quant.h"

namespace promptcache {

namespace {

constexpr float kWeightStd = 0.02f;
constexpr float kRmsEps = 1e-5f;

const SynthShape kPresets[] = {
    // name, display name, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, rope base, tied,
    // Llama-3 rope scaling (factor, low, high, original context).
    {"smollm2-135m", "SmolLM2-135M", 576, 30, 9, 3, 1536, 8192, 100000.0f, true},
    {"smollm2-360m", "SmolLM2-360M", 960, 32, 15, 5, 2560, 8192, 100000.0f, true},
    {"tinyllama-1.1b", "TinyLlama-1.1B", 2048, 22, 32, 4, 5632, 2048, 10000.0f, false},
    {"llama3.2-1b", "Llama-3.2-1B", 2048, 16, 32, 8, 8192, 131072, 500000.0f, true, 32.0f, 1.0f,
     4.0f, 8192},
    {"tiny-test", "tiny-test", 64, 2, 4, 2, 128, 256, 10000.0f, false},
    // The shape of the llama.cpp conformance fixtures (shared/models/conformance): rows that
    // 256-element blocks divide, so K-quant files need no fallback types.
    {"tiny-256", "tiny-256", 256, 4, 4, 2, 768, 8192, 10000.0f, true},
    // tiny-256 with Llama-3's RoPE (base 500000, frequency factors for a 131072-token context
    // from 8192): the end-to-end reference fixture of src/model/testdata/llama3-tied.
    {"tiny-256-llama3", "tiny-256-llama3", 256, 4, 4, 2, 768, 131072, 500000.0f, true, 32.0f, 1.0f,
     4.0f, 8192},
};

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
// where the type's block does not divide `cols` (as llama.cpp's quantizer does).
void AddRandomMatrix(GgufWriter* w, ThreadPool* pool, const std::string& name, int64_t cols,
                     int64_t rows, GgmlType file_type, uint64_t seed) {
  const GgmlType type = FallbackForWidth(file_type, cols);
  const uint64_t tensor_seed = Mix64(seed ^ Hash64(name.data(), name.size()));
  w->AddTensor(name, {cols, rows}, type, [=](uint8_t* dst, size_t nbytes) {
    const size_t row_bytes = RowBytes(type, cols);
    PC_CHECK(row_bytes * static_cast<size_t>(rows) == nbytes);
    pool->ParallelFor(rows, [&](int64_t begin, int64_t end) {
      std::unique_ptr<float[]> buf(new float[static_cast<size_t>(cols)]);
      for (int64_t r = begin; r < end; ++r) {
        RandomRow(Mix64(tensor_seed + static_cast<uint64_t>(r)), kWeightStd, buf.get(), cols);
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

void SetHyperparameters(const SynthShape& s, GgmlType type, uint64_t seed, int64_t n_vocab,
                        GgufWriter* w) {
  const int head_dim = s.n_embd / s.n_head;
  w->SetString("general.architecture", "llama");
  w->SetString("general.name", "synthetic " + s.display_name + " (random weights, seed " +
                                   std::to_string(seed) + ")");
  w->SetU32("general.file_type", FileTypeIdFor(type));
  w->SetU32("general.quantization_version", 2);
  w->SetU32("llama.vocab_size", static_cast<uint32_t>(n_vocab));
  w->SetU32("llama.context_length", static_cast<uint32_t>(s.n_ctx));
  w->SetU32("llama.embedding_length", static_cast<uint32_t>(s.n_embd));
  w->SetU32("llama.block_count", static_cast<uint32_t>(s.n_layer));
  w->SetU32("llama.feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w->SetU32("llama.attention.head_count", static_cast<uint32_t>(s.n_head));
  w->SetU32("llama.attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w->SetU32("llama.attention.key_length", static_cast<uint32_t>(head_dim));
  w->SetU32("llama.attention.value_length", static_cast<uint32_t>(head_dim));
  w->SetF32("llama.attention.layer_norm_rms_epsilon", kRmsEps);
  w->SetF32("llama.rope.freq_base", s.rope_base);
  w->SetU32("llama.rope.dimension_count", static_cast<uint32_t>(head_dim));
}

}  // namespace

std::vector<std::string> SynthPresets() {
  std::vector<std::string> names;
  for (const SynthShape& s : kPresets) names.push_back(s.name);
  return names;
}

Result<SynthShape> SynthPresetShape(const std::string& preset) {
  for (const SynthShape& s : kPresets) {
    if (s.name == preset) return s;
  }
  std::string known;
  for (const SynthShape& s : kPresets) known += (known.empty() ? "" : ", ") + s.name;
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
  const int head_dim = s.n_embd / s.n_head;
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

Status Synthesize(const SynthOptions& options,
                  const std::function<void(size_t done, size_t total)>& progress) {
  PC_ASSIGN_OR_RETURN(const SynthShape shape, SynthPresetShape(options.preset));
  if (!SynthSupports(options.type)) {
    return Unimplemented("synth: tensor type " + GgmlTypeName(options.type) +
                         " is not supported (" + SynthTypeNames() + " are)");
  }
  if (options.out_path.empty()) return InvalidArgument("synth: no output path");
  std::vector<std::pair<std::string, GgufValue>> vocab_keys;
  int64_t n_vocab = 0;
  PC_RETURN_IF_ERROR(ReadVocab(options.vocab_path, &vocab_keys, &n_vocab));

  GgufWriter w;
  SetHyperparameters(shape, options.type, options.seed, n_vocab, &w);
  for (auto& [key, value] : vocab_keys) w.SetValue(key, std::move(value));
  vocab_keys.clear();

  ThreadPool pool(ThreadPool::DefaultThreads());
  const GgmlType t = options.type;
  const uint64_t seed = options.seed;
  const int64_t n_embd = shape.n_embd;
  const int64_t head_dim = shape.n_embd / shape.n_head;
  const int64_t n_embd_kv = head_dim * shape.n_head_kv;
  const std::vector<float> ones_embd(static_cast<size_t>(n_embd), 1.0f);
  AddRandomMatrix(&w, &pool, "token_embd.weight", n_embd, n_vocab, t, seed);
  if (shape.rope_scale_factor > 0) AddF32Vector(&w, "rope_freqs.weight", Llama3RopeFactors(shape));
  for (int l = 0; l < shape.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    AddF32Vector(&w, p + "attn_norm.weight", ones_embd);
    AddRandomMatrix(&w, &pool, p + "attn_q.weight", n_embd, n_embd, t, seed);
    AddRandomMatrix(&w, &pool, p + "attn_k.weight", n_embd, n_embd_kv, t, seed);
    AddRandomMatrix(&w, &pool, p + "attn_v.weight", n_embd, n_embd_kv, t, seed);
    AddRandomMatrix(&w, &pool, p + "attn_output.weight", n_embd, n_embd, t, seed);
    AddF32Vector(&w, p + "ffn_norm.weight", ones_embd);
    AddRandomMatrix(&w, &pool, p + "ffn_gate.weight", n_embd, shape.n_ff, t, seed);
    AddRandomMatrix(&w, &pool, p + "ffn_down.weight", shape.n_ff, n_embd, t, seed);
    AddRandomMatrix(&w, &pool, p + "ffn_up.weight", n_embd, shape.n_ff, t, seed);
  }
  AddF32Vector(&w, "output_norm.weight", ones_embd);
  if (!shape.tied_embeddings) AddRandomMatrix(&w, &pool, "output.weight", n_embd, n_vocab, t, seed);
  return w.Write(options.out_path, progress);
}

}  // namespace promptcache
