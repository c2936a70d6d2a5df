#include "tokenizer/hf_vocab.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace promptcache {
namespace {

// A byte-level vocabulary in Qwen2's shape: a, b, ab, Ġ, Ġa, and two added tokens.
constexpr const char* kQwenLike = R"({
  "added_tokens": [
    {"id": 5, "content": "<|im_end|>", "special": true, "normalized": false},
    {"id": 6, "content": "<think>", "special": false, "normalized": false},
    {"id": 7, "content": "<|fim_pad|>", "special": false, "normalized": false}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated"},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "ByteLevel"},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġa": 4},
            "merges": [["a", "b"], ["Ġ", "a"]]}
})";

constexpr const char* kQwenConfig = R"({
  "add_bos_token": false, "bos_token": null, "eos_token": "<|im_end|>",
  "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"
})";

// SentencePiece-style (Llama 2's shape): byte fallback, a dummy prefix, scores from merges.
constexpr const char* kSpmLike = R"({
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true},
    {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": false, "rstrip": true, "lstrip": true},
    {"id": 9, "content": "<|end|>", "special": true, "rstrip": true}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
  "decoder": {"type": "Sequence", "decoders": []},
  "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
            "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x41>": 3, "▁": 4, "a": 5, "b": 6, "ab": 7, "▁ab": 8},
            "merges": ["a b", "▁ ab"]}
})";

