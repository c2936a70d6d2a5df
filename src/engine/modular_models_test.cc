// The modular prompt cache across models (stories260K and a fixture with sliding windows
// shorter than the schema): contiguous positions equal the plain prompt, shared moves read like
// copies, recompute blends toward the plain prompt; and scaffolds: a partial scaffold does not
// see missing peers, a parameter's scaffold default stands in its slot while encoding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/modular_test_util.h"

namespace promptcache {
namespace {

// Run on stories260K and on a model with sliding windows shorter than the pets schema.
class ModularModels : public testing::TestWithParam<std::string> {};

// The contiguous position mode lays the prompt out from 0 like the plain prompt. Where each
// piece follows exactly what it attended to when encoded (one module, a prefix of the schema),
// the logits equal the contiguous baseline's bit for bit; a module moved after another is
// rotated there and stays close. At the schema's positions the gap left by `dog` changes them.
TEST_P(ModularModels, ContiguousPositionsEqualThePlainPrompt) {
  for (PmlPositions engine_default : {PmlPositions::kSchema, PmlPositions::kContiguous}) {
    EngineOptions eo;
    eo.kv_type = KvType::kF32;
    eo.module_positions = engine_default;
    eo.model_path = ModelPath(GetParam());
    auto e = Make(eo);
    ASSERT_TRUE(e->LoadSchemaText(kPets, "pets.xml").ok());
    const std::string attr =
        engine_default == PmlPositions::kContiguous ? "" : " positions=\"contiguous\"";
    auto baseline = [&](const std::string& body) {
      PmlPrompt p = Parse("<prompt schema=\"pets\">" + body + "</prompt>");
      p.positions = PmlPositions::kSchema;
      auto x = e->ExpandPrompt(p);
      PC_CHECK(x.ok());
      return FullFirstLogits(*e, Contiguous(*x), KvType::kF32);
    };
    const std::string text = "<![CDATA[\nOne day,]]>";
    for (const std::string& body :
         {"<cat/>" + text, "<dog/>" + text, std::string("<cat/>"), text}) {
      const std::string xml = "<prompt schema=\"pets\"" + attr + ">" + body + "</prompt>";
      auto x = e->ExpandPrompt(Parse(xml));
      ASSERT_TRUE(x.ok());
      if (e->model().config().AnySliding() && body.find("dog") != std::string::npos) {
        EXPECT_GT(x->tokens.size(), size_t(e->model().config().sliding_window)) << xml;
      }
      for (size_t i = 0; i < x->positions.size(); ++i) ASSERT_EQ(x->positions[i], int(i));
      EXPECT_EQ(x->end, static_cast<int>(x->tokens.size()));
      const std::vector<float> got = FirstLogits(*e, xml);
      EXPECT_EQ(got, baseline(body)) << xml;
      EXPECT_EQ(FirstLogits(*e, xml), got) << xml << " (cached)";
    }
    // At the schema's positions, `cat` sits after the gap `dog` left.
    const std::string gapped =
        "<prompt schema=\"pets\" positions=\"schema\"><cat/>" + text + "</prompt>";
    EXPECT_NE(FirstLogits(*e, gapped), baseline("<cat/>" + text));
    // `cat` after `dog`: gathered from its cache entry, its keys rotated by dog's length.
    const std::string both =
        "<prompt schema=\"pets\"" + attr + "><dog/><cat/>" + text + "</prompt>";
    const CompletionResult r = Serve(*e, both, GreedyIgnoringEos(1));
    const std::string both_at_schema =
        "<prompt schema=\"pets\" positions=\"schema\"><dog/><cat/>" + text + "</prompt>";
    // Its modules encoded: then only the text computes.
    Serve(*e, both_at_schema, GreedyIgnoringEos(1));
    const CompletionResult at_schema = Serve(*e, both_at_schema, GreedyIgnoringEos(1));
    EXPECT_EQ(r.cached_tokens, at_schema.cached_tokens);  // cat reused, not recomputed
    EXPECT_EQ(r.computed_tokens, at_schema.computed_tokens);
    const std::vector<float> moved = FirstLogits(*e, both);
    const std::vector<float> plain = baseline("<dog/><cat/>" + text);
    EXPECT_LT(KlDivergence(plain, moved), 0.05);
    EXPECT_EQ(ArgMax(plain), ArgMax(moved));
  }
}

// Shared moves (EngineOptions::module_shared_moves): a module moved after another is read from
// its cache entry's blocks through rotated queries instead of a rotated copy. The logits equal
// the copy's up to rounding, pieces that do not move are exact as before, and the prompt holds
// fewer K/V bytes at its peak (the moved module is not copied).
TEST_P(ModularModels, SharedMovesReadLikeCopies) {
  const std::string text = "<![CDATA[\nOne day,]]>";
  const std::string both = "<prompt schema=\"pets\"><dog/><cat/>" + text + "</prompt>";
  const std::string one = "<prompt schema=\"pets\"><cat/>" + text + "</prompt>";
  std::vector<float> logits[2], single[2];
  size_t peak[2];
  CompletionResult served[2];
  for (int shared : {0, 1}) {
    EngineOptions eo;
    eo.kv_type = KvType::kF32;
    eo.module_positions = PmlPositions::kContiguous;
    eo.module_shared_moves = shared == 1;
    eo.prefix_cache = false;
    eo.model_path = ModelPath(GetParam());
    auto e = Make(eo);
    ASSERT_TRUE(e->LoadSchemaText(kPets, "pets.xml").ok());
    Serve(*e, both, GreedyIgnoringEos(1));  // modules encoded and cached
    const size_t before = e->Stats().kv_bytes_in_use;
    served[shared] = Serve(*e, both, GreedyIgnoringEos(4));
    peak[shared] = e->Stats().kv_bytes_peak - before;
    logits[shared] = FirstLogits(*e, both);
    single[shared] = FirstLogits(*e, one);
  }
  EXPECT_EQ(served[1].cached_tokens, served[0].cached_tokens);
  EXPECT_EQ(served[1].computed_tokens, served[0].computed_tokens);
  EXPECT_EQ(served[1].text, served[0].text);
  EXPECT_LT(KlDivergence(logits[0], logits[1]), 1e-4);
  EXPECT_EQ(ArgMax(logits[0]), ArgMax(logits[1]));
  EXPECT_EQ(single[1], single[0]);  // nothing moved: the same bits
  EXPECT_LT(peak[1], peak[0]);
}

// Selective recompute: only tokens encoded without part of the prompt's context are candidates;
// recomputing all of them gives the plain prompt's logits bit for bit, a share of them counts
// as computed and moves the logits toward it.
TEST_P(ModularModels, RecomputeBlendsModulesTowardThePlainPrompt) {
  EngineOptions eo;
  eo.kv_type = KvType::kF32;
  eo.module_positions = PmlPositions::kContiguous;
  eo.model_path = ModelPath(GetParam());
  auto e = Make(eo);
  ASSERT_TRUE(e->LoadSchemaText(kPets, "pets.xml").ok());
  const std::string text = "<![CDATA[\nOne day,]]>";
  auto prompt = [&](const std::string& attrs, const std::string& body) {
    return "<prompt schema=\"pets\"" + attrs + ">" + body + text + "</prompt>";
  };
  PmlPrompt base = Parse(prompt("", "<dog/><cat/>"));
  auto x = e->ExpandPrompt(base);
  ASSERT_TRUE(x.ok());
  const std::vector<float> plain = FullFirstLogits(*e, *x, KvType::kF32);
  const int cat_tokens =
      static_cast<int>((*e->GetSchemaLayout("pets"))->modules[1].texts[0].tokens.size());

  Serve(*e, prompt("", "<dog/><cat/>"), GreedyIgnoringEos(1));  // encode the modules first
  const CompletionResult none = Serve(*e, prompt("", "<dog/><cat/>"), GreedyIgnoringEos(1));
  EXPECT_EQ(none.recomputed_tokens, 0);
  const std::vector<float> reused = FirstLogits(*e, prompt("", "<dog/><cat/>"));
  double last_kl = KlDivergence(plain, reused);
  EXPECT_GT(last_kl, 1e-6);
  for (const char* share : {"0.5", "1"}) {
    const std::string xml = prompt(std::string(" recompute=\"") + share + "\"", "<dog/><cat/>");
    const CompletionResult r = Serve(*e, xml, GreedyIgnoringEos(1));
    // `cat` never saw `dog`: its tokens are the candidates; dog's followed what it attended to.
    EXPECT_EQ(r.recompute_candidates, cat_tokens) << share;
    EXPECT_EQ(r.recomputed_tokens, static_cast<int>(std::lround(std::stod(share) * cat_tokens)));
    EXPECT_EQ(r.cached_tokens, none.cached_tokens - r.recomputed_tokens);
    EXPECT_EQ(r.computed_tokens + r.cached_tokens, r.prompt_tokens);
    const std::vector<float> blended = FirstLogits(*e, xml);
    const double kl = KlDivergence(plain, blended);
    EXPECT_LT(kl, last_kl) << share;
    last_kl = kl;
    if (std::string(share) == "1") {
      EXPECT_EQ(blended, plain);
    }
  }
  // A prompt whose pieces all follow what they attended to has no candidates.
  const CompletionResult exact =
      Serve(*e, prompt(" recompute=\"1\"", "<cat/>"), GreedyIgnoringEos(1));
  EXPECT_EQ(exact.recompute_candidates, 0);
  EXPECT_EQ(exact.recomputed_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, ModularModels, testing::Values("stories", "gemma3"));

// A scaffold member encoded with its peers in view, used without them: it is served from a
// variant that attended only to what the prompt includes, so the prompt equals its full
// recompute (which never sees the missing peer) bit for bit, at either positions.
TEST(Modular, PartialScaffoldDoesNotSeeMissingPeers) {
  const char* schema = R"(<schema name="sc"> Once upon a time, there was a little girl.
  <scaffold>
    <module name="ask"><![CDATA[
Mom asked, "Do you want to go home now?"]]></module>
    <module name="answer"><![CDATA[
"No, Mom! I want to play a little more," said the child.]]></module>
  </scaffold>
</schema>)";
  EngineOptions eo;
  eo.kv_type = KvType::kF32;
  auto e = Make(eo);
  ASSERT_TRUE(e->LoadSchemaText(schema, "sc.xml").ok());
  for (const std::string positions : {"schema", "contiguous"}) {
    for (const std::string body : {"<answer/>", "<ask/><answer/>", "<ask/>"}) {
      const std::string xml = "<prompt schema=\"sc\" positions=\"" + positions + "\">" + body +
                              "<![CDATA[\nThen]]></prompt>";
      auto x = e->ExpandPrompt(Parse(xml));
      ASSERT_TRUE(x.ok());
      const std::vector<float> full = FullFirstLogits(*e, *x, KvType::kF32);
      EXPECT_EQ(FirstLogits(*e, xml), full) << xml;
      EXPECT_EQ(FirstLogits(*e, xml), full) << xml << " (cached)";
    }
  }
}

// One module with a parameter whose scaffold default fills its slot while it is encoded.
constexpr const char* kGiftSchema = R"(<schema name="gift"> Once upon a time, there was a girl named Lily.
  <module name="gift"><![CDATA[
Her mom gave her a]]><parameter name="what" length="6" scaffold=" red ball"/><![CDATA[. She was very happy and played with it all day.]]></module>
</schema>)";

// An engine with f32 K/V (bit-for-bit comparisons) that lays modules out by `positions`, with
// the gift schema loaded.
std::unique_ptr<Engine> GiftEngine(PmlPositions positions) {
  EngineOptions eo;
  eo.kv_type = KvType::kF32;
  eo.module_positions = positions;
  auto e = Make(eo);
  PC_CHECK(e->LoadSchemaText(kGiftSchema, "gift.xml").ok());
  return e;
}

// A parameter's scaffold default stands in its slot while the module is encoded, as in the
// paper: a prompt that leaves the parameter to its default holds exactly the tokens the module
// was encoded with, and equals its full recompute bit for bit; one with an argument differs
// from the encoding only in the slot.
TEST(Modular, ScaffoldDefaultStandsInTheSlotWhileEncoding) {
  for (PmlPositions positions : {PmlPositions::kSchema, PmlPositions::kContiguous}) {
    auto e = GiftEngine(positions);
    const std::string xml = "<prompt schema=\"gift\"><gift/><![CDATA[\nOne day,]]></prompt>";
    auto x = e->ExpandPrompt(Parse(xml));
    ASSERT_TRUE(x.ok());
    const std::vector<float> full = FullFirstLogits(*e, *x, KvType::kF32);
    EXPECT_EQ(FirstLogits(*e, xml), full);
    EXPECT_EQ(FirstLogits(*e, xml), full) << "cached";
  }
}

// An empty argument where the module was encoded with the parameter's scaffold default in the
// slot changes what the text after the slot attended to: that text is a recompute candidate like
// any other changed context, so recomputing every candidate equals the plain prompt bit for bit.
// (Taken as exact before, recompute 1 left a first-token KL of 2.2e-4: the test failed.)
TEST(Modular, EmptyArgumentMakesTheTextAfterTheSlotACandidate) {
  for (PmlPositions positions : {PmlPositions::kSchema, PmlPositions::kContiguous}) {
    auto e = GiftEngine(positions);
    const std::string xml =
        "<prompt schema=\"gift\" recompute=\"1\"><gift what=\"\"/><![CDATA[\nOne day,]]></prompt>";
    auto x = e->ExpandPrompt(Parse(xml));
    ASSERT_TRUE(x.ok());
    const std::vector<float> full = FullFirstLogits(*e, *x, KvType::kF32);
    Serve(*e, xml, GreedyIgnoringEos(1));  // the module encoded
    const CompletionResult r = Serve(*e, xml, GreedyIgnoringEos(1));
    const int after_slot =
        static_cast<int>((*e->GetSchemaLayout("gift"))->modules[0].texts[1].tokens.size());
    EXPECT_EQ(r.recompute_candidates, after_slot);
    EXPECT_EQ(r.recomputed_tokens, after_slot);
    EXPECT_EQ(FirstLogits(*e, xml), full);
  }
}

}  // namespace
}  // namespace promptcache
