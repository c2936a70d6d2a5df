#include "server/cache_response.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gguf/gguf.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

class CacheMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = GgufFile::Open(std::string(PC_SHARED_DIR) + "/models/stories260K.gguf");
    ASSERT_TRUE(file.ok()) << file.status().message();
    file_ = std::move(file).value();
    auto tok = Tokenizer::FromGguf(*file_);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tok_ = std::move(tok).value();
  }
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(CacheMapTest, RunsCoverPromptThenGenerated) {
  CacheMapRequest req;
  req.prompt = tok_->Encode("Once upon a time, there was a little girl named Lily.", true);
  const int n = static_cast<int>(req.prompt.size());
  ASSERT_GT(n, 3);
  CompletionResult r;
  r.prompt_tokens = n;
  r.cached_tokens = 2;
  r.computed_tokens = n - 2;
  r.sources = {{TokenSource::kRam, 1}, {TokenSource::kDisk, 1}, {TokenSource::kComputed, n - 2}};
  r.tokens = {tok_->Encode(" She", false)[0]};
  r.prompt_ms = 2.0 * (n - 2);  // 2 ms a computed token
  r.ttft_ms = r.prompt_ms + 1;
  const ojson m = CacheMapJson(req, r, *tok_);
  ASSERT_EQ(m["runs"].size(), 4u);
  EXPECT_EQ(m["runs"][0], (ojson{{"source", "ram"}, {"start", 0}, {"length", 1}}));
  EXPECT_EQ(m["runs"][1]["source"], "disk");
  EXPECT_EQ(m["runs"][1]["start"], 1);
  EXPECT_EQ(m["runs"][2]["source"], "computed");
  EXPECT_EQ(m["runs"][3], (ojson{{"source", "generated"}, {"start", n}, {"length", 1}}));
  EXPECT_EQ(m["pieces"].size(), size_t(n + 1));
  EXPECT_EQ(m["pieces"][n], tok_->TokenBytes(r.tokens[0]));
  EXPECT_EQ(m["block_size"], 16);
  EXPECT_EQ(m["cached_tokens"], 2);
  // Every prompt token at the measured 2 ms, plus what came before the prompt (1 ms).
  EXPECT_DOUBLE_EQ(m["recompute_estimate_ms"].get<double>(), 2.0 * n + 1);
  EXPECT_FALSE(m.contains("positions"));
}

TEST_F(CacheMapTest, ModularPromptsCarryPositions) {
  CacheMapRequest req;
  req.prompt = {1, 2, 3};
  req.positions = {0, 40, 41};
  CompletionResult r;
  r.prompt_tokens = 3;
  r.sources = {{TokenSource::kModule, 2}, {TokenSource::kComputed, 1}};
  const ojson m = CacheMapJson(req, r, *tok_);
  EXPECT_EQ(m["positions"], (ojson{0, 40, 41}));
  EXPECT_EQ(m["runs"].size(), 2u);  // nothing generated: no generated run
  EXPECT_EQ(m["runs"][0]["source"], "module");
}

TEST(CacheMapFields, AddsToBodiesAndEvents) {
  EXPECT_EQ(AddJsonField(R"({"a":1})", "m", ojson{{"x", 2}}), R"({"a":1,"m":{"x":2}})");
  EXPECT_EQ(AddJsonField("[1]", "m", 1), "[1]");
  EXPECT_EQ(AddJsonField("not json", "m", 1), "not json");
  EXPECT_EQ(AddEventField("data: {\"a\":1}\n\n", "m", 3), "data: {\"a\":1,\"m\":3}\n\n");
  EXPECT_EQ(AddEventField("data: [DONE]\n\n", "m", 3), "data: [DONE]\n\n");
  EXPECT_EQ(AddEventField(": keep-alive\n\n", "m", 3), ": keep-alive\n\n");
}

TEST_F(CacheMapTest, TreeListsParentsFirst) {
  CacheBlockInfo child{"bb", "aa", 16, {2}, false, true, true, 3, 1.5};
  CacheBlockInfo root{"aa", "", 0, {1}, true, false, true, 5, 0.5};
  CacheBlockInfo module{"cc", "", 0, {3}, false, false, false, 0, 2};
  const ojson t = CacheTreeJson({child, root, module}, 16, *tok_);
  ASSERT_EQ(t["data"].size(), 3u);
  EXPECT_EQ(t["data"][0]["key"], "aa");
  EXPECT_TRUE(t["data"][0]["parent"].is_null());
  EXPECT_EQ(t["data"][0]["on_disk"], true);
  EXPECT_EQ(t["data"][1]["key"], "cc");
  EXPECT_EQ(t["data"][1]["kind"], "module");
  EXPECT_EQ(t["data"][2]["parent"], "aa");
  EXPECT_EQ(t["data"][2]["pinned"], true);
  EXPECT_EQ(t["data"][2]["hits"], 3);
  EXPECT_EQ(t["block_size"], 16);
}

// A segment's block (CacheBlockInfo::segment) is a kind of its own, for the page's tree.
TEST_F(CacheMapTest, TreeMarksSegmentBlocks) {
  CacheBlockInfo module{"cc", "", 0, {3}, false, false, false, 0, 2};
  CacheBlockInfo segment = module;
  segment.key = "dd";
  segment.segment = true;
  const ojson t = CacheTreeJson({module, segment}, 16, *tok_);
  ASSERT_EQ(t["data"].size(), 2u);
  EXPECT_EQ(t["data"][0]["kind"], "module");
  EXPECT_EQ(t["data"][0]["segment"], false);
  EXPECT_EQ(t["data"][1]["kind"], "segment");
  EXPECT_EQ(t["data"][1]["segment"], true);
  segment.in_ram = false;  // disk only: its file does not say
  EXPECT_EQ(CacheTreeJson({segment}, 16, *tok_)["data"][0]["kind"], "disk");
}

}  // namespace
}  // namespace promptcache
