// PromptEncoder's segments (docs/server.md "Segments"): a prompt cut at its messages, content
// parts, Anthropic blocks and separators, each segment tokenized as its text alone, so that the
// same document has the same token ids wherever it appears.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "server/anthropic_request.h"
#include "server/prompt_encoder.h"
#include "tokenizer/tokenizer_test_util.h"

namespace promptcache {
namespace {

// A vocabulary of ../shared, by its path there.
LoadedTokenizer LoadVocab(const std::string& relative) {
  return LoadTokenizer(std::string(PC_SHARED_DIR) + "/" + relative);
}

// Documents of examples/rag/stories (text written for stories260K).
const char kDocA[] =
    "Lily was a happy girl who lived in a small house near the sea. She had a red ball and a "
    "little dog named Max. Every morning, Lily and Max ran to the beach to play.";
const char kDocB[] =
    "Tim was a small boy with a big smile. He loved trucks and cars. He had a blue truck that he "
    "took everywhere he went. One day, his truck lost a wheel.";
const char kDocC[] =
    "Sue was a shy girl who liked to read books. She had a book about a brave bird who flew over "
    "the sea. She sat under a tall tree and read her book every day.";
const char kSystem[] = "You answer questions about the stories below, in one short sentence.";

// A message whose content is the given text parts (as the chat parser joins them: a newline).
ApiMessage Parts(std::string role, const std::vector<std::string>& parts) {
  ApiMessage m;
  m.role = std::move(role);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) m.content += '\n';
    const size_t begin = m.content.size();
    m.content += parts[i];
    m.parts.emplace_back(begin, m.content.size());
  }
  return m;
}

ApiMessage Text(std::string role, std::string content) {
  ApiMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

std::vector<int32_t> Range(const std::vector<int32_t>& tokens, const PromptSegment& s) {
  return std::vector<int32_t>(tokens.begin() + s.begin, tokens.begin() + s.end);
}

// The segment whose tokens decode to `text`; empty when none does.
std::vector<int32_t> SegmentOf(const Tokenizer& tok, const BuiltPrompt& p,
                               const std::string& text) {
  for (const PromptSegment& s : p.segments) {
    std::vector<int32_t> ids = Range(p.tokens, s);
    std::string decoded;
    for (int32_t id : ids) decoded += tok.TokenBytes(id);
    if (decoded == text) return ids;
  }
  return {};
}

class SegmentPrompt : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    v_ = LoadVocab(GetParam());
    ASSERT_TRUE(v_.tok);
    encoder_ = std::make_unique<PromptEncoder>(*v_.tok, "");
    encoder_->set_segment_cut({"\n\n---\n\n", 16});
  }
  LoadedTokenizer v_;
  std::unique_ptr<PromptEncoder> encoder_;
};

// Document A as the first part after the system prompt, then as the second part after another
// document: its token ids are the same (mutations tried: EncodeCut not cutting at a segment's
// start, so that it merges with what precedes it, and a segment's range starting one token
// early, each fail this on both vocabularies).
TEST_P(SegmentPrompt, TheSameDocumentHasTheSameTokensAtAnotherPosition) {
  const Tokenizer& tok = *v_.tok;
  auto one = encoder_->FromMessages(
      {Text("system", kSystem), Parts("user", {kDocA, kDocB, "Who has a dog?"})}, true, nullptr,
      SIZE_MAX, /*segments=*/true);
  auto two = encoder_->FromMessages({Text("system", kSystem), Text("user", "Hello there."),
                                     Text("assistant", "Hello! Ask me about the stories."),
                                     Parts("user", {kDocC, kDocA, "What did Lily have?"})},
                                    true, nullptr, SIZE_MAX, /*segments=*/true);
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_TRUE(two.ok()) << two.status().message();
  // The system prompt and the three documents (the questions and greetings are under 16 bytes or
  // not: "What did Lily have?" is 19, so it is one too).
  EXPECT_GE(one->segments.size(), 3u);
  const std::vector<int32_t> a1 = SegmentOf(tok, *one, kDocA);
  const std::vector<int32_t> a2 = SegmentOf(tok, *two, kDocA);
  ASSERT_FALSE(a1.empty());
  EXPECT_EQ(a1, a2);
  // At another position in the prompt.
  const PromptSegment* s1 = nullptr;
  const PromptSegment* s2 = nullptr;
  for (const PromptSegment& s : one->segments) {
    if (Range(one->tokens, s) == a1) s1 = &s;
  }
  for (const PromptSegment& s : two->segments) {
    if (Range(two->tokens, s) == a2) s2 = &s;
  }
  ASSERT_TRUE(s1 != nullptr && s2 != nullptr);
  EXPECT_NE(s1->begin, s2->begin);
  // Segments are ascending and do not overlap.
  for (const BuiltPrompt* p : {&*one, &*two}) {
    int at = 0;
    for (const PromptSegment& s : p->segments) {
      EXPECT_GE(s.begin, at);
      EXPECT_GT(s.end, s.begin);
      at = s.end;
    }
    EXPECT_LE(at, static_cast<int>(p->tokens.size()));
  }
}

