// The modular prompt cache through the engine, on the real stories260K model and the story
// schema of examples/story: cached module K/V equal a full forward pass over their span, a
// prompt without cross-module attention to lose equals its full recompute token for token, the
// output does not depend on where the modules came from (just encoded, the disk tier after a
// restart, shared with a concurrent prompt), positions follow the schema, and errors come back
// as one line. (Across models, and scaffolds: modular_models_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/synth.h"
#include "engine/engine_impl.h"
#include "engine/fidelity.h"
#include "engine/modular_test_util.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

TEST(Modular, CachedModuleKvEqualsFullForwardOverItsSpan) {
  EngineOptions o;
  o.kv_type = KvType::kF32;
  auto e = Make(o);
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema).ok());
  auto* impl = dynamic_cast<EngineImpl*>(e.get());
  ASSERT_NE(impl, nullptr);
  auto layout = *e->GetSchemaLayout("story");
  const KvLayout kl = e->model().MakeKvLayout(KvType::kF32);
  const int row = kl.kv_dim();
  // "answer" attends to the always text and its scaffold peer "ask"; "find"'s second piece sits
  // after a parameter slot and attends to the always text, the module's first piece and the
  // parameter's scaffold default standing in the slot (kFill below).
  ASSERT_EQ(layout->always.size(), 1u);
  const PmlTextRef always{kPmlAlways, 0};
  const int ask = layout->FindModule("ask"), answer = layout->FindModule("answer"),
            find = layout->FindModule("find");
  constexpr int kFill = -2;  // {kFill, m}: module m's first parameter's scaffold, in its slot
  const std::vector<std::vector<PmlTextRef>> cases = {
      {always, {ask, 0}, {answer, 0}},
      {always, {find, 0}, {kFill, find}, {find, 1}},
  };
  for (const std::vector<PmlTextRef>& refs : cases) {
    const PmlTextRef target = refs.back();
    const std::string name = layout->modules[target.module].name;
    std::vector<int32_t> tokens, positions;
    for (const PmlTextRef& r : refs) {
      if (r.module == kFill) {
        const PmlParameter& p = layout->modules[r.piece].parameters.at(0);
        ASSERT_FALSE(p.scaffold_tokens.empty());
        for (size_t i = 0; i < p.scaffold_tokens.size(); ++i) {
          tokens.push_back(p.scaffold_tokens[i]);
          positions.push_back(p.start + static_cast<int>(i));
        }
        continue;
      }
      const PmlTextPiece& p = layout->Piece(r);
      for (size_t i = 0; i < p.tokens.size(); ++i) {
        tokens.push_back(p.tokens[i]);
        positions.push_back(p.start + static_cast<int>(i));
      }
    }
    const int n = static_cast<int>(layout->Piece(target).tokens.size());
    const int offset = static_cast<int>(tokens.size()) - n;
    RunnerOptions so;
    so.kv_type = KvType::kF32;
    so.threads = 2;
    so.batch_size = 4096;
    Runner full(e->model(), so);
    ASSERT_TRUE(full.Eval(tokens, positions, full.sequence(), nullptr).ok());
    std::vector<float> cached_k, cached_v;
    impl->RunOnEngineThread([&] {
      KvSequence seq(impl->blocks());
      GatherStats gs;
      ASSERT_TRUE(
          impl->modules()->Gather(*layout, target, layout->Piece(target).start, &seq, &gs).ok());
      EXPECT_EQ(gs.reused_tokens, n);
      ASSERT_EQ(seq.size(), n);
      for (int l = 0; l < kl.n_layers; ++l) {
        for (int i = 0; i < n; ++i) {
          EXPECT_EQ(seq.Position(i), positions[offset + i]);
          const auto* k = reinterpret_cast<const float*>(seq.SlotK(i, l));
          const auto* v = reinterpret_cast<const float*>(seq.SlotV(i, l));
          cached_k.insert(cached_k.end(), k, k + row);
          cached_v.insert(cached_v.end(), v, v + row);
        }
      }
    });
    float worst = 0;
    size_t at = 0;
    for (int l = 0; l < kl.n_layers; ++l) {
      for (int i = 0; i < n; ++i) {
        const auto* k = reinterpret_cast<const float*>(full.sequence()->SlotK(offset + i, l));
        const auto* v = reinterpret_cast<const float*>(full.sequence()->SlotV(offset + i, l));
        for (int d = 0; d < row; ++d, ++at) {
          worst = std::max({worst, std::fabs(k[d] - cached_k[at]), std::fabs(v[d] - cached_v[at])});
        }
      }
    }
    EXPECT_LE(worst, 1e-3f) << name;
    EXPECT_EQ(at, cached_k.size());
  }
}

