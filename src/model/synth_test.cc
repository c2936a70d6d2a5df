#include "model/synth.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "ops/quant.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

const std::string kSpmVocab = std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-llama-spm.gguf";
const std::string kGpt2Vocab = std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf";

class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "synth_test_XXXXXX").string();
    PC_CHECK(::mkdtemp(t.data()) != nullptr);
    path_ = t;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

bool SameValue(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || !(a.scalar == b.scalar)) return false;
  if (!a.is_array()) return true;
  if (a.array_type != b.array_type || a.array.size() != b.array.size()) return false;
  for (size_t i = 0; i < a.array.size(); ++i) {
    if (!SameValue(a.array[i], b.array[i])) return false;
  }
  return true;
}

SynthOptions TinyOptions(const std::string& out, GgmlType type = GgmlType::kQ8_0) {
  SynthOptions o;
  o.preset = "tiny-test";
  o.vocab_path = kSpmVocab;
  o.type = type;
  o.seed = 7;
  o.out_path = out;
  return o;
}

TEST(Synth, Presets) {
  const std::vector<std::string> p = SynthPresets();
  for (const char* name :
       {"smollm2-135m", "smollm2-360m", "tinyllama-1.1b", "llama3.2-1b", "tiny-test", "tiny-256"}) {
    EXPECT_NE(std::find(p.begin(), p.end(), name), p.end()) << name;
  }
  auto s = SynthPresetShape("smollm2-135m");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->n_embd, 576);
  EXPECT_EQ(s->n_layer, 30);
  EXPECT_EQ(s->n_head_kv, 3);
  EXPECT_TRUE(s->tied_embeddings);
  s = SynthPresetShape("tinyllama-1.1b");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->n_ff, 5632);
  EXPECT_FALSE(s->tied_embeddings);
  s = SynthPresetShape("llama3.2-1b");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->n_ctx, 131072);
  EXPECT_EQ(s->rope_base, 500000.0f);
  EXPECT_EQ(s->rope_scale_factor, 32.0f);
  EXPECT_EQ(SynthPresetShape("gpt-5").status().code(), StatusCode::kNotFound);
}

// The optional tensors each preset gets follow from its architecture, as the real models have
// them: Qwen2's Q/K/V biases, Qwen3's and Gemma 3's per-head Q/K norms, Gemma's post-norms,
// Phi-3's fused tensors and LongRoPE; llama and Mistral files have none.
TEST(Synth, PresetLayoutsFollowTheArchitecture) {
  struct Want {
    const char* preset;
    bool qkv_bias, qk_norm, post_norms, fused;
  };
  for (const Want& w :
       {Want{"qwen2.5-0.5b", true, false, false, false},
        Want{"tiny-qwen3", false, true, false, false}, Want{"gemma2-2b", false, false, true, false},
        Want{"tiny-gemma3", false, true, true, false},
        Want{"phi3.5-mini", false, false, false, true},
        Want{"mistral-7b", false, false, false, false}}) {
    const Result<SynthShape> s = SynthPresetShape(w.preset);
    ASSERT_TRUE(s.ok()) << w.preset;
    EXPECT_EQ(s->qkv_bias, w.qkv_bias) << w.preset;
    EXPECT_EQ(s->qk_norm, w.qk_norm) << w.preset;
    EXPECT_EQ(s->post_norms, w.post_norms) << w.preset;
    EXPECT_EQ(s->fused, w.fused) << w.preset;
    EXPECT_EQ(s->longrope, w.fused) << w.preset;  // only Phi-3 has either
  }
}

