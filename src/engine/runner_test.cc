// The Runner (engine/runner.h) on stories260K: batches in chunks keep each sequence's logits,
// the no-cache baseline (RecomputeSequence) computes what incremental evaluation does, and a
// static pool is reserved whole. Generation itself is the Engine's
// (engine_generation_test.cc).
#include "engine/runner.h"

#include <gtest/gtest.h>

namespace promptcache {
namespace {

const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

std::unique_ptr<Model> LoadStories() {
  Result<std::unique_ptr<Model>> m = Model::Load(kStories);
  PC_CHECK(m.ok());
  return std::move(m).value();
}

std::vector<int32_t> Positions(size_t n) {
  std::vector<int32_t> pos(n);
  for (size_t j = 0; j < n; ++j) pos[j] = int32_t(j);
  return pos;
}

// A batch over several sequences, run in chunks smaller than it: each sequence's logits land at
// its place in batch order, as when it is evaluated alone.
TEST(Runner, EvalBatchInChunksKeepsEachSequencesLogits) {
  auto m = LoadStories();
  RunnerOptions so;
  so.batch_size = 5;  // every sequence's prompt crosses a chunk boundary
  Runner s(*m, so);
  const int V = m->config().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {
      m->tokenizer().Encode("Once upon a time", true),
      m->tokenizer().Encode("The dog ran to the big tree and sat", true),
      m->tokenizer().Encode("Lily", true)};
  std::vector<KvSequence> seqs;
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < prompts.size(); ++i) seqs.emplace_back(s.block_pool());
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t j = 0; j < prompts[i].size(); ++j) {
      batch.push_back({prompts[i][j], int32_t(j), &seqs[i], j + 1 == prompts[i].size()});
    }
  }
  std::vector<float> together(prompts.size() * V);
  ASSERT_TRUE(s.EvalBatch(batch, together.data()).ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    KvSequence alone(s.block_pool());
    std::vector<float> logits(V);
    ASSERT_TRUE(s.Eval(prompts[i], Positions(prompts[i].size()), &alone, logits.data()).ok());
    for (int v = 0; v < V; ++v) ASSERT_NEAR(together[i * V + v], logits[v], 1e-4f) << i << " " << v;
  }
}

// The baseline without a KV cache: the whole sequence again gives the logits that one more
// token on the cached sequence gives, and leaves the sequence holding exactly those tokens.
// (Mutation caught: RecomputeSequence not clearing the sequence first: it then holds the
// tokens twice.)
TEST(Runner, RecomputeGivesTheIncrementalLogits) {
  auto m = LoadStories();
  RunnerOptions so;
  so.batch_size = 4;  // the recompute crosses chunk boundaries
  Runner s(*m, so);
  const int V = m->config().n_vocab;
  const std::vector<int32_t> tokens = m->tokenizer().Encode("Once upon a time, there was", true);
  KvSequence seq(s.block_pool());
  std::vector<float> incremental(V), recomputed(V);
  const size_t n = tokens.size();
  ASSERT_TRUE(s.Eval(std::span(tokens).first(n - 1), Positions(n - 1), &seq, nullptr).ok());
  const int32_t last_pos = int32_t(n - 1);
  ASSERT_TRUE(s.Eval({&tokens.back(), 1}, {&last_pos, 1}, &seq, incremental.data()).ok());
  ASSERT_TRUE(s.Recompute(tokens, &seq, recomputed.data()).ok());
  EXPECT_EQ(seq.size(), static_cast<int>(n));
  for (int v = 0; v < V; ++v) ASSERT_NEAR(recomputed[v], incremental[v], 1e-4f) << v;
}

// A static pool holds the whole context from the start, and serves a sequence from it.
// (Mutation caught: PoolBlocks ignoring static_cache: nothing reserved.)
TEST(Runner, StaticCacheReservesTheWholeContext) {
  auto m = LoadStories();
  RunnerOptions so;
  so.context = 32;
  so.static_cache = true;
  Runner s(*m, so);
  const size_t reserved = s.block_pool()->bytes_reserved();
  EXPECT_GE(reserved, 32 * s.block_pool()->layout().bytes_per_token());
  const std::vector<int32_t> prompt = m->tokenizer().Encode("Once upon a time", true);
  std::vector<float> logits(m->config().n_vocab);
  EXPECT_TRUE(s.Eval(prompt, Positions(prompt.size()), s.sequence(), logits.data()).ok());
  EXPECT_EQ(s.block_pool()->bytes_reserved(), reserved);  // it did not grow
}

}  // namespace
}  // namespace promptcache