TEST(Modular, AlwaysTextAndOneModuleEqualsFullRecompute) {
  auto e = Make();
  ASSERT_TRUE(e->LoadSchemaText(kPets, "pets.xml").ok());
  for (const std::string xml : {R"(<prompt schema="pets"><cat/></prompt>)",
                                "<prompt schema=\"pets\"><cat/><![CDATA[\nOne day,]]></prompt>"}) {
    CompletionResult r;
    const std::vector<float> first = FirstLogits(*e, xml, 32, &r);
    EXPECT_TRUE(r.modular);
    EXPECT_EQ(r.tokens, FullRecompute(*e, xml, 32)) << xml;
    EXPECT_EQ(r.cached_tokens + r.computed_tokens, r.prompt_tokens);
    // The same distribution, not only the same argmax.
    auto x = *e->ExpandPrompt(Parse(xml));
    FullRunOptions o;
    o.max_tokens = 1;
    o.keep_logits = true;
    o.sampling.temperature = 0;
    auto full = RunFull(e->model(), x, o);
    ASSERT_TRUE(full.ok());
    EXPECT_LT(KlDivergence(full->logits[0], first), 1e-4) << xml;
  }
  // Without new text the last cached token is recomputed for the first logits: one computed.
  const CompletionResult bare = Serve(*e, R"(<prompt schema="pets"><cat/></prompt>)");
  EXPECT_EQ(bare.computed_tokens, 1);
  EXPECT_GT(bare.cached_tokens, 20);
}

TEST(Modular, OutputSameWhenEncodedFromDiskOrShared) {
  const fs::path dir = EmptyTempPathAtExit("pc_modular_test");
  EngineOptions o;
  o.cache_dir = dir.string();
  o.parallel = 4;
  std::vector<int32_t> lily, tim;
  int lily_reused = 0;
  {
    auto e = Make(o);
    auto info = e->LoadSchemaFile(kStorySchema);
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_TRUE(info->persisted);
    EXPECT_EQ(info->encoded_tokens, info->cached_tokens);
    EXPECT_TRUE(fs::exists(dir / "schemas" / "story" / "schema.xml"));
    const CompletionResult a = Serve(*e, kLily);
    lily = a.tokens;
    lily_reused = a.cached_tokens;
    EXPECT_EQ(a.encoded_tokens, 0);
    EXPECT_EQ(a.computed_tokens, 10);  // " big box" and "\nOne day,"
    tim = Serve(*e, kTim).tokens;
    // Shared with a concurrent prompt: both run at once, batched, on the same blocks.
    auto h1 = e->SubmitPml(kLily, GreedyIgnoringEos());
    auto h2 = e->SubmitPml(kTim, GreedyIgnoringEos());
    auto h3 = e->SubmitPml(kLily, GreedyIgnoringEos());
    ASSERT_TRUE(h1.ok() && h2.ok() && h3.ok());
    EXPECT_EQ((*h1)->Wait().tokens, lily);
    EXPECT_EQ((*h2)->Wait().tokens, tim);
    EXPECT_EQ((*h3)->Wait().tokens, lily);
  }  // shutdown writes the cache to disk
  {
    auto e = Make(o);  // reloads the persisted schema; its modules come from the disk tier
    auto info = e->GetSchema("story");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->encoded_tokens, 0);
    EXPECT_EQ(info->reused_tokens, info->cached_tokens);
    const CompletionResult a = Serve(*e, kLily);
    EXPECT_EQ(a.tokens, lily);
    EXPECT_EQ(a.cached_tokens, lily_reused);
    EXPECT_EQ(a.encoded_tokens, 0);
    EXPECT_GT(e->Stats().disk_loads, 0u);
    EXPECT_EQ(Serve(*e, kTim).tokens, tim);
    ASSERT_TRUE(e->DropSchema("story").ok());
    EXPECT_FALSE(fs::exists(dir / "schemas" / "story"));
    EXPECT_EQ(e->DropSchema("story").code(), StatusCode::kNotFound);
    EXPECT_TRUE(e->ListSchemas().empty());
  }
  {
    auto e = Make(o);  // nothing persisted any more
    EXPECT_TRUE(e->ListSchemas().empty());
    // Registered without encoding: the first prompt encodes what it misses, counted as computed.
    SchemaLoadOptions lo;
    lo.encode = false;
    ASSERT_TRUE(e->LoadSchemaFile(kStorySchema, lo).ok());
    const CompletionResult cold = Serve(*e, kLily);
    EXPECT_EQ(cold.cached_tokens, 0);
    EXPECT_EQ(cold.computed_tokens, cold.prompt_tokens);
    EXPECT_GT(cold.encoded_tokens, 0);
    EXPECT_EQ(cold.tokens, lily);
    const CompletionResult warm = Serve(*e, kLily);
    EXPECT_EQ(warm.cached_tokens, lily_reused);
  }
  fs::remove_all(dir);
}