// Mixtures of experts: Qwen3-30B-A3B's shape, and a tiny qwen3moe file in Q4_K cut to its first
// 2 layers: the router F32 (as llama.cpp's quantizer leaves it), each expert tensor 3-D in the
// file's type, no dense FFN tensors, the expert keys written. (Mutation tried: the expert
// tensors written 2-D, [n_embd, n_ff_exp * n_expert]: fails here.)
TEST(Synth, MixtureOfExpertsLayout) {
  const SynthShape big = *SynthPresetShape("qwen3-30b-a3b");
  EXPECT_EQ(big.architecture, "qwen3moe");
  EXPECT_EQ(big.n_layer, 48);
  EXPECT_EQ(big.n_embd, 2048);
  EXPECT_EQ(big.n_head, 32);
  EXPECT_EQ(big.n_head_kv, 4);
  EXPECT_EQ(big.HeadDim(), 128);
  EXPECT_EQ(big.n_expert, 128);
  EXPECT_EQ(big.n_expert_used, 8);
  EXPECT_EQ(big.n_ff_exp, 768);
  EXPECT_TRUE(big.qk_norm);
  EXPECT_EQ(SynthPresetShape("tiny-mixtral")->n_ff_exp, 512);  // llama: feed_forward_length

  TempDir dir;
  SynthOptions o = TinyOptions(dir.File("moe.gguf"), GgmlType::kQ4_K);
  o.preset = "tiny-qwen3moe";
  o.layers = 2;
  ASSERT_TRUE(Synthesize(o).ok());
  std::unique_ptr<GgufFile> f = GgufFile::Open(o.out_path).value();
  EXPECT_EQ(*f->GetInt("qwen3moe.block_count"), 2);
  EXPECT_EQ(*f->GetInt("qwen3moe.expert_count"), 8);
  EXPECT_EQ(*f->GetInt("qwen3moe.expert_used_count"), 2);
  EXPECT_EQ(*f->GetInt("qwen3moe.expert_feed_forward_length"), 256);
  EXPECT_EQ(*f->GetInt("qwen3moe.feed_forward_length"), 768);
  EXPECT_NE(f->GetString("general.name")->find("first 2 layers"), std::string::npos);
  EXPECT_EQ(f->FindTensor("blk.2.attn_q.weight"), nullptr);
  EXPECT_EQ(f->FindTensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(f->FindTensor("blk.0.ffn_down.weight"), nullptr);
  const GgufTensorInfo* router = f->FindTensor("blk.1.ffn_gate_inp.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->type, GgmlType::kF32);
  EXPECT_EQ(router->dims, (std::vector<int64_t>{256, 8}));
  for (const char* name : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
    const GgufTensorInfo* t = f->FindTensor(std::string("blk.1.") + name + ".weight");
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, GgmlType::kQ4_K) << name;
    EXPECT_EQ(t->dims, (std::vector<int64_t>{256, 256, 8})) << name;  // n_embd = n_ff_exp here
  }
  o.layers = 5;
  const Status st = Synthesize(o);
  EXPECT_NE(st.message().find("--layers must be from 1 to 4"), std::string::npos) << st.message();
}

// Qwen2-MoE: Qwen1.5-MoE-A2.7B's shape, and tiny-qwen2moe's shared expert in the file: its
// three matrices in the file's type, its gate an F32 vector, its width as
// expert_shared_feed_forward_length; Q/K/V biases as qwen2's.
TEST(Synth, SharedExpertLayout) {
  const SynthShape big = *SynthPresetShape("qwen1.5-moe-a2.7b");
  EXPECT_EQ(big.architecture, "qwen2moe");
  EXPECT_EQ(big.n_layer, 24);
  EXPECT_EQ(big.n_embd, 2048);
  EXPECT_EQ(big.n_head, 16);
  EXPECT_EQ(big.n_head_kv, 16);
  EXPECT_EQ(big.n_expert, 60);
  EXPECT_EQ(big.n_expert_used, 4);
  EXPECT_EQ(big.n_ff_exp, 1408);
  EXPECT_EQ(big.n_ff_shexp, 5632);
  EXPECT_TRUE(big.qkv_bias);
  EXPECT_FALSE(big.qk_norm);

  TempDir dir;
  SynthOptions o = TinyOptions(dir.File("shexp.gguf"), GgmlType::kQ8_0);
  o.preset = "tiny-qwen2moe";
  ASSERT_TRUE(Synthesize(o).ok());
  std::unique_ptr<GgufFile> f = GgufFile::Open(o.out_path).value();
  EXPECT_EQ(*f->GetInt("qwen2moe.expert_feed_forward_length"), 256);
  EXPECT_EQ(*f->GetInt("qwen2moe.expert_shared_feed_forward_length"), 512);
  for (int l = 0; l < 4; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const auto& [name, dims] : {std::pair{"ffn_gate_shexp", std::vector<int64_t>{256, 512}},
                                     {"ffn_up_shexp", std::vector<int64_t>{256, 512}},
                                     {"ffn_down_shexp", std::vector<int64_t>{512, 256}}}) {
      const GgufTensorInfo* t = f->FindTensor(p + name + ".weight");
      ASSERT_NE(t, nullptr) << p << name;
      EXPECT_EQ(t->type, GgmlType::kQ8_0) << p << name;
      EXPECT_EQ(t->dims, dims) << p << name;
    }
    const GgufTensorInfo* gate = f->FindTensor(p + "ffn_gate_inp_shexp.weight");
    ASSERT_NE(gate, nullptr) << p;
    EXPECT_EQ(gate->type, GgmlType::kF32);
    EXPECT_EQ(gate->dims, (std::vector<int64_t>{256}));
    EXPECT_NE(f->FindTensor(p + "attn_q.bias"), nullptr) << p;
  }
}

