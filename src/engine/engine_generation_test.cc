// Generation through the Engine on stories260K, what `promptcache run` does: the README's greedy
// text, the no-cache baseline (recompute_each_step) giving the same tokens without touching the
// prefix cache, stop strings, seeded sampling, the context limit, a static K/V pool, and
// sliding-window layers trimmed to the same tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/create_engine.h"
#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"
#include "engine/fidelity.h"
#include "model/synth.h"

namespace promptcache {
namespace {

// The README's continuation, streamed as it is generated; the baseline that recomputes the
// whole sequence for every token gives the same tokens (and the same text, streamed the same
// way), and neither looks up nor leaves anything in the prefix cache.
// Mutations caught: the baseline inserting its prefix at Finish (ListCache not empty); and in
// BadInputIsRefusedAndTheContextEndsGeneration, RecomputeStep not advancing next_pos (the
// baseline then runs past the context).
TEST(EngineGeneration, GreedyTextWithAndWithoutKvCacheIsTheSame) {
  auto e = Make();
  const auto prompt = e->model().tokenizer().Encode("Once upon a time", true);
  std::string streamed[2];
  CompletionResult r[2];
  for (int recompute = 0; recompute < 2; ++recompute) {
    CompletionRequest req = Greedy(prompt, 40);
    req.recompute_each_step = recompute == 1;
    req.on_text = [&streamed, recompute](const std::string& piece) {
      streamed[recompute] += piece;
      return true;
    };
    if (recompute == 1) {
      ASSERT_TRUE(e->DropCache("").ok());
    }
    r[recompute] = Complete(*e, std::move(req));
    ASSERT_TRUE(r[recompute].status.ok()) << r[recompute].status.message();
  }
  EXPECT_EQ(r[0].text.rfind(", there was a little girl named Lily.", 0), 0u) << r[0].text;
  EXPECT_EQ(streamed[0], r[0].text);
  EXPECT_EQ(r[0].finish_reason, "length");
  EXPECT_EQ(r[0].tokens.size(), 40u);
  EXPECT_EQ(r[1].tokens, r[0].tokens);
  EXPECT_EQ(r[1].text, r[0].text);
  EXPECT_EQ(streamed[1], r[0].text);
  EXPECT_EQ(r[1].finish_reason, "length");
  EXPECT_EQ(r[1].cached_tokens, 0);
  EXPECT_TRUE(e->ListCache().empty());
}

// The same tokens as fidelity's full recompute on a Runner (engine/fidelity.h), a loop that
// shares only the decode step with the Engine.
TEST(EngineGeneration, MatchesTheRunnersFullRecompute) {
  auto e = Make();
  ExpandedPrompt x;
  x.tokens = e->model().tokenizer().Encode("The dog ran to the big tree and", true);
  for (size_t i = 0; i < x.tokens.size(); ++i) x.positions.push_back(int32_t(i));
  x.end = static_cast<int>(x.tokens.size());
  FullRunOptions o;
  o.max_tokens = 30;
  o.sampling.temperature = 0;
  Result<FullRunResult> full = RunFull(e->model(), x, o);
  ASSERT_TRUE(full.ok());
  const CompletionResult r = Complete(*e, Greedy(x.tokens, 30));
  EXPECT_EQ(r.tokens, full->tokens);
  EXPECT_EQ(r.text, full->text);
  EXPECT_EQ(r.finish_reason, full->finish_reason);
}

TEST(EngineGeneration, StopStringEndsTextBeforeIt) {
  auto e = Make();
  CompletionRequest req = Greedy(e->model().tokenizer().Encode("Once upon a time", true), 60);
  req.stop = {"Lily"};
  std::string streamed;
  req.on_text = [&](const std::string& piece) {
    streamed += piece;
    return true;
  };
  const CompletionResult r = Complete(*e, std::move(req));
  EXPECT_EQ(r.text, ", there was a little girl named ");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.finish_reason, "stop");
}

TEST(EngineGeneration, SeededSamplingIsReproducible) {
  EngineOptions o;
  o.prefix_cache = false;
  auto e = Make(o);
  CompletionRequest req = Greedy(e->model().tokenizer().Encode("Once upon a time", true), 30);
  req.sampling.temperature = 1.0f;
  req.sampling.seed = 1234;
  const CompletionResult a = Complete(*e, req);
  const CompletionResult b = Complete(*e, req);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.tokens, b.tokens);
}