TEST(Modular, PositionsFollowTheSchema) {
  auto e = Make();
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema).ok());
  auto layout = *e->GetSchemaLayout("story");
  auto first_position_of = [&](const ExpandedPrompt& x, const std::string& module) {
    const PmlModule& m = layout->modules[layout->FindModule(module)];
    for (size_t i = 0; i < x.positions.size(); ++i) {
      if (x.positions[i] >= m.start && x.positions[i] < m.end()) return x.positions[i];
    }
    return -1;
  };
  const ExpandedPrompt lily = *e->ExpandPrompt(Parse(kLily));
  const ExpandedPrompt tim = *e->ExpandPrompt(Parse(kTim));
  // Union members share their start; new text starts at the schema's end.
  EXPECT_EQ(first_position_of(lily, "lily"), first_position_of(tim, "tim"));
  EXPECT_EQ(first_position_of(lily, "park"), first_position_of(tim, "lake"));
  const int n_new = lily.end - layout->total_length;  // "\nOne day,"
  EXPECT_GT(n_new, 0);
  EXPECT_EQ(lily.positions[lily.positions.size() - n_new], layout->total_length);
  EXPECT_EQ(lily.end, layout->total_length + n_new);
  for (size_t i = 1; i < lily.positions.size(); ++i)
    EXPECT_LT(lily.positions[i - 1], lily.positions[i]);
  // The argument sits at its parameter's slot.
  const PmlParameter& thing = layout->modules[layout->FindModule("find")].parameters[0];
  EXPECT_NE(std::find(lily.positions.begin(), lily.positions.end(), thing.start),
            lily.positions.end());

  // Editing "weather" (length="48") moves nothing after it, and only it is encoded again.
  const char* kSunny = R"(<prompt schema="story"><weather/><park/>Then</prompt>)";
  const ExpandedPrompt sunny = *e->ExpandPrompt(Parse(kSunny));
  std::string xml = Slurp(kStorySchema);
  const std::string old_text = "It was a good day to play outside.";
  ASSERT_NE(xml.find(old_text), std::string::npos);
  xml.replace(xml.find(old_text), old_text.size(), "It was a fine day.");
  auto info = e->LoadSchemaText(xml, kStorySchema);
  ASSERT_TRUE(info.ok()) << info.status().message();
  auto edited = *e->GetSchemaLayout("story");
  const PmlModule& weather = edited->modules[edited->FindModule("weather")];
  EXPECT_EQ(info->encoded_tokens, weather.token_count);
  EXPECT_EQ(info->reused_tokens, info->cached_tokens - weather.token_count);
  const ExpandedPrompt sunny2 = *e->ExpandPrompt(Parse(kSunny));
  EXPECT_EQ(first_position_of(sunny2, "park"), first_position_of(sunny, "park"));
  EXPECT_EQ(sunny2.end, sunny.end);
  EXPECT_LT(sunny2.tokens.size(), sunny.tokens.size());

  // Editing a scaffold member re-encodes its later peer, which attends to it.
  std::string xml2 = Slurp(kStorySchema);
  xml2.replace(xml2.find("go home now?"), 12, "go to bed now?");
  info = e->LoadSchemaText(xml2, kStorySchema);
  ASSERT_TRUE(info.ok());
  auto s2 = *e->GetSchemaLayout("story");
  EXPECT_EQ(info->encoded_tokens, s2->modules[s2->FindModule("ask")].token_count +
                                      s2->modules[s2->FindModule("answer")].token_count);
}

