// The decode step and its text stream on stories260K's vocabulary: each way a generation ends
// (end-of-generation token, stop string, max_tokens, the context, the caller's cancel and its
// own end), what is kept and emitted at each, and the stop-string hold-back.
//
// Mutations these tests caught: the end-of-generation check also applied to forced tokens
// (ForcedTokensAreKeptEvenWhenTheyEndGeneration), `room` ignored (TheContextEndsWithLength),
// the stop-string check after the length check (StopStringEndsBeforeTheMatch... on its last
// allowed token), on_token called after emit (OnTokenSeesTheTokenBeforeItsText).
#include "sampling/decode_step.h"

#include <gtest/gtest.h>

#include <memory>

#include "gguf/gguf.h"

namespace promptcache {
namespace {

class DecodeStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = GgufFile::Open(std::string(PC_SHARED_DIR) + "/models/stories260K.gguf");
    ASSERT_TRUE(file.ok());
    file_ = std::move(file).value();
    auto tok = Tokenizer::FromGguf(*file_);
    ASSERT_TRUE(tok.ok());
    tok_ = std::move(tok).value();
  }

  DecodeStep Make(int max_tokens, std::vector<std::string> stop = {}, bool ignore_eos = false) {
    SamplingParams greedy;
    greedy.temperature = 0;
    return DecodeStep(*tok_, greedy, {max_tokens, std::move(stop), ignore_eos});
  }

