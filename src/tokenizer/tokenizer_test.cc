#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace promptcache {
namespace {

const std::string kShared = PC_SHARED_DIR;
const std::string kGpt2 = kShared + "/tokenizers/ggml-vocab-gpt-2.gguf";
const std::string kLlamaSpm = kShared + "/tokenizers/ggml-vocab-llama-spm.gguf";
const std::string kStories = kShared + "/models/stories260K.gguf";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A loaded vocabulary; the GgufFile is kept alive beside its tokenizer.
// The conformance data: strings separated by "\n__ggml_vocab_test__\n" (the file ends with one),
// and one line of ids per string.
struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> ReadCases(const std::string& inp_path, const std::string& out_path) {
  const std::string inp = ReadFile(inp_path);
  const std::string out = ReadFile(out_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    texts.push_back(inp.substr(pos, next - pos));
  }
  EXPECT_EQ(pos, inp.size()) << "text after the last separator";
  std::vector<Case> cases;
  std::istringstream lines(out);
  std::string line;
  for (const std::string& text : texts) {
    EXPECT_TRUE(std::getline(lines, line)) << "fewer id lines than strings";
    Case c{text, {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_FALSE(std::getline(lines, line)) << "more id lines than strings";
  return cases;
}

std::vector<Case> ReadCases(const std::string& vocab) {
  return ReadCases(vocab + ".inp", vocab + ".out");
}

bool IsValidUtf8(std::string_view s) { return utf8::Sanitize(s) == s; }

void ExpectConformance(const std::string& vocab, size_t expected_cases) {
  LoadedTokenizer l = LoadTokenizer(vocab);
  ASSERT_NE(l.tok, nullptr);
  const std::vector<Case> cases = ReadCases(vocab);
  ASSERT_EQ(cases.size(), expected_cases);
  size_t passed = 0;
  for (const Case& c : cases) {
    const std::vector<int32_t> ids = l.tok->Encode(c.text, /*add_bos=*/false);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'";
    passed += ids == c.ids;
  }
  std::printf("%s: %zu/%zu conformance cases pass\n", vocab.c_str(), passed, cases.size());
}

TEST(TokenizerConformance, Gpt2) { ExpectConformance(kGpt2, 46); }
TEST(TokenizerConformance, LlamaSpm) { ExpectConformance(kLlamaSpm, 46); }

// MinTokens is a lower bound on Encode for every vocabulary and input, adversarial ones too
// (each the longest token repeated, runs of spaces, invalid bytes), and it is not trivial: a
// long text is bounded well above a small context. (Mutation tried: dividing by half the
// longest token's bytes makes the repeated-longest-token case fail.)
TEST(TokenizerMinTokens, NeverMoreThanEncodeGives) {
  for (const std::string& vocab : {kGpt2, kLlamaSpm, kStories}) {
    LoadedTokenizer l = LoadTokenizer(vocab);
    ASSERT_NE(l.tok, nullptr);
    const Tokenizer& t = *l.tok;
    std::vector<std::string> texts;
    if (vocab != kStories) {
      for (const Case& c : ReadCases(vocab)) texts.push_back(c.text);
    }
    int32_t longest = 0;
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      if (t.TokenBytes(id).size() > t.TokenBytes(longest).size()) longest = id;
    }
    std::string repeated;
    for (int i = 0; i < 200; ++i) repeated += t.TokenBytes(longest);
    texts.push_back(repeated);
    texts.push_back(std::string(5000, ' '));
    texts.push_back(std::string(3000, '\n'));
    texts.push_back("\xff\xfe\xc3 broken \xe2\x82");
    std::string story;
    for (int i = 0; i < 100; ++i) story += "Once upon a time, there was a little girl named Lily. ";
    texts.push_back(story);
    for (const std::string& text : texts) {
      EXPECT_LE(t.MinTokens(text), t.Encode(text, false).size()) << vocab << ": '" << text << "'";
    }
    // Not trivial: no token of GPT-2's stands for more than 128 bytes, of the others' for more
    // than 32.
    EXPECT_GE(t.MinTokens(story), story.size() / (vocab == kGpt2 ? 128 : 32)) << vocab;
  }
}

TEST(TokenizerConformance, RoundTripBpe) {
  LoadedTokenizer l = LoadTokenizer(kGpt2);
  ASSERT_NE(l.tok, nullptr);
  for (const Case& c : ReadCases(kGpt2)) {
    EXPECT_EQ(l.tok->Decode(l.tok->Encode(c.text, false)), c.text);
  }
}

TEST(TokenizerConformance, RoundTripSpmDropsDummyPrefix) {
  LoadedTokenizer l = LoadTokenizer(kLlamaSpm);
  ASSERT_NE(l.tok, nullptr);
  for (const Case& c : ReadCases(kLlamaSpm)) {
    EXPECT_EQ(l.tok->Decode(l.tok->Encode(c.text, true)), c.text);
  }
}

// A continuation's tokens stand for exactly its bytes: SentencePiece's dummy-prefix space, which
// Encode puts at a text's start, is not there (byte-level BPE has none to drop).
TEST(TokenizerContinuation, NoDummyPrefix) {
  for (const std::string& vocab : {kGpt2, kLlamaSpm, kStories}) {
    LoadedTokenizer l = LoadTokenizer(vocab);
    ASSERT_NE(l.tok, nullptr);
    const Tokenizer& t = *l.tok;
    for (const std::string text : {"world", " A big dog.", "\nnew line", ""}) {
      const std::vector<int32_t> ids = t.EncodeContinuation(text);
      std::string bytes;
      for (int32_t id : ids) bytes += t.TokenBytes(id);
      EXPECT_EQ(bytes, text) << vocab;
      if (vocab == kGpt2) {
        EXPECT_EQ(ids, t.Encode(text, false));
      }
    }
    if (vocab != kGpt2) {
      EXPECT_NE(t.EncodeContinuation("world"), t.Encode("world", false));
    }
  }
}

TEST(Stories260K, ReferenceIdsAndDecode) {
  LoadedTokenizer l = LoadTokenizer(kStories);
  ASSERT_NE(l.tok, nullptr);
  EXPECT_EQ(l.tok->kind(), TokenizerKind::kSpm);
  EXPECT_EQ(l.tok->vocab_size(), 512);
  EXPECT_TRUE(l.tok->adds_bos());  // no add_bos key: llama's default
  EXPECT_EQ(l.tok->bos(), 1);
  EXPECT_EQ(l.tok->eos(), 2);
  EXPECT_EQ(l.tok->Encode("Once upon a time", true), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(l.tok->Encode("Once upon a time", false), (std::vector<int32_t>{403, 407, 261, 378}));
  EXPECT_EQ(l.tok->Decode(kStoriesGreedyIds), kStoriesGreedyText);
  EXPECT_EQ(l.tok->Decode({1, 403}, /*special=*/true), "<s> Once");
  EXPECT_TRUE(l.tok->IsEndOfGeneration(2));
  EXPECT_FALSE(l.tok->IsEndOfGeneration(1));
  EXPECT_FALSE(l.tok->IsEndOfGeneration(403));
  EXPECT_EQ(l.tok->Find("<0x41>"), 3 + 0x41);
  EXPECT_EQ(l.tok->Type(3 + 0x41), TokenType::kByte);
  EXPECT_EQ(l.tok->TokenBytes(3 + 0x41), "A");
}

TEST(Stories260K, ByteFallbackAndStreamDecoding) {
  LoadedTokenizer l = LoadTokenizer(kStories);
  ASSERT_NE(l.tok, nullptr);
  // A 512-token vocabulary has no pieces for emoji or CJK: they become byte tokens.
  const std::string text = "Hi 🦙 你好, Việt! é";
  const std::vector<int32_t> ids = l.tok->Encode(text, true);
  size_t byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += l.tok->Type(id) == TokenType::kByte;
  EXPECT_GE(byte_tokens, 4u + 6u);
  EXPECT_EQ(l.tok->Decode(ids), text);  // the dummy prefix is dropped

  StreamDecoder stream(*l.tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = stream.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "broken UTF-8 after token " << id;
    streamed += chunk;
  }
  streamed += stream.Flush();
  EXPECT_EQ(streamed, " " + text);
}

TEST(StreamDecoder, HoldsBackSplitCharactersAndReplacesInvalidBytes) {
  LoadedTokenizer l = LoadTokenizer(kLlamaSpm);
  ASSERT_NE(l.tok, nullptr);
  auto byte = [&](int b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    return l.tok->Find(name);
  };
  StreamDecoder s(*l.tok);
  EXPECT_EQ(s.Push(byte(0xF0)), "");
  EXPECT_EQ(s.Push(byte(0x9F)), "");
  EXPECT_EQ(s.Push(byte(0xA6)), "");
  EXPECT_EQ(s.Push(byte(0x99)), "🦙");
  EXPECT_EQ(s.Push(byte(0xE4)), "");
  EXPECT_EQ(s.Push(byte(0xBD)), "");
  EXPECT_EQ(s.Push(l.tok->Find("▁the")), "\xEF\xBF\xBD the");  // E4 BD cut short
  EXPECT_EQ(s.Push(byte(0xFF)), "\xEF\xBF\xBD");               // never valid
  EXPECT_EQ(s.Push(byte(0xE4)), "");
  EXPECT_EQ(s.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(s.Flush(), "");
  EXPECT_EQ(s.Push(l.tok->bos()), "");  // control tokens are silent unless asked for
  StreamDecoder special(*l.tok, /*special=*/true);
  EXPECT_EQ(special.Push(l.tok->bos()), "<s>");
}

TEST(SpecialTokens, ParsedOnlyWhenAsked) {
  LoadedTokenizer l = LoadTokenizer(kGpt2);
  ASSERT_NE(l.tok, nullptr);
  const int32_t eot = l.tok->Find("<|endoftext|>");
  ASSERT_EQ(eot, 50256);
  const std::string text = "Hello<|endoftext|> world<|endoftext|>";
  EXPECT_EQ(l.tok->Encode(text, false, /*parse_special=*/true),
            (std::vector<int32_t>{15496, eot, 995, eot}));
  const std::vector<int32_t> plain = l.tok->Encode(text, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_GT(plain.size(), 4u);
  EXPECT_EQ(l.tok->Decode(plain), text);
  EXPECT_EQ(l.tok->Decode(l.tok->Encode(text, false, true)), "Hello world");
  EXPECT_EQ(l.tok->Decode(l.tok->Encode(text, false, true), /*special=*/true), text);
  // A partial special token stays text.
  EXPECT_EQ(l.tok->Encode("<|endoftext|", false, true), l.tok->Encode("<|endoftext|", false));
  EXPECT_TRUE(l.tok->IsEndOfGeneration(eot));
  EXPECT_FALSE(l.tok->IsEndOfGeneration(15496));
  EXPECT_FALSE(l.tok->adds_bos());  // gpt2's default
  EXPECT_EQ(l.tok->Encode("Hello", true), (std::vector<int32_t>{15496}));
}

TEST(SpecialTokens, SpmDummyPrefixAfterSpecialToken) {
  LoadedTokenizer l = LoadTokenizer(kLlamaSpm);
  ASSERT_NE(l.tok, nullptr);
  // As llama.cpp: the text after a special token gets the dummy prefix again.
  EXPECT_EQ(l.tok->Encode("Hello</s>world", true, true), (std::vector<int32_t>{1, 15043, 2, 3186}));
  const std::vector<int32_t> plain = l.tok->Encode("Hello</s>world", true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(l.tok->Decode(plain), "Hello</s>world");
}

// Text from two authors: control tokens only where the trusted author spelled them, plain text
// tokenized across the marks as if they were not there.
TEST(SpecialTokens, OnlyTrustedTextWritesControlTokens) {
  for (const std::string& vocab : {kGpt2, kLlamaSpm}) {
    SCOPED_TRACE(vocab);
    LoadedTokenizer l = LoadTokenizer(vocab);
    ASSERT_NE(l.tok, nullptr);
    const bool spm = l.tok->kind() == TokenizerKind::kSpm;
    const std::string special = spm ? "</s>" : "<|endoftext|>";
    const int32_t id = l.tok->Find(special);
    ASSERT_GE(id, 0);
    ASSERT_EQ(l.tok->Type(id), TokenType::kControl);
    MarkedText text = MarkedText::Trusted("Hello" + special);
    text.AppendUser(" big" + special + " world");
    text.AppendTrusted(special + "!");
    const std::vector<int32_t> ids = l.tok->Encode(text, true);
    // The template's two spellings are tokens; the user's is text (as unparsed text encodes it).
    EXPECT_EQ(std::count(ids.begin(), ids.end(), id), 2);
    // (SentencePiece decodes a dummy-prefix space after each special token.)
    if (!spm) {
      EXPECT_EQ(l.tok->Decode(ids, /*special=*/true), text.text());
    }
    // Read as one trusted text, all three would be.
    const std::vector<int32_t> all = l.tok->Encode(text.text(), true, /*parse_special=*/true);
    EXPECT_EQ(std::count(all.begin(), all.end(), id), 3);
    // A spelling that begins in trusted text and ends in the user's is not trusted either.
    MarkedText straddle = MarkedText::Trusted("a" + special.substr(0, 3));
    straddle.AppendUser(special.substr(3) + " b");
    const std::vector<int32_t> s_ids = l.tok->Encode(straddle, false);
    EXPECT_EQ(std::count(s_ids.begin(), s_ids.end(), id), 0);
    // Without special spellings, marks change nothing: words merge across them.
    MarkedText plain = MarkedText::Trusted("Hel");
    plain.AppendUser("lo wor");
    plain.AppendTrusted("ld");
    EXPECT_EQ(l.tok->Encode(plain, true), l.tok->Encode("Hello world", true, true));
  }
}

// Long inputs must stay linear-ish: a quadratic merge loop would take minutes here.
TEST(TokenizerSpeed, LongWordsWithoutSpaces) {
  LoadedTokenizer bpe = LoadTokenizer(kGpt2);
  LoadedTokenizer spm = LoadTokenizer(kLlamaSpm);
  ASSERT_NE(bpe.tok, nullptr);
  ASSERT_NE(spm.tok, nullptr);
  std::string word;
  for (int i = 0; i < 20000; ++i) word += "abcdefghij"[(i * 7) % 10];
  EXPECT_EQ(bpe.tok->Decode(bpe.tok->Encode(word, false)), word);
  EXPECT_EQ(spm.tok->Decode(spm.tok->Encode(word, false)), word);
  std::string cjk;
  for (int i = 0; i < 5000; ++i) cjk += "你好世界";
  EXPECT_EQ(bpe.tok->Decode(bpe.tok->Encode(cjk, false)), cjk);
  EXPECT_EQ(spm.tok->Decode(spm.tok->Encode(cjk, false)), cjk);
  const std::string spaces(30000, ' ');
  EXPECT_EQ(bpe.tok->Decode(bpe.tok->Encode(spaces, false)), spaces);
}

TEST(Tokenizer, InvalidUtf8RoundTripsThroughBothKinds) {
  LoadedTokenizer bpe = LoadTokenizer(kGpt2);
  LoadedTokenizer spm = LoadTokenizer(kLlamaSpm);
  ASSERT_NE(bpe.tok, nullptr);
  ASSERT_NE(spm.tok, nullptr);
  const std::string bad = std::string("ab\xFF\xC3 cd\xE4\xBD", 9) + "é\x80";
  EXPECT_EQ(bpe.tok->Decode(bpe.tok->Encode(bad, false)), bad);
  EXPECT_EQ(spm.tok->Decode(spm.tok->Encode(bad, false)), bad);
}

std::vector<std::string> Split(const std::string& pre, const std::string& text) {
  auto p = PreTokenizer::Create(pre);
  EXPECT_TRUE(p.ok()) << p.status().message();
  std::vector<std::string_view> words;
  if (p.ok()) (*p)->Split(text, &words);
  return std::vector<std::string>(words.begin(), words.end());
}

// Expected splits computed independently (Python's `regex` module with the HF expressions).
const std::string kSplitText = "Hello WORLD's 12345 don'T\n\n  x\t\ty!!\r\n 3.14 ü你好  \t end  ";

TEST(PreTokenizer, Gpt2) {
  const std::vector<std::string> expected = {
      "Hello", " WORLD", "'s",   " 12345", " don", "'",  "T",      "\n\n ", " x",   "\t", "\t",
      "y",     "!!",     "\r\n", " 3",     ".",    "14", " ü你好", "  \t",  " end", "  "};
  EXPECT_EQ(Split("gpt-2", kSplitText), expected);
  EXPECT_EQ(Split("default", kSplitText), expected);
  EXPECT_EQ(Split("", kSplitText), expected);
  EXPECT_FALSE((*PreTokenizer::Create("gpt-2"))->ignore_merges());
}

TEST(PreTokenizer, Llama3) {
  const std::vector<std::string> expected = {
      "Hello", " WORLD", "'s",     " ", "123", "45", " don", "'T",     "\n\n", " ",    " x",
      "\t",    "\ty",    "!!\r\n", " ", "3",   ".",  "14",   " ü你好", "  \t", " end", "  "};
  EXPECT_EQ(Split("llama-bpe", kSplitText), expected);
  EXPECT_TRUE((*PreTokenizer::Create("llama-bpe"))->ignore_merges());
}

TEST(PreTokenizer, Qwen2) {
  const std::vector<std::string> expected = {
      "Hello", " WORLD", "'s",  " ",      "1", "2", "3", "4", "5", " don",   "'T",   "\n\n", " ",
      " x",    "\t",     "\ty", "!!\r\n", " ", "3", ".", "1", "4", " ü你好", "  \t", " end", "  "};
  EXPECT_EQ(Split("qwen2", kSplitText), expected);
}

TEST(PreTokenizer, SmolLm) {
  const std::vector<std::string> expected = {
      "Hello", " WORLD", "'s", " ",     "1",  "2",      "3",    "4",    "5",
      " don",  "'",      "T",  "\n\n ", " x", "\t",     "\t",   "y",    "!!",
      "\r\n ", "3",      ".",  "1",     "4",  " ü你好", "  \t", " end", "  "};
  EXPECT_EQ(Split("smollm", kSplitText), expected);
}

// Expected splits from Python's `regex` module with OpenAI's o200k expression as its
// tokenizer.json spells it ((?i:...) contractions and all).
TEST(PreTokenizer, Gpt4o) {
  const std::vector<std::string> expected = {
      "Hello", " WORLD's", " ", "123", "45", " don'T", "\n\n",   " ",    " x",   "\t",
      "\ty",   "!!\r\n",   " ", "3",   ".",  "14",     " ü你好", "  \t", " end", "  "};
  EXPECT_EQ(Split("gpt-4o", kSplitText), expected);
  EXPECT_FALSE((*PreTokenizer::Create("gpt-4o"))->ignore_merges());
  EXPECT_FALSE((*PreTokenizer::Create("gpt-4o"))->nfc());
}

// Case changes, slashes, and where llama.cpp's approximation of the letter classes differs:
// "naïveÉcole" splits before the upper-case É, and combining marks (U+0301) stay in their word.
TEST(PreTokenizer, Gpt4oCaseChangesAndMarks) {
  const std::vector<std::string> expected = {"HTTPServer", " get",  "HTTPResponse",
                                             " i",         "Phone", " ÉCOLE",
                                             " naïve",     "École", " e\u0301te\u0301",
                                             " DON'T",     " it'S", " a",
                                             "/b",         "//\n/", "c",
                                             " ",          "123",   "456",
                                             "7"};
  EXPECT_EQ(Split("gpt-4o",
                  "HTTPServer getHTTPResponse iPhone ÉCOLE naïveÉcole e\u0301te\u0301 "
                  "DON'T it'S a/b//\n/c 1234567"),
            expected);
  const std::vector<std::string> titles = {"camel",   "Case",   "Word",  " XMLHttp",
                                           "Request", " ǅemal", " Ωmega"};
  EXPECT_EQ(Split("gpt-4o", "camelCaseWord XMLHttpRequest ǅemal Ωmega"), titles);
}

TEST(PreTokenizer, UnknownNameIsAnError) {
  auto p = PreTokenizer::Create("fancy-new-model");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("fancy-new-model"), std::string::npos);
}

TEST(PreTokenizer, InvalidUtf8BecomesPiecesOfItsOwn) {
  const std::string text = std::string("ab\xFF", 3) + "cd \xC3";
  std::string joined;
  for (const std::string& w : Split("gpt-2", text)) joined += w;
  EXPECT_EQ(joined, text);
}

// ---- Synthetic vocabularies (written with GgufWriter) for error cases and edge behaviour ----

GgufValue Scalar(GgufValueType type, std::variant<int64_t, uint64_t, double, bool, std::string> v) {
  GgufValue g;
  g.type = type;
  g.scalar = std::move(v);
  return g;
}

GgufValue StringArray(const std::vector<std::string>& items) {
  GgufValue g;
  g.type = GgufValueType::kArray;
  g.array_type = GgufValueType::kString;
  for (const std::string& s : items) g.array.push_back(Scalar(GgufValueType::kString, s));
  return g;
}

GgufValue NumberArray(GgufValueType type, const std::vector<double>& items) {
  GgufValue g;
  g.type = GgufValueType::kArray;
  g.array_type = type;
  for (double x : items) {
    g.array.push_back(type == GgufValueType::kF32 ? Scalar(type, x)
                                                  : Scalar(type, static_cast<int64_t>(x)));
  }
  return g;
}

// Writes `w` to a temporary file and builds a tokenizer from it. The file is named after the
// test: ctest runs each test in its own process, in parallel, so a counter alone would collide.
Result<std::unique_ptr<Tokenizer>> FromWriter(const GgufWriter& w,
                                              std::unique_ptr<GgufFile>* keep) {
  static int counter = 0;
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string path = testing::TempDir() + "/tokenizer_test_" + info->test_suite_name() + "_" +
                           info->name() + "_" + std::to_string(counter++) + ".gguf";
  Status st = w.Write(path);
  if (!st.ok()) return st;
  auto file = GgufFile::Open(path);
  std::remove(path.c_str());  // the mapping stays valid
  if (!file.ok()) return file.status();
  *keep = std::move(file).value();
  return Tokenizer::FromGguf(**keep);
}

// GPT-2's vocabulary with tokenizer.ggml.pre "gpt-4o": GPT-2's merges over o200k's split, against
// the ids ik_llama.cpp's llama-tokenize gives for the same file (testdata/README.md): the strings
// of GPT-2's conformance data, and testdata/gpt4o-extra.inp (upper-case contractions, CJK, digit
// runs of 1 to 7, newlines among spaces, accents, emoji, slashes).
TEST(TokenizerConformance, Gpt4oSplitOverGpt2Vocabulary) {
  auto gpt2 = GgufFile::Open(kGpt2);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().message();
  GgufWriter w;
  for (const auto& [key, value] : (*gpt2)->metadata()) w.SetValue(key, value);
  w.SetString("tokenizer.ggml.pre", "gpt-4o");
  std::unique_ptr<GgufFile> keep;
  auto tok = FromWriter(w, &keep);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const std::string data = std::string(PC_SOURCE_DIR) + "/src/tokenizer/testdata/";
  const std::vector<Case> shared = ReadCases(kGpt2 + ".inp", data + "gpt4o-gpt2.out");
  const std::vector<Case> extra = ReadCases(data + "gpt4o-extra.inp", data + "gpt4o-extra.out");
  EXPECT_EQ(shared.size(), 46u);
  EXPECT_GE(extra.size(), 14u);
  for (const std::vector<Case>* cases : {&shared, &extra}) {
    for (const Case& c : *cases) {
      EXPECT_EQ((*tok)->Encode(c.text, /*add_bos=*/false), c.ids) << "text: '" << c.text << "'";
    }
  }
}

// A tiny SPM vocabulary: <unk> <s> </s>, bytes for 'a' and 0xC3 0xA9, and a few pieces.
GgufWriter TinySpm() {
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetValue("tokenizer.ggml.tokens",
             StringArray({"<unk>", "<s>", "</s>", "<0x61>", "<0xC3>", "<0xA9>", "▁", "a", "b", "ab",
                          "▁a", "▁ab", "bb", "<|user|>"}));
  w.SetValue("tokenizer.ggml.scores",
             NumberArray(GgufValueType::kF32, {0, 0, 0, 0, 0, 0, -1, -2, -3, -4, -5, -6, -4, 0}));
  w.SetValue("tokenizer.ggml.token_type",
             NumberArray(GgufValueType::kI32, {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 4}));
  return w;
}

TEST(SyntheticSpm, MergesByScoreWithByteFallback) {
  std::unique_ptr<GgufFile> keep;
  auto tok = FromWriter(TinySpm(), &keep);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const Tokenizer& t = **tok;
  // "▁ab": ab (-4) outscores ▁a (-5), then ▁ + ab -> ▁ab.
  EXPECT_EQ(t.Encode("ab", true), (std::vector<int32_t>{1, 11}));
  // "bbb": equal scores, the leftmost pair merges first.
  EXPECT_EQ(t.Encode("bbb", false), (std::vector<int32_t>{6, 12, 8}));
  // é has no piece: its two bytes.
  EXPECT_EQ(t.Encode("é", false), (std::vector<int32_t>{6, 4, 5}));
  // User-defined tokens are matched even without parse_special, and decode to their text.
  EXPECT_EQ(t.Encode("a<|user|>b", false), (std::vector<int32_t>{10, 13, 6, 8}));
  EXPECT_EQ(t.Decode(t.Encode("a<|user|>b", false)), "a<|user|> b");
}

// The end-of-generation ids (Tokenizer::LoadSpecialIds): EOS, and an eot_token_id that names a
// token of no known spelling. (Mutation: not reading eot_token_id fails this.)
TEST(SyntheticSpm, EotTokenIdEndsGeneration) {
  GgufWriter w = TinySpm();
  w.SetU32("tokenizer.ggml.eot_token_id", 12);  // "bb"
  std::unique_ptr<GgufFile> keep;
  auto tok = FromWriter(w, &keep);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_TRUE((*tok)->IsEndOfGeneration(2));  // </s>
  EXPECT_TRUE((*tok)->IsEndOfGeneration(12));
  EXPECT_FALSE((*tok)->IsEndOfGeneration(11));
}

// Harmony's turn ends: <|return|> and <|call|>; its <|end|>, which closes the analysis message
// before the answer, does not end generation, even named as eot_token_id. Without <|return|> and
// <|call|> (Phi-3), <|end|> does. (Mutation: keeping <|end|> fails this.)
TEST(SyntheticSpm, HarmonyTurnEndsAtReturnAndCallNotEnd) {
  GgufWriter w = TinySpm();
  w.SetValue("tokenizer.ggml.tokens",
             StringArray({"<unk>", "<s>", "</s>", "<0x61>", "<0xC3>", "<0xA9>", "▁", "a", "b", "ab",
                          "▁a", "▁ab", "<|end|>", "<|return|>", "<|call|>"}));
  w.SetValue("tokenizer.ggml.scores", NumberArray(GgufValueType::kF32, std::vector<double>(15)));
  w.SetValue("tokenizer.ggml.token_type",
             NumberArray(GgufValueType::kI32, {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 3, 3, 3}));
  w.SetU32("tokenizer.ggml.eot_token_id", 12);
  std::unique_ptr<GgufFile> keep;
  auto harmony = FromWriter(w, &keep);
  ASSERT_TRUE(harmony.ok()) << harmony.status().message();
  EXPECT_TRUE((*harmony)->IsEndOfGeneration(13));
  EXPECT_TRUE((*harmony)->IsEndOfGeneration(14));
  EXPECT_FALSE((*harmony)->IsEndOfGeneration(12));
  EXPECT_TRUE((*harmony)->IsEndOfGeneration(2));
  w.SetValue("tokenizer.ggml.tokens",
             StringArray({"<unk>", "<s>", "</s>", "<0x61>", "<0xC3>", "<0xA9>", "▁", "a", "b", "ab",
                          "▁a", "▁ab", "<|end|>", "<|user|>", "<|assistant|>"}));
  std::unique_ptr<GgufFile> keep_phi3;
  auto phi3 = FromWriter(w, &keep_phi3);
  ASSERT_TRUE(phi3.ok()) << phi3.status().message();
  EXPECT_TRUE((*phi3)->IsEndOfGeneration(12));
}

TEST(SyntheticSpm, NoSpacePrefixAndNoBos) {
  GgufWriter w = TinySpm();
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  std::unique_ptr<GgufFile> keep;
  auto tok = FromWriter(w, &keep);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ((*tok)->Encode("ab a", true), (std::vector<int32_t>{9, 10}));
  EXPECT_FALSE((*tok)->adds_bos());
}

// Phi-3 GGUFs carry no strip flags; their control tokens swallow the whitespace after them, as
// Phi-3's tokenizer_config.json says (rstrip), and only theirs.
TEST(SyntheticSpm, Phi3ControlTokensStripWhitespaceAfterThem) {
  GgufWriter w = TinySpm();
  w.SetValue("tokenizer.ggml.token_type",
             NumberArray(GgufValueType::kI32, {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 3}));
  std::unique_ptr<GgufFile> keep;
  auto plain = FromWriter(w, &keep);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ((*plain)->Encode("a<|user|>  b", false, true),
            (std::vector<int32_t>{10, 13, 6, 6, 6, 8}));
  w.SetString("general.architecture", "phi3");
  std::unique_ptr<GgufFile> keep_phi3;
  auto phi3 = FromWriter(w, &keep_phi3);
  ASSERT_TRUE(phi3.ok()) << phi3.status().message();
  EXPECT_EQ((*phi3)->Encode("a<|user|>  b", false, true), (std::vector<int32_t>{10, 13, 6, 8}));
  // <s> is one of the exceptions.
  EXPECT_EQ((*phi3)->Encode("a<s> b", false, true), (*plain)->Encode("a<s> b", false, true));
  // The whitespace such a token swallows is not counted by MinTokens (Mutation tried: counting
  // it makes this fail.)
  const std::string swallowed = "<|user|>" + std::string(400, ' ') + "<|user|>";
  EXPECT_LE((*phi3)->MinTokens(swallowed), (*phi3)->Encode(swallowed, false, true).size());
}

TEST(SyntheticBpe, IgnoreMergesAndLongestSpecialMatch) {
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "llama-bpe");
  w.SetValue("tokenizer.ggml.tokens",
             StringArray({"a", "b", "c", "ab", "abc", "<|x|>", "<|x|>y", "y", "<|eot_id|>"}));
  w.SetValue("tokenizer.ggml.token_type",
             NumberArray(GgufValueType::kI32, {1, 1, 1, 1, 1, 3, 3, 1, 3}));
  w.SetValue("tokenizer.ggml.merges", StringArray({"a b"}));
  w.SetU32("tokenizer.ggml.bos_token_id", 5);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  std::unique_ptr<GgufFile> keep;
  auto tok = FromWriter(w, &keep);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.Encode("abc", false), (std::vector<int32_t>{4}));  // whole word in the vocabulary
  EXPECT_EQ(t.Encode("abcab", false), (std::vector<int32_t>{3, 2, 3}));
  EXPECT_EQ(t.Encode("a<|x|>yb", true, true), (std::vector<int32_t>{5, 0, 6, 1}));
  EXPECT_TRUE(t.IsEndOfGeneration(8));

  w.SetString("tokenizer.ggml.pre", "gpt-2");
  auto plain = FromWriter(w, &keep);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ((*plain)->Encode("abc", false), (std::vector<int32_t>{3, 2}));
}

void ExpectError(const GgufWriter& w, const std::string& fragment) {
  std::unique_ptr<GgufFile> keep;
  auto tok = FromWriter(w, &keep);
  ASSERT_FALSE(tok.ok()) << "expected an error mentioning " << fragment;
  EXPECT_NE(tok.status().message().find(fragment), std::string::npos) << tok.status().message();
}

TEST(TokenizerErrors, BadMetadata) {
  {
    GgufWriter w;
    w.SetString("tokenizer.ggml.model", "llama");
    ExpectError(w, "tokenizer.ggml.tokens");
  }
  {
    GgufWriter w = TinySpm();
    w.SetValue("tokenizer.ggml.scores", NumberArray(GgufValueType::kF32, {0, 1, 2}));
    ExpectError(w, "tokenizer.ggml.scores: 3 entries for 14 tokens");
  }
  {
    GgufWriter w = TinySpm();
    w.SetValue("tokenizer.ggml.token_type", NumberArray(GgufValueType::kI32, {1}));
    ExpectError(w, "tokenizer.ggml.token_type");
  }
  {  // More types than tokens is as wrong as fewer (ReadTypes, tokenizer.cc).
    GgufWriter w = TinySpm();
    w.SetValue("tokenizer.ggml.token_type",
               NumberArray(GgufValueType::kI32, std::vector<double>(15, 1)));
    ExpectError(w, "tokenizer.ggml.token_type: 15 entries for 14 tokens");
  }
  {
    GgufWriter w = TinySpm();
    w.SetString("tokenizer.ggml.model", "wordpiece-9000");
    ExpectError(w, "wordpiece-9000");
  }
  {
    GgufWriter w = TinySpm();
    w.SetU32("tokenizer.ggml.bos_token_id", 999);
    ExpectError(w, "tokenizer.ggml.bos_token_id: token id 999 is out of range");
  }
  {
    GgufWriter w = TinySpm();
    w.SetString("tokenizer.ggml.model", "gpt2");
    ExpectError(w, "tokenizer.ggml.merges");
  }
  {
    GgufWriter w = TinySpm();
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", "mystery");
    w.SetValue("tokenizer.ggml.merges", StringArray({"a b"}));
    ExpectError(w, "unknown pre-tokenizer 'mystery'");
  }
  {
    GgufWriter w = TinySpm();
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetValue("tokenizer.ggml.merges", StringArray({"ab"}));
    ExpectError(w, "tokenizer.ggml.merges: entry 0");
  }
  {
    GgufWriter w;
    ExpectError(w, "tokenizer.ggml.model");
  }
}

}  // namespace
}  // namespace promptcache