// The separator cuts a completion prompt and a message alike, and a document found after a
// separator has the tokens it has after a part boundary.
TEST_P(SegmentPrompt, SeparatorsCut) {
  const Tokenizer& tok = *v_.tok;
  const std::string sep = "\n\n---\n\n";
  const std::string text = std::string(kDocB) + sep + kDocA + sep + kDocC;
  auto prompt = encoder_->FromPromptSegments(text, {}, false);
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(prompt->segments.size(), 3u);
  const std::vector<int32_t> in_prompt = SegmentOf(tok, *prompt, kDocA);
  ASSERT_FALSE(in_prompt.empty());
  auto chat = encoder_->FromMessages({Text("user", std::string(kDocC) + sep + kDocA)}, true,
                                     nullptr, SIZE_MAX, /*segments=*/true);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->segments.size(), 2u);
  EXPECT_EQ(SegmentOf(tok, *chat, kDocA), in_prompt);
  auto parts = encoder_->FromMessages({Parts("user", {kDocC, kDocA})}, true, nullptr, SIZE_MAX,
                                      /*segments=*/true);
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(SegmentOf(tok, *parts, kDocA), in_prompt);
  // Without a separator the prompt is one segment.
  PromptEncoder plain(tok, "");
  plain.set_segment_cut({"", 16});
  auto whole = plain.FromPromptSegments(text, {}, false);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->segments.size(), 1u);
}

// Segments off: the tokens are exactly those of the prompt tokenized at once, as before; and
// with segments on, a prompt with nothing long enough to be a segment is not cut either.
TEST_P(SegmentPrompt, SegmentsOffLeaveTheTokensAsBefore) {
  const Tokenizer& tok = *v_.tok;
  const std::vector<ApiMessage> msgs = {Text("system", kSystem),
                                        Parts("user", {kDocA, kDocB, "Who has a dog?"})};
  auto off = encoder_->FromMessages(msgs, true);
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->segments.empty());
  Result<MarkedText> rendered = encoder_->chat_template().Render(RequestChatInput(msgs, true, {}));
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(off->tokens, tok.Encode(*rendered, true));
  auto on = encoder_->FromMessages(msgs, true, nullptr, SIZE_MAX, /*segments=*/true);
  ASSERT_TRUE(on.ok());
  EXPECT_FALSE(on->segments.empty());
  // What cutting changes is the merges across a segment's ends only: the text is the same.
  EXPECT_EQ(tok.Decode(on->tokens), tok.Decode(off->tokens));
  PromptEncoder strict(tok, "");
  strict.set_segment_cut({"", 100000});
  auto none = strict.FromMessages(msgs, true, nullptr, SIZE_MAX, /*segments=*/true);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->segments.empty());
  EXPECT_EQ(none->tokens, off->tokens);
  auto prompt_off = encoder_->FromPrompt(kDocA, {}, false);
  ASSERT_TRUE(prompt_off.ok());
  EXPECT_EQ(*prompt_off, tok.Encode(kDocA, true));
}

