// Fixtures shared by the model tests (model_test.cc, model_kv_test.cc): stories260K and the
// synthetic models (made once per test binary), a Runner that feeds tokens through Forward with a
// KV cache of its own, and logit comparisons.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/temp_files.h"
#include "model/model.h"
#include "model/synth.h"

namespace promptcache {

inline const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

inline std::unique_ptr<Model> LoadOrDie(const std::string& path) {
  Result<std::unique_ptr<Model>> m = Model::Load(path);
  PC_CHECK(m.ok());
  return std::move(m).value();
}

// A small synthetic model with a real (GPT-2) vocabulary, made once per test binary.
inline std::string SynthesizeTiny(uint64_t seed, GgmlType type = GgmlType::kQ8_0) {
  const std::string p = RemoveAtExit((std::filesystem::temp_directory_path() /
                                      ("pc_model_test_" + std::to_string(getpid()) + "_" +
                                       std::to_string(seed) + "_" + GgmlTypeName(type) + ".gguf"))
                                         .string());
  SynthOptions o;
  o.preset = "tiny-test";
  o.vocab_path = std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf";
  o.type = type;
  o.seed = seed;
  o.out_path = p;
  Status st = Synthesize(o, nullptr);
  PC_CHECK(st.ok());
  return p;
}

inline const std::string& SyntheticModelPath() {
  static const std::string path = SynthesizeTiny(7);
  return path;
}

class Runner {
 public:
  Runner(const Model& m, KvType kv, int threads = 2)
      : m_(m), pool_(threads), blocks_(m.MakeKvLayout(kv, 16), 0, false) {}

  // Logits of every token, from one forward pass over a fresh sequence.
  std::vector<float> Full(const std::vector<int32_t>& tokens, const std::vector<int32_t>& pos) {
    KvSequence seq(&blocks_);
    return Run(&seq, tokens, pos, 0, tokens.size(), true);
  }

  // Feeds tokens [b, e) in one batch; returns the logits of all of them (want_all) or the last.
  std::vector<float> Run(KvSequence* seq, const std::vector<int32_t>& tokens,
                         const std::vector<int32_t>& pos, size_t b, size_t e, bool want_all) {
    std::vector<BatchToken> batch;
    for (size_t i = b; i < e; ++i)
      batch.push_back({tokens[i], pos[i], seq, want_all || i + 1 == e});
    const size_t n_out = want_all ? e - b : 1;
    std::vector<float> logits(n_out * m_.config().n_vocab);
    Status st = m_.Forward(batch, logits.data(), &pool_, &scratch_);
    PC_CHECK(st.ok());
    return logits;
  }

  // Logits of the tokens that want them, from one forward pass over `batch`.
  std::vector<float> RunBatch(const std::vector<BatchToken>& batch) {
    const size_t n_out = std::count_if(batch.begin(), batch.end(),
                                       [](const BatchToken& t) { return t.want_logits; });
    std::vector<float> logits(n_out * m_.config().n_vocab);
    Status st = m_.Forward(batch, logits.data(), &pool_, &scratch_);
    PC_CHECK(st.ok());
    return logits;
  }

  BlockPool* blocks() { return &blocks_; }

 private:
  const Model& m_;
  ThreadPool pool_;
  BlockPool blocks_;
  ForwardScratch scratch_;
};

// Mean KL divergence of q's next-token distributions from p's, over rows of n_vocab logits.
inline double MeanKl(const std::vector<float>& p, const std::vector<float>& q, int n_vocab) {
  const size_t rows = p.size() / n_vocab;
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = &p[r * n_vocab];
    const float* b = &q[r * n_vocab];
    const double ma = *std::max_element(a, a + n_vocab), mb = *std::max_element(b, b + n_vocab);
    double za = 0, zb = 0;
    for (int v = 0; v < n_vocab; ++v) za += std::exp(a[v] - ma), zb += std::exp(b[v] - mb);
    double kl = 0;
    for (int v = 0; v < n_vocab; ++v) {
      const double la = a[v] - ma - std::log(za), lb = b[v] - mb - std::log(zb);
      kl += std::exp(la) * (la - lb);
    }
    total += kl;
  }
  return total / rows;
}

inline float MaxAbsDiff(const float* a, const float* b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

inline std::vector<int32_t> Iota(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Every logit of a and b is the same float.
inline void ExpectSameBits(const float* a, const float* b, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[i], b[i]) << what << ", logit " << i;
  }
}

// synth's tiny fixture of another architecture ("gemma3": tiny-gemma3) in Q8_0, with
// stories260K's vocabulary: windows of 24 tokens, shorter than the tests' prompts.
inline std::string SynthesizeArchitecture(const std::string& arch) {
  const std::string p =
      RemoveAtExit((std::filesystem::temp_directory_path() /
                    ("pc_model_test_" + std::to_string(getpid()) + "_" + arch + ".gguf"))
                       .string());
  SynthOptions o;
  o.preset = "tiny-" + arch;
  o.vocab_path = kStories;
  o.type = GgmlType::kQ8_0;
  o.out_path = p;
  PC_CHECK(Synthesize(o, nullptr).ok());
  return p;
}

inline const std::string& CaseModelPath(const std::string& name) {
  static std::map<std::string, std::string> paths;
  if (name == "stories") return kStories;
  auto it = paths.find(name);
  if (it != paths.end()) return it->second;
  for (GgmlType t : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    if (name == GgmlTypeName(t)) return paths[name] = SynthesizeTiny(11, t);
  }
  return paths[name] = SynthesizeArchitecture(name);
}

}  // namespace promptcache
