#include "engine/session.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "model/synth.h"

namespace promptcache {
namespace {

const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

std::unique_ptr<Model> LoadStories() {
  Result<std::unique_ptr<Model>> m = Model::Load(kStories);
  PC_CHECK(m.ok());
  return std::move(m).value();
}

GenerateOptions Greedy(int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  return o;
}

TEST(Session, GreedyTextWithAndWithoutKvCacheIsTheSame) {
  auto m = LoadStories();
  Session s(*m, SessionOptions{});
  const auto prompt = m->tokenizer().Encode("Once upon a time", true);
  GenerateOptions o = Greedy(40);
  std::string streamed;
  o.on_text = [&](const std::string& piece) {
    streamed += piece;
    return true;
  };
  Result<GenerateResult> cached = s.Generate(prompt, o);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(streamed, cached->text);
  EXPECT_EQ(cached->text.rfind(", there was a little girl named Lily.", 0), 0u) << cached->text;
  o.use_kv_cache = false;
  o.on_text = nullptr;
  Result<GenerateResult> uncached = s.Generate(prompt, o);
  ASSERT_TRUE(uncached.ok());
  EXPECT_EQ(uncached->tokens, cached->tokens);
  EXPECT_EQ(cached->finish_reason, "length");
  EXPECT_EQ(cached->tokens.size(), 40u);
}

// A batch over several sequences, run in chunks smaller than it: each sequence's logits land at
// its place in batch order, as when it is evaluated alone.
TEST(Session, EvalBatchInChunksKeepsEachSequencesLogits) {
  auto m = LoadStories();
  SessionOptions so;
  so.batch_size = 5;  // every sequence's prompt crosses a chunk boundary
  Session s(*m, so);
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
    std::vector<int32_t> pos(prompts[i].size());
    for (size_t j = 0; j < pos.size(); ++j) pos[j] = int32_t(j);
    std::vector<float> logits(V);
    ASSERT_TRUE(s.Eval(prompts[i], pos, &alone, logits.data()).ok());
    for (int v = 0; v < V; ++v) ASSERT_NEAR(together[i * V + v], logits[v], 1e-4f) << i << " " << v;
  }
}

TEST(Session, StopStringEndsTextBeforeIt) {
  auto m = LoadStories();
  Session s(*m, SessionOptions{});
  GenerateOptions o = Greedy(60);
  o.stop = {"Lily"};
  std::string streamed;
  o.on_text = [&](const std::string& piece) {
    streamed += piece;
    return true;
  };
  Result<GenerateResult> r = s.Generate(m->tokenizer().Encode("Once upon a time", true), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, ", there was a little girl named ");
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->finish_reason, "stop");
}

TEST(Session, SeededSamplingIsReproducible) {
  auto m = LoadStories();
  Session s(*m, SessionOptions{});
  GenerateOptions o = Greedy(30);
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 1234;
  const auto prompt = m->tokenizer().Encode("Once upon a time", true);
  Result<GenerateResult> a = s.Generate(prompt, o);
  Result<GenerateResult> b = s.Generate(prompt, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
}

TEST(Session, BadInputIsRejected) {
  auto m = LoadStories();
  SessionOptions so;
  so.context = 8;
  Session s(*m, so);
  const auto long_prompt = m->tokenizer().Encode("Once upon a time there was a big dog", true);
  Result<GenerateResult> r = s.Generate(long_prompt, Greedy(4));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context size 8"), std::string::npos);
  GenerateOptions bad = Greedy(4);
  bad.sampling.temperature = -1;
  EXPECT_FALSE(s.Generate(m->tokenizer().Encode("Once", true), bad).ok());
  EXPECT_FALSE(s.Generate({}, Greedy(4)).ok());
  // Generation stops at the context limit instead of overrunning it.
  Result<GenerateResult> full = s.Generate(m->tokenizer().Encode("Once upon", true), Greedy(100));
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->prompt_tokens + full->tokens.size(), 8u);
}

TEST(Session, StaticCacheRefusesBeyondItsSize) {
  auto m = LoadStories();
  SessionOptions so;
  so.context = 32;
  so.static_cache = true;
  Session s(*m, so);
  EXPECT_EQ(s.block_pool()->bytes_reserved() >= 32 * s.block_pool()->layout().bytes_per_token(),
            true);
  Result<GenerateResult> r =
      s.Generate(m->tokenizer().Encode("Once upon a time", true), Greedy(10));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens.size(), 10u);
  // Past its size: a prompt that does not fit is refused, a generation stops at the end.
  std::vector<int32_t> long_prompt(40, 403);
  long_prompt[0] = m->tokenizer().bos();
  EXPECT_FALSE(s.Generate(long_prompt, Greedy(4)).ok());
  Result<GenerateResult> capped =
      s.Generate(m->tokenizer().Encode("Once upon a time", true), Greedy(100));
  ASSERT_TRUE(capped.ok());
  EXPECT_LT(capped->tokens.size(), 32u);
}

// Generate on a sliding-window model (tiny-gemma3: 24-token windows on 7 of 8 layers) releases
// the sliding layers' K/V behind the window: the same tokens as keeping everything, in a
// fraction of the memory.
TEST(Session, GenerateTrimsSlidingLayersToTheSameTokens) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pc_session_test_" + std::to_string(getpid()) + "_gemma3.gguf"))
                               .string();
  SynthOptions so;
  so.preset = "tiny-gemma3";
  so.vocab_path = kStories;
  so.out_path = path;
  ASSERT_TRUE(Synthesize(so, nullptr).ok());
  Result<std::unique_ptr<Model>> m = Model::Load(path);
  ASSERT_TRUE(m.ok());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 200; ++i) prompt.push_back((i * 7919 + 13) % (*m)->config().n_vocab);
  GenerateOptions o = Greedy(20);
  o.ignore_eos = true;
  std::vector<int32_t> tokens[2];
  size_t peak[2];
  for (int trim = 0; trim < 2; ++trim) {
    SessionOptions opts;
    opts.threads = 2;
    opts.batch_size = 32;
    opts.trim_sliding_kv = trim == 1;
    Session s(**m, opts);
    Result<GenerateResult> r = s.Generate(prompt, o);
    ASSERT_TRUE(r.ok());
    tokens[trim] = r->tokens;
    peak[trim] = s.block_pool()->peak_bytes_in_use();
  }
  std::filesystem::remove(path);
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(tokens[1].size(), 20u);
  EXPECT_LT(peak[1], peak[0] / 2);
}

TEST(TextStream, HoldsBackPossibleStopPrefixes) {
  auto m = LoadStories();
  const Tokenizer& tok = m->tokenizer();
  TextStream ts(tok, {"girl named"});
  // The dummy prefix makes the first piece " there".
  const auto ids = tok.Encode("there was a little girl named Lily", false);
  std::string out;
  bool stopped = false;
  for (int32_t id : ids) {
    out += ts.Push(id, &stopped);
    if (stopped) break;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, " there was a little ");
}

}  // namespace
}  // namespace promptcache
