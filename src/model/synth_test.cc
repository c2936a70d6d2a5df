#include "model/synth.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

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
       {"smollm2-135m", "smollm2-360m", "tinyllama-1.1b", "llama3.2-1b", "tiny-test"}) {
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

  o = TinyOptions(dir.File("x.gguf"), GgmlType::kQ4_K);
  s = Synthesize(o);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("Q4_K is not supported"), std::string::npos) << s.message();

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