TEST(Modular, PrefillStagesAreCausalByPosition) {
  auto e = Make();
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema).ok());
  auto layout = *e->GetSchemaLayout("story");
  auto plan = PlanPrompt(*layout, Parse(kTim), dynamic_cast<EngineImpl&>(*e).encoder());
  ASSERT_TRUE(plan.ok());
  const ModularPrefill pf = BuildPrefill(*layout, *plan);
  // tim, lake, ask, answer, find's first piece come before find's argument (its scaffold
  // default); find's second piece before the uncached "moral" and the new text.
  ASSERT_EQ(pf.stages.size(), 2u);
  int last = -1;
  for (const PrefillStage& st : pf.stages) {
    for (const PrefillGather& g : st.gather) {
      EXPECT_GT(layout->Piece(g.ref).start, last);
      last = layout->Piece(g.ref).end() - 1;
    }
    ASSERT_FALSE(st.tokens.empty());
    for (int p : st.positions) {
      EXPECT_GT(p, last);
      last = p;
    }
  }
  EXPECT_EQ(pf.cached_tokens + pf.computed_tokens, static_cast<int>(pf.tokens.size()));
  // The engine's batched stages give what a sequential gather-then-compute gives.
  CompletionResult r;
  const std::vector<float> first = FirstLogits(*e, kTim, 8, &r);
  EXPECT_EQ(r.computed_tokens, pf.computed_tokens);
  auto& impl = dynamic_cast<EngineImpl&>(*e);
  std::vector<float> reference(e->model().config().n_vocab);
  impl.RunOnEngineThread([&] {
    KvSequence seq(impl.blocks());
    GatherStats gs;
    for (const PrefillStage& st : pf.stages) {
      for (const PrefillGather& g : st.gather)
        ASSERT_TRUE(impl.modules()->Gather(*layout, g, &seq, &gs).ok());
      ASSERT_TRUE(impl.modules()->Compute(st.tokens, st.positions, &seq, reference.data()).ok());
    }
  });
  EXPECT_LT(KlDivergence(reference, first), 1e-5);
}

// Computed items (an argument, a cache="false" module, or none) x new text (or none) x cached text
// after the last computed item (or not): generation always starts from the logits of the
// prompt's last token, whichever kind it is, as the full recompute at the same positions does.
const char* kTrail = R"(<schema name="trail"> Once upon a time, there was a girl named Lily.
  <module name="pet"><![CDATA[
She had a pet]]><parameter name="animal" length="6"/><![CDATA[. It liked to play in the park.]]></module>
  <module name="live" cache="false"><![CDATA[
Today it was sunny.]]></module>
  <module name="end"><![CDATA[
They went outside together and had fun.]]></module>
</schema>)";