  // Feeds `text`'s tokens until the step ends; returns the end and collects what was emitted.
  DecodeEnd Feed(DecodeStep& d, const std::string& text, std::string* emitted, bool room = true) {
    for (int32_t id : tok_->Encode(text, false)) {
      const DecodeEnd end = d.Take({id, room}, [&](const std::string& piece) {
        EXPECT_FALSE(piece.empty());
        *emitted += piece;
        return true;
      });
      if (end != DecodeEnd::kNone) return end;
    }
    return DecodeEnd::kNone;
  }

  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(DecodeStepTest, FinishReasonsAreOpenAis) {
  EXPECT_STREQ(FinishReason(DecodeEnd::kStop), "stop");
  EXPECT_STREQ(FinishReason(DecodeEnd::kLength), "length");
  EXPECT_STREQ(FinishReason(DecodeEnd::kCancelled), "cancelled");
  EXPECT_STREQ(FinishReason(DecodeEnd::kNone), "");
}

TEST_F(DecodeStepTest, MaxTokensEndsWithLengthAndFlushGivesTheRest) {
  DecodeStep d = Make(4, {"e x"});
  std::string emitted;
  EXPECT_EQ(Feed(d, "Once upon a time there was", &emitted), DecodeEnd::kLength);
  EXPECT_EQ(d.tokens(), tok_->Encode("Once upon a time", false));
  // The last "e" could begin "e x": held back until Flush makes it final.
  EXPECT_EQ(emitted, " Once upon a tim");
  EXPECT_EQ(d.Flush(), "e");
  EXPECT_EQ(d.text(), " Once upon a time");
}

TEST_F(DecodeStepTest, ZeroMaxTokensIsExhaustedBeforeTheFirstStep) {
  EXPECT_TRUE(Make(0).Exhausted());
  EXPECT_FALSE(Make(1).Exhausted());
}

TEST_F(DecodeStepTest, StopStringEndsBeforeTheMatchEvenOnTheLastAllowedToken) {
  const size_t n = tok_->Encode("there was a little girl named", false).size();
  DecodeStep d = Make(static_cast<int>(n), {"girl named"});
  std::string emitted;
  EXPECT_EQ(Feed(d, "there was a little girl named Lily", &emitted), DecodeEnd::kStop);
  EXPECT_EQ(emitted, " there was a little ");
  EXPECT_EQ(d.text(), " there was a little ");
  EXPECT_EQ(d.tokens().size(), n);  // the matched tokens were generated, their text is not
}

TEST_F(DecodeStepTest, EndOfGenerationStopsAndIsNotKept) {
  DecodeStep d = Make(10);
  EXPECT_EQ(d.Take({tok_->Encode("Once", false)[0]}, nullptr), DecodeEnd::kNone);
  EXPECT_EQ(d.Take({tok_->eos()}, nullptr), DecodeEnd::kStop);
  EXPECT_EQ(d.tokens().size(), 1u);
  DecodeStep ignoring = Make(10, {}, /*ignore_eos=*/true);
  EXPECT_EQ(ignoring.Take({tok_->eos()}, nullptr), DecodeEnd::kNone);
  EXPECT_EQ(ignoring.tokens(), std::vector<int32_t>{tok_->eos()});
}

TEST_F(DecodeStepTest, ForcedTokensAreKeptEvenWhenTheyEndGeneration) {
  DecodeStep d = Make(10);
  DecodeStep::Token t{tok_->eos()};
  t.forced = true;
  EXPECT_EQ(d.Take(t, nullptr), DecodeEnd::kNone);
  EXPECT_EQ(d.tokens(), std::vector<int32_t>{tok_->eos()});
}

TEST_F(DecodeStepTest, TheContextEndsWithLength) {
  DecodeStep d = Make(10);
  std::string emitted;
  EXPECT_EQ(Feed(d, "Once upon", &emitted, /*room=*/false), DecodeEnd::kLength);
  EXPECT_EQ(d.tokens().size(), 1u);
}

TEST_F(DecodeStepTest, TheCallersEndAndCancelEndTheStep) {
  DecodeStep d = Make(10);
  DecodeStep::Token t{tok_->Encode("Once", false)[0]};
  t.last = true;
  EXPECT_EQ(d.Take(t, nullptr), DecodeEnd::kStop);
  DecodeStep c = Make(10);
  EXPECT_EQ(c.Take({tok_->Encode("Once", false)[0]}, [](const std::string&) { return false; }),
            DecodeEnd::kCancelled);
  EXPECT_EQ(c.tokens().size(), 1u);  // kept: the cancel came with its text
}

TEST_F(DecodeStepTest, OnTokenSeesTheTokenBeforeItsText) {
  DecodeStep d = Make(10);
  std::vector<std::string> order;
  const int32_t once = tok_->Encode("Once", false)[0];
  d.Take(
      {once},
      [&](const std::string& piece) {
        order.push_back("text" + piece);
        return true;
      },
      [&](int32_t id) { order.push_back("token" + std::to_string(id)); });
  EXPECT_EQ(order, (std::vector<std::string>{"token" + std::to_string(once), "text Once"}));
}

TEST_F(DecodeStepTest, TextStreamHoldsBackPossibleStopPrefixes) {
  TextStream ts(*tok_, {"girl named"});
  // The dummy prefix makes the first piece " there".
  const auto ids = tok_->Encode("there was a little girl named Lily", false);
  std::string out;
  bool stopped = false;
  for (int32_t id : ids) {
    out += ts.Push(id, &stopped);
    if (stopped) break;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, " there was a little ");
}

// special_text (harmony's markers): a control token kept in the text is spelled out; without it,
// it is kept but writes nothing. stories260K's <s> (BOS) stands in for one: it is a control
// token that does not end generation. (Mutation: TextStream ignoring `special` fails this.)
TEST_F(DecodeStepTest, SpecialTextSpellsControlTokens) {
  const int32_t bos = tok_->bos();
  ASSERT_GE(bos, 0);
  ASSERT_FALSE(tok_->IsEndOfGeneration(bos));
  SamplingParams greedy;
  greedy.temperature = 0;
  for (const bool special : {false, true}) {
    DecodeStep d(*tok_, greedy, {8, {}, false, special});
    std::string emitted;
    const auto emit = [&](const std::string& piece) {
      emitted += piece;
      return true;
    };
    const int32_t a = tok_->Encode("a", false)[0];
    EXPECT_EQ(d.Take({a}, emit), DecodeEnd::kNone);
    EXPECT_EQ(d.Take({bos}, emit), DecodeEnd::kNone);
    EXPECT_EQ(d.tokens().size(), 2u);
    EXPECT_EQ(d.text(), tok_->TokenBytes(a) + (special ? std::string("<s>") : ""));
    EXPECT_EQ(emitted, d.text());
  }
}

}  // namespace
}  // namespace promptcache
