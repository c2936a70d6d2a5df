// The forward pass gives the same bits with any number of threads: the work splits that depend
// on the thread count (matrix rows cut by bytes, attention items cut by chunks of keys and by KV
// heads, per-token work fused into the matrix multiplies' jobs) must not change any arithmetic.
// conformance_test compares 1 and 2 threads on short prompts; here 3 and 8 threads too, past
// the 512-key chunks, and in decode steps where items are split by heads.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/profile.h"
#include "model/model.h"
#include "model/synth.h"
#include "ops/attention.h"

namespace promptcache {
namespace {

std::unique_ptr<Model> Synth(const std::string& preset) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("pc_threads_test_" + std::to_string(getpid()) + "_" + preset + ".gguf"))
          .string();
  SynthOptions o;
  o.preset = preset;
  o.vocab_path = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";  // 512 tokens
  o.type = GgmlType::kQ8_0;
  o.out_path = path;
  PC_CHECK(Synthesize(o, nullptr).ok());
  Result<std::unique_ptr<Model>> m = Model::Load(path);
  std::filesystem::remove(path);
  PC_CHECK(m.ok());
  return std::move(m).value();
}

// Every logit of: a 1,100-token prompt in two batches (600 + 500 tokens, the second reading
// three chunks of keys), four decode steps, then three sequences forked from it decoding one
// step together.
std::vector<float> AllLogits(const Model& m, int threads) {
  ThreadPool pool(threads);
  BlockPool blocks(m.MakeKvLayout(KvType::kF16, 16), 0, false);
  ForwardScratch scratch;
  const int V = m.config().n_vocab;
  std::vector<float> all;
  auto forward = [&](const std::vector<BatchToken>& batch) {
    std::vector<float> logits(batch.size() * V);
    PC_CHECK(m.Forward(batch, logits.data(), &pool, &scratch).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  };
  KvSequence seq(&blocks);
  auto feed = [&](KvSequence* s, int first, int n) {
    std::vector<BatchToken> batch;
    for (int p = first; p < first + n; ++p) batch.push_back({(p * 7919 + 13) % V, p, s, true});
    forward(batch);
  };
  feed(&seq, 0, 600);
  feed(&seq, 600, 500);
  for (int p = 1100; p < 1104; ++p) feed(&seq, p, 1);
  std::vector<KvSequence> forks;
  for (int i = 0; i < 3; ++i) forks.push_back(seq.Fork());
  std::vector<BatchToken> step;
  for (int i = 0; i < 3; ++i) step.push_back({(i * 37 + 3) % V, 1104, &forks[i], true});
  forward(step);
  return all;
}

class ThreadCount : public testing::TestWithParam<const char*> {};

// (Mutations tried: an item split by heads that keeps every head's state, and a byte split whose
// last task stops a tile short, both fail here.)
TEST_P(ThreadCount, LogitsAreTheSameBitsWithAnyNumberOfThreads) {
  const std::unique_ptr<Model> m = Synth(GetParam());
  const std::vector<float> one = AllLogits(*m, 1);
  for (int threads : {2, 3, 8}) {
    const std::vector<float> got = AllLogits(*m, threads);
    ASSERT_EQ(got.size(), one.size());
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != one[i] && differ++ == 0) first = i;
    }
    EXPECT_EQ(differ, 0u) << GetParam() << ", " << threads << " threads: first at logit " << first
                          << " (row " << first / m->config().n_vocab << ")";
  }
}