TEST(Modular, GenerationStartsFromTheLastTokenWhereverItComesFrom) {
  auto e = Make();
  ASSERT_TRUE(e->LoadSchemaText(kTrail, "trail.xml").ok());
  auto layout = *e->GetSchemaLayout("trail");
  auto& impl = dynamic_cast<EngineImpl&>(*e);
  const std::string arg = R"(<pet animal=" cat"/>)";
  for (const std::string& computed : {arg, std::string("<live/>"), std::string("")}) {
    for (const std::string& after : {std::string(""), std::string("<end/>")}) {
      for (const std::string& text : {std::string(""), std::string("<![CDATA[\nOne day,]]>")}) {
        const std::string body = computed.empty() ? "<end/>" : computed + after;
        const std::string xml = "<prompt schema=\"trail\">" + body + text + "</prompt>";
        auto plan = PlanPrompt(*layout, Parse(xml), impl.encoder());
        ASSERT_TRUE(plan.ok()) << xml;
        const ModularPrefill pf = BuildPrefill(*layout, *plan);
        // The last stage computes the prompt's last position.
        ASSERT_FALSE(pf.stages.empty());
        ASSERT_FALSE(pf.stages.back().tokens.empty()) << xml;
        EXPECT_EQ(pf.stages.back().positions.back(),
                  *std::max_element(pf.positions.begin(), pf.positions.end()))
            << xml;
        EXPECT_EQ(pf.cached_tokens + pf.computed_tokens, static_cast<int>(pf.tokens.size()));

        CompletionResult r;
        const std::vector<float> first = FirstLogits(*e, xml, 8, &r);
        EXPECT_EQ(r.cached_tokens + r.computed_tokens, r.prompt_tokens) << xml;
        FullRunOptions o;
        o.max_tokens = 1;
        o.keep_logits = true;
        o.sampling.temperature = 0;
        auto full = RunFull(e->model(), *e->ExpandPrompt(Parse(xml)), o);
        ASSERT_TRUE(full.ok());
        // Text after a parameter slot was encoded without the argument, so the two need not
        // be equal; logits from the wrong token are many nats away (15 before the fix).
        EXPECT_LT(KlDivergence(full->logits[0], first), 0.5) << xml;
        EXPECT_EQ(ArgMax(full->logits[0]), ArgMax(first)) << xml;
      }
    }
  }
}

// Special tokens come from the schema only: an EOS spelled in an argument or the new text stays
// text (it would end generation or the turn), unless the engine trusts its callers.
TEST(Modular, ArgumentsAndNewTextWriteNoSpecialTokens) {
  const char* schema = R"(<schema name="eos"><module name="pet">The end.&lt;/s&gt; A pet
<parameter name="animal" length="12"/> ran.</module></schema>)";
  const std::string xml = R"(<prompt schema="eos"><pet animal="&lt;/s&gt;&lt;s&gt;"/>)"
                          R"(Then &lt;/s&gt; it slept.</prompt>)";
  for (bool trusted : {false, true}) {
    EngineOptions o;
    o.special_tokens_in_text = trusted;
    auto e = Make(o);
    ASSERT_TRUE(e->LoadSchemaText(schema, "eos.xml").ok());
    auto x = e->ExpandPrompt(Parse(xml));
    ASSERT_TRUE(x.ok()) << x.status().message();
    const auto count = [&](int32_t id) {
      return std::count(x->tokens.begin(), x->tokens.end(), id);
    };
    const int32_t eos = e->model().tokenizer().eos();
    const int32_t bos = e->model().tokenizer().bos();
    ASSERT_EQ(e->model().tokenizer().Piece(eos), "</s>");
    // The schema's </s> is a token either way; the argument's </s><s> and the new text's </s>
    // only for a trusted caller. (The BOS at position 0 is the schema's too.)
    EXPECT_EQ(count(eos), trusted ? 3 : 1);
    EXPECT_EQ(count(bos), trusted ? 2 : 1);
    // Served, the prompt is not cut short by a forged EOS.
    const CompletionResult r = Serve(*e, xml, GreedyIgnoringEos(4));
    EXPECT_EQ(r.prompt_tokens, static_cast<int>(x->tokens.size()));
  }
}

// The contiguous baseline is the prompt's text sent plainly: the same tokens through the engine
// as an ordinary prompt give the same logits, bit for bit; the gapped one differs where the
// prompt leaves modules out.
TEST(Modular, ContiguousBaselineIsThePlainPrompt) {
  EngineOptions eo;
  eo.prefix_cache = false;
  auto e = Make(eo);
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema).ok());
  auto x = e->ExpandPrompt(Parse(kLily));
  ASSERT_TRUE(x.ok());
  const ExpandedPrompt plain = Contiguous(*x);
  ASSERT_EQ(plain.tokens, x->tokens);
  EXPECT_EQ(plain.end, static_cast<int>(plain.tokens.size()));
  EXPECT_GT(x->end, plain.end);  // lily.xml leaves modules out
  const std::vector<float> contiguous = FullFirstLogits(*e, plain);
  const std::vector<float> gapped = FullFirstLogits(*e, *x);
  CompletionRequest req = GreedyIgnoringEos(1);
  req.prompt = x->tokens;
  std::vector<float> served;
  req.on_logits = [&](std::span<const float> l) { served.assign(l.begin(), l.end()); };
  auto h = e->Submit(std::move(req));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().status.ok());
  EXPECT_EQ(served, contiguous);
  EXPECT_NE(served, gapped);
}