// Anthropic's content blocks and system blocks are segments of their own, and a document in a
// block has the tokens it has in an OpenAI content part.
TEST_P(SegmentPrompt, AnthropicBlocksCut) {
  const Tokenizer& tok = *v_.tok;
  const nlohmann::json body = {
      {"model", "m"},
      {"max_tokens", 8},
      {"system", {{{"type", "text"}, {"text", kSystem}}, {{"type", "text"}, {"text", kDocB}}}},
      {"messages",
       {{{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", kDocC}},
           {{"type", "text"}, {"text", kDocA}},
           {{"type", "text"}, {"text", "Who has a dog?"}}}}}}}};
  AnthropicRequest r;
  std::optional<ApiError> err = ParseMessagesRequest(body.dump(), RequestLimits(), &r);
  ASSERT_FALSE(err.has_value()) << err->message;
  auto p = BuildMessagesPrompt(*encoder_, r, 1, SIZE_MAX, /*segments=*/true);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->segments.size(), 4u);  // two system blocks, two documents (the question: 14 bytes)
  BuiltPrompt built;
  built.tokens = p->tokens;
  built.segments = p->segments;
  auto chat = encoder_->FromMessages({Parts("user", {kDocA, kDocB})}, true, nullptr, SIZE_MAX,
                                     /*segments=*/true);
  ASSERT_TRUE(chat.ok());
  const std::vector<int32_t> a = SegmentOf(tok, built, kDocA);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, SegmentOf(tok, *chat, kDocA));
  EXPECT_FALSE(SegmentOf(tok, built, kDocB).empty());
  // Off: no segments, and the tokens of the whole text at once.
  auto off = BuildMessagesPrompt(*encoder_, r, 1, SIZE_MAX, /*segments=*/false);
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->segments.empty());
}

// A prompt of thousands of documents is cut at its first 512 (each costs a search of the
// rendered text), and a chat whose messages are all alike is cut once per message: each found
// after the one before, never twice at one place.
TEST_P(SegmentPrompt, ManyDocumentsAreBounded) {
  std::string text;
  std::vector<ApiMessage> msgs;
  for (int i = 0; i < 3000; ++i) {
    text += "Document " + std::to_string(i) +
            ": the cat sat on the mat and looked at the sea.\n\n---\n\n";
  }
  for (int i = 0; i < 40; ++i) msgs.push_back(Text(i % 2 ? "assistant" : "user", kDocA));
  auto p = encoder_->FromPromptSegments(text, {}, false);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->segments.size(), 512u);
  auto chat = encoder_->FromMessages(msgs, true, nullptr, SIZE_MAX, /*segments=*/true);
  ASSERT_TRUE(chat.ok());
  ASSERT_EQ(chat->segments.size(), 40u);
  for (const PromptSegment& s : chat->segments) {
    EXPECT_EQ(Range(chat->tokens, s), Range(chat->tokens, chat->segments[0]));
  }
}

// stories260K (SentencePiece, the model the server tests run) and GPT-2's byte-level BPE.
INSTANTIATE_TEST_SUITE_P(Vocabularies, SegmentPrompt,
                         ::testing::Values("models/stories260K.gguf",
                                           "tokenizers/ggml-vocab-gpt-2.gguf"));

// On byte-level BPE (no dummy prefix) a segment's ids are exactly the tokenizer's ids of its
// text alone: the reference is Tokenizer::Encode, not the encoder's cutting.
TEST(SegmentPromptBpe, ASegmentIsItsTextTokenizedAlone) {
  LoadedTokenizer v = LoadVocab("tokenizers/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(v.tok);
  PromptEncoder encoder(*v.tok, "");
  encoder.set_segment_cut({"", 16});
  auto p = encoder.FromMessages({Text("system", kSystem), Parts("user", {kDocB, kDocA})}, true,
                                nullptr, SIZE_MAX, /*segments=*/true);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(SegmentOf(*v.tok, *p, kDocA), v.tok->Encode(kDocA, false));
  EXPECT_EQ(SegmentOf(*v.tok, *p, kDocB), v.tok->Encode(kDocB, false));
}

// EncodeCut without cuts is Encode; with cuts the pieces' texts are unchanged.
TEST(SegmentPromptBpe, EncodeCutWithoutCutsIsEncode) {
  LoadedTokenizer v = LoadVocab("models/stories260K.gguf");
  ASSERT_TRUE(v.tok);
  const std::string text = std::string(kDocA) + " " + kDocB;
  std::vector<int> at;
  EXPECT_EQ(v.tok->EncodeCut(text, true, false, nullptr, {}, &at), v.tok->Encode(text, true));
  EXPECT_TRUE(at.empty());
  const size_t cut = std::string(kDocA).size() + 1;
  const std::vector<int32_t> cut_ids = v.tok->EncodeCut(text, true, false, nullptr, {cut}, &at);
  ASSERT_EQ(at.size(), 1u);
  EXPECT_EQ(v.tok->Decode(cut_ids), text);
  EXPECT_EQ(v.tok->Decode(std::vector<int32_t>(cut_ids.begin() + at[0], cut_ids.end())), kDocB);
}

}  // namespace
}  // namespace promptcache
