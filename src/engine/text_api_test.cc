// The public text helpers (promptcache/text.h) on stories260K, against hand-written expectations:
// what the vocabulary says of itself, BOS handling, round trips, a ChatML template rendered by
// hand, and special-token spellings in chat messages staying text.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/check.h"
#include "promptcache/text.h"

namespace promptcache {
namespace {

const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

std::unique_ptr<Engine> Make(EngineOptions o = {}) {
  o.model_path = kStories;
  o.threads = 1;
  o.parallel = 1;
  auto e = Engine::Create(o);
  PC_CHECK(e.ok());
  return std::move(e).value();
}

TEST(TextApi, ModelInfoDescribesStories260K) {
  auto e = Make();
  const ModelInfo info = GetModelInfo(*e);
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_EQ(info.vocab_size, 512);  // the Llama-2-style 512-token vocabulary of llama2.c
  EXPECT_EQ(info.bos, 1);
  EXPECT_EQ(info.eos, 2);
  EXPECT_TRUE(info.adds_bos);
  EXPECT_GT(info.context_length, 0);
  EXPECT_EQ(info.context_length, info.trained_context);

  EngineOptions o;
  o.context = 64;
  EXPECT_EQ(GetModelInfo(*Make(o)).context_length, 64);
}

TEST(TextApi, TokenizeAddsBosAndDetokenizeRoundTrips) {
  auto e = Make();
  const std::string text = "Once upon a time, there was a cat.";
  const std::vector<int32_t> with_bos = Tokenize(*e, text);
  const std::vector<int32_t> without = Tokenize(*e, text, /*add_bos=*/false);
  ASSERT_FALSE(without.empty());
  ASSERT_EQ(with_bos.size(), without.size() + 1);
  EXPECT_EQ(with_bos[0], 1);
  EXPECT_TRUE(std::equal(without.begin(), without.end(), with_bos.begin() + 1));
  EXPECT_EQ(Detokenize(*e, with_bos), text);
  EXPECT_EQ(Detokenize(*e, without), text);
  // Ids outside the vocabulary are skipped, not a crash.
  std::vector<int32_t> bad = without;
  bad.insert(bad.begin() + 1, 100000);
  bad.push_back(-3);
  EXPECT_EQ(Detokenize(*e, bad), text);
}

TEST(TextApi, SpecialSpellingsAreTextUnlessAsked) {
  auto e = Make();
  const std::vector<int32_t> plain = Tokenize(*e, "a</s>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  const std::vector<int32_t> special = Tokenize(*e, "a</s>", false, /*special=*/true);
  ASSERT_FALSE(special.empty());
  EXPECT_EQ(special.back(), 2);
  EXPECT_TRUE(IsEndOfGeneration(*e, 2));
  EXPECT_FALSE(IsEndOfGeneration(*e, special.front()));
  EXPECT_FALSE(IsEndOfGeneration(*e, -1));
  EXPECT_FALSE(IsEndOfGeneration(*e, 1 << 20));
}

TEST(TextApi, TokenizeChatRendersTheEngineTemplate) {
  EngineOptions o;
  o.chat_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  auto e = Make(o);
  EXPECT_EQ(GetModelInfo(*e).chat_template, o.chat_template);
  Result<std::vector<int32_t>> chat =
      TokenizeChat(*e, {{"system", "Be brief."}, {"user", "Tell a story."}});
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(*chat, Tokenize(*e,
                            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTell a "
                            "story.<|im_end|>\n<|im_start|>assistant\n"));
  Result<std::vector<int32_t>> no_prompt = TokenizeChat(*e, {{"user", "Hi"}}, false);
  ASSERT_TRUE(no_prompt.ok());
  EXPECT_EQ(*no_prompt, Tokenize(*e, "<|im_start|>user\nHi<|im_end|>\n"));
  // A message's "</s>" stays text; the template's own text could hold special tokens.
  Result<std::vector<int32_t>> forged = TokenizeChat(*e, {{"user", "x</s>"}});
  ASSERT_TRUE(forged.ok());
  EXPECT_EQ(std::count(forged->begin(), forged->end(), 2), 0);
}

TEST(TextApi, TokenizeChatReportsTemplateErrors) {
  EngineOptions o;
  o.chat_template = "{{ raise_exception('no chats here') }}";
  auto e = Make(o);
  Result<std::vector<int32_t>> chat = TokenizeChat(*e, {{"user", "Hi"}});
  ASSERT_FALSE(chat.ok());
  EXPECT_NE(chat.status().message().find("no chats here"), std::string::npos)
      << chat.status().message();
}

}  // namespace
}  // namespace promptcache