TEST(Modular, ErrorsAreOneLine) {
  auto e = Make();
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema).ok());
  ASSERT_TRUE(e->LoadSchemaText(kPets, "pets.xml").ok());
  auto error = [&](const std::string& xml) {
    auto h = e->SubmitPml(xml, GreedyIgnoringEos(), "p.xml");
    EXPECT_FALSE(h.ok()) << xml;
    const std::string m = h.ok() ? "" : h.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  };
  EXPECT_NE(error(R"(<prompt schema="nope"/>)").find("unknown schema 'nope' (loaded: pets, story)"),
            std::string::npos);
  EXPECT_NE(error(R"(<prompt schema="story"><lily/><tim/></prompt>)").find("one union"),
            std::string::npos);
  EXPECT_NE(error(R"(<prompt schema="story"><dragon/></prompt>)").find("unknown module 'dragon'"),
            std::string::npos);
  EXPECT_NE(error(R"(<prompt schema="pets"><toy/></prompt>)").find("no scaffold default"),
            std::string::npos);
  EXPECT_NE(
      error(R"(<prompt schema="story"><find thing=" a very big and very shiny red box"/></prompt>)")
          .find("longer than its length 10"),
      std::string::npos);
  EXPECT_NE(error("<prompt schema=\"story\"><lily>").find("p.xml:1:"), std::string::npos);
  CompletionRequest with_tokens = GreedyIgnoringEos();
  with_tokens.prompt = {1, 2, 3};
  EXPECT_FALSE(e->SubmitPml(R"(<prompt schema="story"/>)", with_tokens).ok());
  // Schema errors: a remote client's src attribute, a context too small.
  SchemaLoadOptions no_src;
  no_src.allow_src = false;
  auto s = e->LoadSchemaText(R"(<schema name="x">
  <module name="doc" src="secret.txt"/>
</schema>)",
                             "remote", no_src);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "remote:2:3: schema 'x': module 'doc': src attributes are not accepted here; give the "
            "text inline");
  EngineOptions small;
  small.context = 256;
  auto e2 = Make(small);
  auto big = e2->LoadSchemaFile(kStorySchema);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(big.status().message().find("exceeds the model's context of 256"), std::string::npos);
  EXPECT_EQ(e2->GetSchema("story").status().code(), StatusCode::kNotFound);
  // A module whose text could never fit is refused by its size, before it is tokenized.
  std::string huge;
  while (huge.size() < 400000) huge += "Once upon a time. ";
  auto flood = e2->LoadSchemaText(
      "<schema name=\"flood\"><module name=\"a\">" + huge + "</module></schema>", "flood.xml");
  ASSERT_FALSE(flood.ok());
  EXPECT_EQ(flood.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(flood.status().message().find("module 'a' has 400014 bytes of text: at least"),
            std::string::npos)
      << flood.status().message();
}

TEST(Modular, ModulesStayCachedWithoutThePrefixCache) {
  EngineOptions o;
  o.prefix_cache = false;
  auto e = Make(o);
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema).ok());
  const CompletionResult a = Serve(*e, kLily), b = Serve(*e, kLily);
  EXPECT_EQ(a.cached_tokens, 236);
  EXPECT_EQ(b.cached_tokens, 236);
  EXPECT_EQ(b.encoded_tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
}

TEST(Modular, PromptBuilderMatchesXml) {
  auto e = Make();
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema).ok());
  const PmlPrompt built = PromptBuilder("story")
                              .Module("lily")
                              .Module("park")
                              .Argument("find", "thing", " big box")
                              .Text("\nOne day,")
                              .prompt();
  auto h = e->SubmitPrompt(built, GreedyIgnoringEos());
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ((*h)->Wait().tokens, Serve(*e, kLily).tokens);
  const ExpandedPrompt a = *e->ExpandPrompt(built), b = *e->ExpandPrompt(Parse(kLily));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.positions, b.positions);
}

}  // namespace
}  // namespace promptcache