std::unique_ptr<Tokenizer> Load(const HfVocab& v, std::unique_ptr<GgufFile>* keep) {
  GgufWriter w;
  WriteHfVocab(v, &w);
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string path = testing::TempDir() + "/hf_vocab_test_" + info->name() + ".gguf";
  EXPECT_TRUE(w.Write(path).ok());
  auto file = GgufFile::Open(path);
  std::remove(path.c_str());
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return nullptr;
  *keep = std::move(file).value();
  auto tok = Tokenizer::FromGguf(**keep);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(HfVocab, ByteLevelQwenShape) {
  auto v = ParseHfTokenizer(kQwenLike, kQwenConfig);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "qwen2");
  EXPECT_EQ(v->tokens.size(), 8u);
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b", "Ġ a"}));
  EXPECT_EQ(v->types[5], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(v->types[6], static_cast<int32_t>(TokenType::kUserDefined));
  // Not special in tokenizer.json, but spelled like a control token: llama.cpp's rule.
  EXPECT_EQ(v->types[7], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(v->eos, 5);
  EXPECT_EQ(v->bos, -1);
  EXPECT_EQ(v->add_bos, std::optional<bool>(false));
  EXPECT_FALSE(v->chat_template.empty());
  EXPECT_TRUE(v->notes.empty());

  std::unique_ptr<GgufFile> keep;
  auto tok = Load(*v, &keep);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("ab a<think>", true), (std::vector<int32_t>{2, 4, 6}));
  EXPECT_EQ(tok->Encode("ab<|im_end|>", true, /*parse_special=*/true),
            (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(keep->Find("tokenizer.chat_template")->is_string(), true);
  // qwen2 normalizes to NFC first: "a" + U+0301 is "á" (whose bytes this vocabulary lacks).
  EXPECT_EQ(tok->Encode("ba\xCC\x81", false), tok->Encode("b\xC3\xA1", false));
  EXPECT_NE(tok->Encode("ba\xCC\x81", false), tok->Encode("ba", false));
}

TEST(HfVocab, SentencePieceShapeWithStripAttributes) {
  auto v = ParseHfTokenizer(kSpmLike, R"({"add_bos_token": true, "bos_token": "<s>",
                                          "unk_token": "<unk>", "eos_token": "</s>"})");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->model, "llama");
  EXPECT_EQ(v->tokens.size(), 10u);
  EXPECT_EQ(v->tokens[9], "<|end|>");
  EXPECT_EQ(v->types[0], static_cast<int32_t>(TokenType::kUnknown));
  EXPECT_EQ(v->types[1], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(v->types[2], static_cast<int32_t>(TokenType::kUserDefined));
  EXPECT_EQ(v->types[3], static_cast<int32_t>(TokenType::kByte));
  // "ab" (first merge) outranks "▁ab" (second); pieces no merge makes rank last.
  EXPECT_GT(v->scores[7], v->scores[8]);
  EXPECT_GT(v->scores[8], v->scores[5]);
  EXPECT_EQ(v->add_space_prefix, std::optional<bool>(true));
  EXPECT_EQ(v->add_bos, std::optional<bool>(true));
  EXPECT_EQ(v->rstrip, (std::vector<int32_t>{2, 9}));
  EXPECT_EQ(v->lstrip, (std::vector<int32_t>{2}));

  std::unique_ptr<GgufFile> keep;
  auto tok = Load(*v, &keep);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("ab", true), (std::vector<int32_t>{1, 8}));
  // rstrip: the spaces after <|end|> and </s> go with them; the next text gets its prefix again.
  EXPECT_EQ(tok->Encode("ab<|end|>   ab</s> \n ab", false, true),
            (std::vector<int32_t>{8, 9, 8, 2, 8}));
  // lstrip: so do the spaces before </s> (U+3000 is whitespace too).
  EXPECT_EQ(tok->Encode("ab \xE3\x80\x80 </s>", false), (std::vector<int32_t>{8, 2}));
  EXPECT_EQ(tok->Encode("ab<|end|>  ", false, true), (std::vector<int32_t>{8, 9}));
  // Without parse_special <|end|> is text (A is a byte token, the rest falls back to <unk>).
  const std::vector<int32_t> plain = tok->Encode("<|end|>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 9), 0);
}

TEST(HfVocab, PreTokenizerByNameAndUnknownOnes) {
  std::string gpt2 = kQwenLike;
  const size_t pre = gpt2.find("\"pre_tokenizer\"");
  const size_t post = gpt2.find("\"post_processor\"");
  gpt2.replace(pre, post - pre, R"("pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, )");
  auto v = ParseHfTokenizer(gpt2, "");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->pre, "gpt-2");
  // The NFC normalizer only goes with qwen2.
  ASSERT_EQ(v->notes.size(), 1u);
  EXPECT_NE(v->notes[0].find("NFC"), std::string::npos);

  // o200k's split, as GPT-4o's and gpt-oss's tokenizer.json spell it.
  std::string o200k = kQwenLike;
  const size_t regex = o200k.find("\"Regex\": \"") + 10;
  o200k.replace(regex, o200k.find("\"}", regex) - regex,
                R"([^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*)"
                R"([\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
                R"([^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+)"
                R"([\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}|)"
                R"( ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)");
  auto gpt4o = ParseHfTokenizer(o200k, "");
  ASSERT_TRUE(gpt4o.ok()) << gpt4o.status().message();
  EXPECT_EQ(gpt4o->pre, "gpt-4o");

  std::string odd = kQwenLike;
  odd.replace(odd.find("\\\\p{N}|"), 7, "\\\\p{N}{1,2}|");
  auto unknown = ParseHfTokenizer(odd, "");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("--pre"), std::string::npos);
  auto named = ParseHfTokenizer(odd, "", {.pre = "llama-bpe"});
  ASSERT_TRUE(named.ok()) << named.status().message();
  EXPECT_EQ(named->pre, "llama-bpe");
}

TEST(HfVocab, BadInputIsAnErrorNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "not valid JSON"},
      {"{", "not valid JSON"},
      {"[1]", "expected a JSON object"},
      {"{}", "model: expected an object"},
      {R"({"model": {"type": "WordPiece"}})", "model.type 'WordPiece'"},
      {R"({"model": {"type": "BPE", "byte_fallback": true}})", "model.vocab"},
      {R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": "x"}}})",
       "model.vocab['a']"},
      {R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 99999999999}}})",
       "out of range"},
      {R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0, "b": 0}}})",
       "id 0 is given to both"},
      {R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}}})", "model.merges"},
      {R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": [3]}})",
       "model.merges[0]"},
      {R"({"added_tokens": {}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})",
       "added_tokens"},
      {R"({"added_tokens": [{"id": -2, "content": "x"}], "model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})",
       "added_tokens[0].id"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "neither byte-level"},
  };
  for (const auto& [json, fragment] : cases) {
    auto v = ParseHfTokenizer(json, "");
    ASSERT_FALSE(v.ok()) << json;
    EXPECT_NE(v.status().message().find(fragment), std::string::npos)
        << json << " -> " << v.status().message();
  }
  auto config = ParseHfTokenizer(kQwenLike, "{\"chat_template\": 3}");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("tokenizer_config.json: chat_template"),
            std::string::npos);
}

TEST(Utf8, NfcComposesValidStretchesOnly) {
  EXPECT_EQ(utf8::Nfc("cafe\xCC\x81"), "caf\xC3\xA9");
  EXPECT_EQ(utf8::Nfc("plain ascii"), "plain ascii");
  const std::string bad = std::string("e\xCC\x81\xFF", 4) + "A\xCC\x8A";
  EXPECT_EQ(utf8::Nfc(bad), std::string("\xC3\xA9\xFF", 3) + "\xC3\x85");
  EXPECT_TRUE(utf8::IsWhiteSpace(0x3000));
  EXPECT_FALSE(utf8::IsWhiteSpace(0x200B));
}

}  // namespace
}  // namespace promptcache