TEST(Synth, Llama3RopeFactors) {
  const SynthShape s = *SynthPresetShape("llama3.2-1b");
  const std::vector<float> f = Llama3RopeFactors(s);
  ASSERT_EQ(f.size(), 32u);  // head_dim 64
  // Pair 0 rotates once per 2*pi positions (short wavelength): unscaled. The slowest pairs have
  // wavelengths far beyond the original 8192 context: scaled by the full factor.
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[31], 32.0f);
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
  // Some pairs fall in the smooth band between the two wavelength thresholds.
  int blended = 0;
  for (float x : f) blended += x > 1.0f && x < 32.0f;
  EXPECT_GT(blended, 0);
}

TEST(Synth, TinyModelHasLlamaLayout) {
  TempDir dir;
  const std::string out = dir.File("tiny.gguf");
  size_t last_done = 0, last_total = 1;
  Status st = Synthesize(TinyOptions(out), [&](size_t d, size_t t) {
    last_done = d;
    last_total = t;
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(last_done, last_total);

  auto r = GgufFile::Open(out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& f = **r;
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("general.file_type"), 7);
  EXPECT_EQ(*f.GetInt("llama.vocab_size"), 32000);
  EXPECT_EQ(*f.GetInt("llama.context_length"), 256);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*f.GetInt("llama.block_count"), 2);
  EXPECT_EQ(*f.GetInt("llama.feed_forward_length"), 128);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count"), 4);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), 2);
  EXPECT_EQ(*f.GetInt("llama.rope.dimension_count"), 16);
  EXPECT_FLOAT_EQ(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(*f.GetFloat("llama.rope.freq_base"), 10000.0);

  struct Expect {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
  };
  std::vector<Expect> want = {{"token_embd.weight", {64, 32000}, GgmlType::kQ8_0}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    want.push_back({p + "attn_norm.weight", {64}, GgmlType::kF32});
    want.push_back({p + "attn_q.weight", {64, 64}, GgmlType::kQ8_0});
    want.push_back({p + "attn_k.weight", {64, 32}, GgmlType::kQ8_0});
    want.push_back({p + "attn_v.weight", {64, 32}, GgmlType::kQ8_0});
    want.push_back({p + "attn_output.weight", {64, 64}, GgmlType::kQ8_0});
    want.push_back({p + "ffn_norm.weight", {64}, GgmlType::kF32});
    want.push_back({p + "ffn_gate.weight", {64, 128}, GgmlType::kQ8_0});
    want.push_back({p + "ffn_down.weight", {128, 64}, GgmlType::kQ8_0});
    want.push_back({p + "ffn_up.weight", {64, 128}, GgmlType::kQ8_0});
  }
  want.push_back({"output_norm.weight", {64}, GgmlType::kF32});
  want.push_back({"output.weight", {64, 32000}, GgmlType::kQ8_0});  // tiny-test is untied
  ASSERT_EQ(f.tensors().size(), want.size());
  for (const Expect& e : want) {
    const GgufTensorInfo* t = f.FindTensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->dims, e.dims) << e.name;
    EXPECT_EQ(t->type, e.type) << e.name;
  }
  EXPECT_EQ(f.FindTensor("rope_freqs.weight"), nullptr);

  // Norms are ones.
  const GgufTensorInfo* norm = f.FindTensor("blk.1.ffn_norm.weight");
  std::vector<float> v(64);
  std::memcpy(v.data(), norm->data, 64 * sizeof(float));
  for (float x : v) EXPECT_EQ(x, 1.0f);

  // Every tokenizer key of the vocabulary, in order and verbatim; nothing else under tokenizer.
  auto vocab = GgufFile::Open(kSpmVocab);
  ASSERT_TRUE(vocab.ok());
  std::vector<std::string> vocab_keys, out_keys;
  for (const auto& [k, val] : (*vocab)->metadata()) {
    if (k.rfind("tokenizer.", 0) != 0) continue;
    vocab_keys.push_back(k);
    const GgufValue* got = f.Find(k);
    ASSERT_NE(got, nullptr) << k;
    EXPECT_TRUE(SameValue(*got, val)) << k;
  }
  for (const auto& [k, val] : f.metadata()) {
    if (k.rfind("tokenizer.", 0) == 0) out_keys.push_back(k);
  }
  EXPECT_EQ(out_keys, vocab_keys);
  EXPECT_GE(vocab_keys.size(), 3u);
}

TEST(Synth, WeightsLookRandomWithSmallStd) {
  TempDir dir;
  const std::string out = dir.File("f32.gguf");
  ASSERT_TRUE(Synthesize(TinyOptions(out, GgmlType::kF32)).ok());
  auto r = GgufFile::Open(out);
  ASSERT_TRUE(r.ok());
  const GgufTensorInfo* t = (*r)->FindTensor("blk.0.ffn_gate.weight");
  ASSERT_EQ(t->type, GgmlType::kF32);
  std::vector<float> w(static_cast<size_t>(t->elements()));
  std::memcpy(w.data(), t->data, t->nbytes);
  double sum = 0, sq = 0;
  for (float x : w) {
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double mean = sum / w.size();
  const double std = std::sqrt(sq / w.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(std, 0.02, 0.002);
  // Two rows of the same tensor and the same row of two tensors differ.
  EXPECT_NE(w[0], w[64]);
  const GgufTensorInfo* up = (*r)->FindTensor("blk.0.ffn_up.weight");
  float up0;
  std::memcpy(&up0, up->data, 4);
  EXPECT_NE(w[0], up0);

  // A quantized file holds the same values, up to the quantization error.
  const std::string q = dir.File("q8.gguf");
  ASSERT_TRUE(Synthesize(TinyOptions(q, GgmlType::kQ8_0)).ok());
  auto rq = GgufFile::Open(q);
  ASSERT_TRUE(rq.ok());
  const GgufTensorInfo* tq = (*rq)->FindTensor("blk.0.ffn_gate.weight");
  std::vector<float> deq(64);
  DequantizeRow(GgmlType::kQ8_0, tq->data, 64, deq.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(deq[i], w[i], 0.001f) << i;
}

// Every type with a quantizer: the general.file_type id llama.cpp uses, and the values of the
// F32 file up to the format's error. tiny-256's rows take every type; tiny-test's 64- and
// 128-wide rows fall back to 32-element types for the 256-element ones, as llama.cpp does.
TEST(Synth, EveryQuantizedType) {
  TempDir dir;
  const std::string f32_path = dir.File("f32.gguf");
  SynthOptions o = TinyOptions(f32_path, GgmlType::kF32);
  o.preset = "tiny-256";
  o.vocab_path = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";  // 512 tokens: quick
  ASSERT_TRUE(Synthesize(o).ok());
  auto f32 = GgufFile::Open(f32_path);
  ASSERT_TRUE(f32.ok());
  const GgufTensorInfo* ref = (*f32)->FindTensor("blk.1.ffn_down.weight");
  std::vector<float> want(768), got(768);
  std::memcpy(want.data(), ref->data, 768 * sizeof(float));
  const std::map<GgmlType, uint32_t> ids = {
      {GgmlType::kQ4_1, 3},    {GgmlType::kQ5_0, 8},   {GgmlType::kQ5_1, 9},  {GgmlType::kQ2_K, 10},
      {GgmlType::kQ3_K, 12},   {GgmlType::kQ4_K, 15},  {GgmlType::kQ5_K, 17}, {GgmlType::kQ6_K, 18},
      {GgmlType::kIQ4_NL, 25}, {GgmlType::kIQ4_XS, 30}};
  for (const auto& [type, id] : ids) {
    ASSERT_TRUE(SynthSupports(type)) << GgmlTypeName(type);
    o.type = type;
    o.out_path = dir.File("q.gguf");
    ASSERT_TRUE(Synthesize(o).ok()) << GgmlTypeName(type);
    auto q = GgufFile::Open(o.out_path);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(*(*q)->GetInt("general.file_type"), id) << GgmlTypeName(type);
    const GgufTensorInfo* t = (*q)->FindTensor("blk.1.ffn_down.weight");
    ASSERT_EQ(t->type, type);
    DequantizeRow(type, t->data, 768, got.data());
    double err = 0, sum = 0;
    for (int i = 0; i < 768; ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      sum += want[i] * want[i];
    }
    EXPECT_LT(std::sqrt(err / sum), 0.35) << GgmlTypeName(type);  // Q2_K's is ~0.27
  }

  o.preset = "tiny-test";
  const std::map<GgmlType, GgmlType> fallback = {{GgmlType::kQ2_K, GgmlType::kIQ4_NL},
                                                 {GgmlType::kQ4_K, GgmlType::kQ5_0},
                                                 {GgmlType::kQ5_K, GgmlType::kQ5_1},
                                                 {GgmlType::kQ6_K, GgmlType::kQ8_0},
                                                 {GgmlType::kQ4_1, GgmlType::kQ4_1}};
  for (const auto& [type, used] : fallback) {
    o.type = type;
    ASSERT_TRUE(Synthesize(o).ok()) << GgmlTypeName(type);
    auto q = GgufFile::Open(o.out_path);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ((*q)->FindTensor("blk.0.ffn_down.weight")->type, used) << GgmlTypeName(type);
    EXPECT_EQ((*q)->FindTensor("output.weight")->type, used) << GgmlTypeName(type);
    EXPECT_EQ((*q)->FindTensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);
  }
}

// attn_sharpen multiplies Q and K where the factor reaches the scores and nothing else: the
// projections (and qwen2's biases), the Q and K rows of Phi-3's fused QKV, or, with per-head
// Q/K norms, the norm weights; an attention soft-cap grows with the scores (by the square).
TEST(Synth, SharpenScalesQueriesAndKeysOnly) {
  TempDir dir;
  const auto tensor = [](const GgufFile& f, const std::string& name) {
    const GgufTensorInfo* t = f.FindTensor(name);
    PC_CHECK(t != nullptr && t->type == GgmlType::kF32);
    std::vector<float> v(static_cast<size_t>(t->elements()));
    std::memcpy(v.data(), t->data, t->nbytes);
    return v;
  };
  // The largest |b - k a| relative to max |a|: 0 when b is a scaled by k.
  const auto off = [](const std::vector<float>& a, const std::vector<float>& b, float k) {
    double worst = 0, amax = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::fabs(double{b[i]} - double{k} * a[i]));
      amax = std::max(amax, std::fabs(double{a[i]}));
    }
    return worst / amax;
  };
  for (const char* preset : {"tiny-qwen2", "tiny-qwen3", "tiny-phi3"}) {
    SynthOptions o;
    o.preset = preset;
    o.vocab_path = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";
    o.type = GgmlType::kF32;
    o.out_path = dir.File("plain.gguf");
    ASSERT_TRUE(Synthesize(o).ok());
    o.attn_sharpen = 3.0f;
    o.out_path = dir.File("sharp.gguf");
    ASSERT_TRUE(Synthesize(o).ok());
    auto plain = GgufFile::Open(dir.File("plain.gguf"));
    auto sharp = GgufFile::Open(dir.File("sharp.gguf"));
    ASSERT_TRUE(plain.ok() && sharp.ok());
    const GgufFile &a = **plain, &b = **sharp;
    const SynthShape shape = *SynthPresetShape(preset);
    const std::string p = "blk.1.";
    SCOPED_TRACE(preset);
    if (shape.fused) {
      const std::vector<float> qkv_a = tensor(a, p + "attn_qkv.weight");
      const std::vector<float> qkv_b = tensor(b, p + "attn_qkv.weight");
      const size_t qk = size_t(shape.n_embd) * shape.HeadDim() * (shape.n_head + shape.n_head_kv);
      EXPECT_LT(off({qkv_a.begin(), qkv_a.begin() + qk}, {qkv_b.begin(), qkv_b.begin() + qk}, 3),
                1e-6);
      EXPECT_EQ(off({qkv_a.begin() + qk, qkv_a.end()}, {qkv_b.begin() + qk, qkv_b.end()}, 1), 0);
    } else {
      const float k = shape.qk_norm ? 1.0f : 3.0f;
      EXPECT_LT(off(tensor(a, p + "attn_q.weight"), tensor(b, p + "attn_q.weight"), k), 1e-6);
      EXPECT_LT(off(tensor(a, p + "attn_k.weight"), tensor(b, p + "attn_k.weight"), k), 1e-6);
      EXPECT_EQ(off(tensor(a, p + "attn_v.weight"), tensor(b, p + "attn_v.weight"), 1), 0);
    }
    if (shape.qkv_bias) {
      EXPECT_LT(off(tensor(a, p + "attn_q.bias"), tensor(b, p + "attn_q.bias"), 3), 1e-6);
      EXPECT_LT(off(tensor(a, p + "attn_k.bias"), tensor(b, p + "attn_k.bias"), 3), 1e-6);
      EXPECT_EQ(off(tensor(a, p + "attn_v.bias"), tensor(b, p + "attn_v.bias"), 1), 0);
    }
    if (shape.qk_norm) {
      EXPECT_LT(off(tensor(a, p + "attn_q_norm.weight"), tensor(b, p + "attn_q_norm.weight"), 3),
                1e-6);
      EXPECT_LT(off(tensor(a, p + "attn_k_norm.weight"), tensor(b, p + "attn_k_norm.weight"), 3),
                1e-6);
    }
    EXPECT_EQ(off(tensor(a, p + "attn_output.weight"), tensor(b, p + "attn_output.weight"), 1), 0);
    EXPECT_EQ(off(tensor(a, p + "ffn_down.weight"), tensor(b, p + "ffn_down.weight"), 1), 0);
    EXPECT_NE(b.GetString("general.name")->find("attention x3"), std::string::npos);
    EXPECT_EQ(a.GetString("general.name")->find("attention x"), std::string::npos);
  }
  // Gemma 2's attention soft-cap grows with the scores (by the square); the final one does not.
  // (26 layers: written in Q4_0, a quarter of F32's bytes; only the keys are read.)
  SynthOptions g;
  g.preset = "tiny-gemma2";
  g.vocab_path = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";
  g.type = GgmlType::kQ4_0;
  g.attn_sharpen = 3.0f;
  g.out_path = dir.File("gemma2.gguf");
  ASSERT_TRUE(Synthesize(g).ok());
  auto gemma2 = GgufFile::Open(g.out_path);
  ASSERT_TRUE(gemma2.ok());
  const SynthShape gs = *SynthPresetShape("tiny-gemma2");
  EXPECT_FLOAT_EQ(*(*gemma2)->GetFloat("gemma2.attn_logit_softcapping"), 9 * gs.attn_softcap);
  EXPECT_FLOAT_EQ(*(*gemma2)->GetFloat("gemma2.final_logit_softcapping"), gs.final_softcap);

  SynthOptions o = TinyOptions(dir.File("x.gguf"));
  for (const float bad : {0.0f, -2.0f, 101.0f, NAN}) {
    o.attn_sharpen = bad;
    const Status s = Synthesize(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("sharpening factor"), std::string::npos) << s.message();
  }
}

TEST(Synth, SameSeedSameBytes) {
  TempDir dir;
  SynthOptions a = TinyOptions(dir.File("a.gguf"), GgmlType::kF16);
  a.vocab_path = kGpt2Vocab;
  SynthOptions b = a;
  b.out_path = dir.File("b.gguf");
  SynthOptions c = a;
  c.out_path = dir.File("c.gguf");
  c.seed = 8;
  ASSERT_TRUE(Synthesize(a).ok());
  ASSERT_TRUE(Synthesize(b).ok());
  ASSERT_TRUE(Synthesize(c).ok());
  const std::vector<uint8_t> ba = ReadAll(a.out_path), bb = ReadAll(b.out_path),
                             bc = ReadAll(c.out_path);
  EXPECT_GT(ba.size(), 64u * 50257 * 2);
  EXPECT_TRUE(ba == bb);
  ASSERT_EQ(ba.size(), bc.size());
  EXPECT_FALSE(ba == bc);
  auto r = GgufFile::Open(a.out_path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->FindTensor("token_embd.weight")->dims, (std::vector<int64_t>{64, 50257}));
  EXPECT_EQ(*(*r)->GetString("tokenizer.ggml.model"), "gpt2");
}

TEST(Synth, Errors) {
  TempDir dir;
  SynthOptions o = TinyOptions(dir.File("x.gguf"));
  o.preset = "nope";
  Status s = Synthesize(o);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("unknown synth preset 'nope'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("smollm2-135m"), std::string::npos);

  o = TinyOptions(dir.File("x.gguf"), GgmlType::kIQ2_XXS);  // no quantizer for it
  s = Synthesize(o);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("IQ2_XXS is not supported"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Q4_K"), std::string::npos) << s.message();

  o = TinyOptions(dir.File("x.gguf"));
  o.vocab_path = dir.File("missing.gguf");
  s = Synthesize(o);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);

  // A GGUF without tokenizer keys is not a vocabulary.
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  ASSERT_TRUE(w.Write(dir.File("novocab.gguf")).ok());
  o.vocab_path = dir.File("novocab.gguf");
  s = Synthesize(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no tokenizer.* keys"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir.File("x.gguf")));
}

}  // namespace
}  // namespace promptcache
