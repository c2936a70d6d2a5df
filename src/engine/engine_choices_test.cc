// The Engine's choices (n > 1 forked from one prefill, seeded sampling), log-probabilities of
// generated and prompt tokens with and without the cache, and grammar-constrained output, on
// stories260K.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace promptcache {
namespace {

CompletionRequest Sampled(std::vector<int32_t> prompt, int n, uint64_t seed, int max_tokens = 12) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.n = n;
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = seed;
  return r;
}

// A greedy request for `max_tokens` tokens after "Once upon a time" (BOS first).
CompletionRequest OnceUponATime(const Engine& e, int max_tokens) {
  return Greedy(e.model().tokenizer().Encode("Once upon a time", true), max_tokens);
}

TEST(EngineChoices, ForkFromOnePrefillAndSeedReproduces) {
  EngineOptions o;
  o.prefix_cache = false;  // the peak below is this request's K/V alone
  auto e = Make(o);
  const auto prompt = e->model().tokenizer().Encode(kStory, true);
  const CompletionResult a = Complete(*e, Sampled(prompt, 4, 42));
  ASSERT_TRUE(a.status.ok());
  ASSERT_EQ(a.choices.size(), 4u);
  EXPECT_EQ(a.prompt_tokens, static_cast<int>(prompt.size()));  // counted once
  EXPECT_EQ(a.computed_tokens, static_cast<int>(prompt.size()));
  EXPECT_EQ(a.tokens, a.choices[0].tokens);
  int differ = 0;
  for (int i = 1; i < 4; ++i) differ += a.choices[i].tokens != a.choices[0].tokens;
  EXPECT_GT(differ, 0) << "choices sample from streams of their own";
  EXPECT_EQ(a.completion_tokens(), [&] {
    int n = 0;
    for (const auto& c : a.choices) n += static_cast<int>(c.tokens.size());
    return n;
  }());
  // The prompt's blocks are shared: each choice adds one block for its 12 tokens (the partial
  // last prompt block stays shared; new tokens go to a block of the choice's own).
  const size_t block = e->model().MakeKvLayout(KvType::kF16).bytes_per_block();
  const size_t prompt_blocks = (prompt.size() + 15) / 16;
  EXPECT_LE(e->Stats().kv_bytes_peak, (prompt_blocks + 4) * block);
  // The same seed gives the same choices; choice 0 is what n = 1 gives with that seed.
  const CompletionResult b = Complete(*e, Sampled(prompt, 4, 42));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.choices[i].tokens, a.choices[i].tokens) << i;
  EXPECT_EQ(Complete(*e, Sampled(prompt, 1, 42)).tokens, a.choices[0].tokens);
  const CompletionResult c = Complete(*e, Sampled(prompt, 4, 43));
  EXPECT_NE(c.choices[1].tokens, a.choices[1].tokens);
}

TEST(EngineChoices, GreedyChoicesAreTheReference) {
  auto e = Make();
  CompletionRequest r = OnceUponATime(*e, 16);
  r.n = 3;
  const CompletionResult res = Complete(*e, r);
  ASSERT_EQ(res.choices.size(), 3u);
  for (const auto& c : res.choices) EXPECT_EQ(c.tokens, Reference(e->model(), r.prompt, 16));
}