// What `bench --profile` reports as read: a pass reads each matrix Forward multiplies by once
// (the GGUF tensors' own sizes; a fused QKV or gate-up tensor once), and a decode step each
// layer's K and V rows of every key once, at any thread count: one thread reads alone, outside
// any job; three split the reads over jobs. (Mutations tried: the serial matrix path not
// counted, the decode tasks counted twice, attention counting K without V; each fails here.)
TEST_P(ThreadCount, AProfiledPassCountsEachWeightAndKeyOnce) {
  const std::unique_ptr<Model> m = Synth(GetParam());
  const ModelConfig& c = m->config();
  std::set<std::string> tensors;
  for (const auto& [name, w] : m->Matrices()) tensors.insert(name);
  // A decode step reads n_expert_used of a mixture-of-experts layer's experts.
  int64_t weights = 0, decode_weights = 0;
  for (const std::string& name : tensors) {
    const int64_t bytes = m->file().FindTensor(name)->nbytes;
    weights += bytes;
    const bool experts = name.find("_exps.") != std::string::npos;
    decode_weights += experts ? bytes / c.n_expert * c.n_expert_used : bytes;
  }
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    BlockPool blocks(m->MakeKvLayout(KvType::kF16, 16), 0, false);
    ForwardScratch scratch;
    KvSequence seq(&blocks);
    constexpr int kPrompt = 700;  // past one 512-key chunk
    std::vector<BatchToken> prompt;
    for (int p = 0; p < kPrompt; ++p) {
      prompt.push_back({(p * 7919 + 13) % c.n_vocab, p, &seq, p + 1 == kPrompt});
    }
    std::vector<float> logits(c.n_vocab);
    auto profiled = [&](std::span<const BatchToken> batch) {
      Profiler prof(threads);
      pool.set_profiler(&prof);
      prof.BeginPass(static_cast<int>(batch.size()));
      PC_CHECK(m->Forward(batch, logits.data(), &pool, &scratch).ok());
      prof.EndPass();
      pool.set_profiler(nullptr);
      std::map<OpKind, int64_t> by_kind;
      for (const Profiler::OpStats& op : prof.ops()) by_kind[op.kind] += op.bytes;
      int64_t by_thread = 0;
      for (const Profiler::ThreadStats& th : prof.threads()) by_thread += th.bytes;
      EXPECT_EQ(by_thread, prof.bytes());
      return by_kind;
    };
    std::map<OpKind, int64_t> read = profiled(prompt);
    if (c.Moe()) {
      // Each expert with tokens once: which have none depends on the routing.
      EXPECT_LE(read[OpKind::kMatMul], weights) << threads << " threads, prompt";
      EXPECT_GE(read[OpKind::kMatMul], decode_weights) << threads << " threads, prompt";
    } else {
      EXPECT_EQ(read[OpKind::kMatMul], weights) << threads << " threads, prompt";
    }
    const BatchToken step[] = {{5, kPrompt, &seq, true}};
    read = profiled(step);
    EXPECT_EQ(read[OpKind::kMatMul], decode_weights) << threads << " threads, decode";
    // f16 rows of kv_dim values, K and V, per key and layer; a sliding layer's from the tile
    // holding the first key in its window.
    int64_t keys = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      const int first = std::max(0, kPrompt + 1 - c.sliding_window);
      keys += kPrompt + 1 - (c.Sliding(l) ? first / kAttnTileRows * kAttnTileRows : 0);
    }
    EXPECT_EQ(read[OpKind::kAttention], keys * 2 * c.kv_dim() * 2) << threads << " threads";
    EXPECT_EQ(read[OpKind::kOther] + read[OpKind::kRope] + read[OpKind::kNorm], 0);
  }
}

// tiny-256: 2 KV heads; tiny-phi3: 4 (a split into 4 groups), fused QKV; tiny-gemma2: post-norms
// (fused into the next job's residual add), soft-caps, sliding windows; tiny-qwen3moe,
// tiny-qwen2moe, tiny-mixtral and tiny-gpt-oss: experts grouped by token (each expert's matrices
// read once per pass); tiny-qwen2moe also the shared expert (its gate and up in the router's
// job); tiny-gpt-oss also the output bias (in the residual add's job), sinks and experts' biases.
INSTANTIATE_TEST_SUITE_P(Presets, ThreadCount,
                         testing::Values("tiny-256", "tiny-phi3", "tiny-gemma2", "tiny-qwen3moe",
                                         "tiny-qwen2moe", "tiny-mixtral", "tiny-gpt-oss"));

}  // namespace
}  // namespace promptcache