TEST(EngineGeneration, BadInputIsRefusedAndTheContextEndsGeneration) {
  EngineOptions o;
  o.context = 8;
  auto e = Make(o);
  const Tokenizer& tok = e->model().tokenizer();
  auto refused = e->Submit(Greedy(tok.Encode("Once upon a time there was a big dog", true), 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("the context size is 8"), std::string::npos);
  CompletionRequest bad = Greedy(tok.Encode("Once", true), 4);
  bad.sampling.temperature = -1;
  EXPECT_FALSE(e->Submit(bad).ok());
  EXPECT_FALSE(e->Submit(Greedy({}, 4)).ok());
  for (const bool recompute : {false, true}) {
    CompletionRequest full = Greedy(tok.Encode("Once upon", true), 100);
    full.recompute_each_step = recompute;
    const CompletionResult r = Complete(*e, std::move(full));
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.prompt_tokens + r.tokens.size(), 8u) << recompute;
    EXPECT_EQ(r.finish_reason, "length");
  }
  // The baseline is for plain generation.
  CompletionRequest scored = Greedy(tok.Encode("Once", true), 4);
  scored.recompute_each_step = true;
  scored.prompt_logprobs = true;
  EXPECT_EQ(e->Submit(scored).status().code(), StatusCode::kInvalidArgument);
}

// CreateEngine over a loaded model (the CLI's path): batch_size 0 is the model's default, and a
// static pool holds every sequence's whole context from the start.
TEST(EngineGeneration, CreateEngineOverALoadedModelWithAStaticPool) {
  auto m = Model::Load(kStories);
  ASSERT_TRUE(m.ok());
  const int default_batch = (*m)->DefaultBatchSize();
  const size_t per_token = (*m)->MakeKvLayout(KvType::kF16).bytes_per_token();
  EngineOptions o;
  o.model_path = kStories;
  o.context = 64;
  o.batch_size = 0;
  o.parallel = 1;
  o.prefix_cache = false;
  auto e = CreateEngine(o, std::move(m).value(), /*static_kv=*/true);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ((*e)->options().batch_size, default_batch);
  const CompletionResult r =
      Complete(**e, Greedy((*e)->model().tokenizer().Encode("Once upon a time", true), 100));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.prompt_tokens + r.tokens.size(), 64u);
  // Mutation caught: the static flag not passed to the engine's pool (nothing reserved).
  BlockPool* pool = static_cast<EngineImpl*>(e->get())->blocks();
  EXPECT_EQ(pool->max_blocks(), 64 / 16);  // a dynamic pool has no bound (0)
  EXPECT_GE(pool->bytes_reserved(), 64 * per_token);
}

// A sliding-window model (tiny-gemma3: 24-token windows on 7 of 8 layers) releases the sliding
// layers' K/V behind the window: the same tokens as keeping everything, in a fraction of the
// memory; the no-cache baseline trims too.
TEST(EngineGeneration, TrimmingSlidingLayersGivesTheSameTokens) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pc_generation_test_" + std::to_string(getpid()) + "_gemma3.gguf"))
                               .string();
  SynthOptions so;
  so.preset = "tiny-gemma3";
  so.vocab_path = kStories;
  so.out_path = path;
  ASSERT_TRUE(Synthesize(so, nullptr).ok());
  std::vector<int32_t> tokens[3];
  size_t peak[3];
  for (int run = 0; run < 3; ++run) {
    EngineOptions o;
    o.model_path = path;
    o.batch_size = 32;
    o.prefix_cache = false;
    o.trim_sliding_kv = run > 0;
    auto e = Make(o);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 200; ++i) prompt.push_back((i * 7919 + 13) % e->model().config().n_vocab);
    CompletionRequest req = Greedy(prompt, 20);
    req.ignore_eos = true;
    req.recompute_each_step = run == 2;
    const CompletionResult r = Complete(*e, std::move(req));
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    tokens[run] = r.tokens;
    peak[run] = e->Stats().kv_bytes_peak;
  }
  std::filesystem::remove(path);
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(tokens[2], tokens[0]);
  EXPECT_EQ(tokens[1].size(), 20u);
  EXPECT_LT(peak[1], peak[0] / 2);
  EXPECT_LT(peak[2], peak[0] / 2);
}

}  // namespace
}  // namespace promptcache