TEST(EngineLogprobs, GeneratedTokensReportTheirLogSoftmax) {
  auto e = Make();
  CompletionRequest r = OnceUponATime(*e, 8);
  r.logprobs = 5;
  const CompletionResult res = Complete(*e, r);
  ASSERT_EQ(res.choices[0].logprobs.size(), res.tokens.size());
  for (size_t i = 0; i < res.tokens.size(); ++i) {
    const TokenLogprob& lp = res.choices[0].logprobs[i];
    EXPECT_EQ(lp.token, res.tokens[i]);
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, lp.token);  // greedy: the most likely one
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    EXPECT_LE(lp.logprob, 0.0f);
    double mass = 0;
    for (size_t k = 0; k < lp.top.size(); ++k) {
      mass += std::exp(lp.top[k].second);
      if (k > 0) {
        EXPECT_LE(lp.top[k].second, lp.top[k - 1].second);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
}

// Echo scoring: every prompt token's log-probability, the same whether the prompt's prefix is
// computed or comes from the cache (whose values the memo kept).
TEST(EngineLogprobs, PromptLogprobsMatchWithAndWithoutTheCache) {
  auto cached = Make();
  EngineOptions o;
  o.prefix_cache = false;
  auto cold = Make(o);
  const Tokenizer& tok = cached->model().tokenizer();
  const auto context = tok.Encode(kStory, true);
  auto score = [&](Engine& e, const std::string& ending) {
    CompletionRequest r = Greedy(tok.Encode(std::string(kStory) + ending, true), 0);
    r.logprobs = 2;
    r.prompt_logprobs = true;
    return Complete(e, r);
  };
  const CompletionResult warm = score(*cached, " Her mom");
  EXPECT_EQ(warm.cached_tokens, 0);
  for (const char* ending : {" Her mom", " The dog barked", " Tim"}) {
    const CompletionResult a = score(*cached, ending);
    const CompletionResult b = score(*cold, ending);
    ASSERT_TRUE(a.status.ok());
    EXPECT_GE(a.cached_tokens, static_cast<int>((context.size() - 1) / 16 * 16)) << ending;
    EXPECT_EQ(b.cached_tokens, 0);
    ASSERT_EQ(a.prompt_logprobs.size(), static_cast<size_t>(a.prompt_tokens - 1));
    ASSERT_EQ(b.prompt_logprobs.size(), a.prompt_logprobs.size());
    const auto prompt = tok.Encode(std::string(kStory) + ending, true);
    for (size_t i = 0; i < a.prompt_logprobs.size(); ++i) {
      EXPECT_EQ(a.prompt_logprobs[i].token, prompt[i + 1]);
      EXPECT_NEAR(a.prompt_logprobs[i].logprob, b.prompt_logprobs[i].logprob, 1e-3) << i;
      ASSERT_EQ(a.prompt_logprobs[i].top.size(), 2u);
      EXPECT_EQ(a.prompt_logprobs[i].top[0].first, b.prompt_logprobs[i].top[0].first);
    }
    EXPECT_TRUE(a.tokens.empty());
    EXPECT_EQ(a.finish_reason, "length");
  }
}

std::shared_ptr<const Grammar> SchemaGrammar(const std::string& schema) {
  auto gbnf = JsonSchemaToGbnf(schema);
  PC_CHECK(gbnf.ok());
  auto g = Grammar::Parse(*gbnf);
  PC_CHECK(g.ok());
  return *g;
}

// stories260K never saw JSON: every structural token comes from the grammar's mask. With
// bounded strings and numbers the text always completes, greedy or sampled, for any seed.
TEST(EngineGrammar, SchemaOutputAlwaysParsesAndValidates) {
  auto e = Make();
  const auto prompt = e->model().tokenizer().Encode("Once upon a time", true);
  const auto grammar = SchemaGrammar(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 6},
      "age": {"type": "integer"},
      "mood": {"enum": ["happy", "sad"]},
      "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
    "required": ["name", "age", "mood"], "additionalProperties": false})");
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    CompletionRequest r = seed == 1 ? Greedy(prompt, 400) : Sampled(prompt, 2, seed, 400);
    r.grammar = grammar;
    const CompletionResult res = Complete(*e, r);
    ASSERT_TRUE(res.status.ok()) << res.status.message();
    for (const CompletionChoice& c : res.choices) {
      EXPECT_EQ(c.finish_reason, "stop") << c.text;
      const auto j = nlohmann::json::parse(c.text, nullptr, false);
      ASSERT_TRUE(j.is_object()) << c.text;
      ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << c.text;
      EXPECT_LE(j["name"].get<std::string>().size(), 6u * 4) << c.text;  // 6 code points
      ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << c.text;
      ASSERT_TRUE(j.contains("mood")) << c.text;
      EXPECT_TRUE(j["mood"] == "happy" || j["mood"] == "sad") << c.text;
      if (j.contains("tags")) {
        ASSERT_TRUE(j["tags"].is_array());
        EXPECT_LE(j["tags"].size(), 3u);
        for (const auto& t : j["tags"]) EXPECT_TRUE(t.is_boolean()) << c.text;
      }
      for (const auto& [k, v] : j.items()) {
        EXPECT_TRUE(k == "name" || k == "age" || k == "mood" || k == "tags") << c.text;
      }
    }
  }
}

TEST(EngineGrammar, StopsWhereTheGrammarEnds) {
  auto e = Make();
  auto g = Grammar::Parse(R"g(root ::= " there was " ("a dog" | "a cat" | "Lily") ".")g");
  ASSERT_TRUE(g.ok());
  CompletionRequest r = OnceUponATime(*e, 100);
  r.grammar = *g;
  r.n = 3;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 5;
  const CompletionResult res = Complete(*e, r);
  ASSERT_TRUE(res.status.ok());
  for (const CompletionChoice& c : res.choices) {
    EXPECT_EQ(c.finish_reason, "stop");
    EXPECT_TRUE(c.text == " there was a dog." || c.text == " there was a cat." ||
                c.text == " there was Lily.")
        << c.text;
  }
}

}  // namespace
}  // namespace promptcache
