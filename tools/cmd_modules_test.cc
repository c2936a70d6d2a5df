// The modular prompt commands as a user runs them (schema load/show, prompt, eval-modules) on
// stories260K and examples/story: outputs, the --stats JSON line, the disk tier across
// processes, and bad input ending in one clear error line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

const std::string kBin = std::string(PC_BINARY_DIR) + "/promptcache";
const std::string kModel = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kStory = std::string(PC_SOURCE_DIR) + "/examples/story";

struct Output {
  int code;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Output RunCli(const std::string& args) {
  const fs::path dir = fs::temp_directory_path();
  const std::string out = (dir / ("pc_mod_out_" + std::to_string(getpid()))).string();
  const std::string err = (dir / ("pc_mod_err_" + std::to_string(getpid()))).string();
  const std::string cmd = "timeout 60 " + kBin + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  Output o{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
  fs::remove(out);
  fs::remove(err);
  return o;
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// Exit code 1 and a last stderr line "promptcache: error: ..." that mentions `needle`.
void ExpectError(const std::string& args, const std::string& needle) {
  const Output o = RunCli(args);
  EXPECT_EQ(o.code, 1) << args << "\n" << o.err;
  const std::string last = LastLine(o.err);
  EXPECT_EQ(last.rfind("promptcache: error: ", 0), 0u) << args << "\n" << o.err;
  EXPECT_NE(last.find(needle), std::string::npos) << args << "\n" << o.err;
  EXPECT_TRUE(o.out.empty()) << args << "\n" << o.out;
}

class ModulesCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pc_mod_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(ModulesCli, SchemaShowPrintsTheLayoutWithTheDefaultTokenizer) {
  const Output o = RunCli("schema show " + kStory + "/story.xml");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("schema 'story'"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("total length 408 positions"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("answer"), std::string::npos);
  EXPECT_NE(o.out.find("stories260K.gguf"), std::string::npos);
}

TEST_F(ModulesCli, LoadThenPromptFromTheDiskTier) {
  const std::string cache = (dir_ / "cache").string();
  const Output load =
      RunCli("schema load " + kStory + "/story.xml -m " + kModel + " -t 2 --cache-dir " + cache);
  ASSERT_EQ(load.code, 0) << load.err;
  EXPECT_NE(load.out.find("encoded 593 tokens"), std::string::npos) << load.out;
  EXPECT_NE(load.out.find("persisted in"), std::string::npos) << load.out;
  EXPECT_TRUE(fs::exists(fs::path(cache) / "schemas" / "story" / "schema.xml"));

  const std::string args = "prompt -m " + kModel + " -t 2 --schema " + kStory +
                           "/story.xml --cache-dir " + cache + " " + kStory +
                           "/lily.xml -n 12 --temp 0 --stats";
  const Output p = RunCli(args);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_GT(p.out.size(), 10u);
  const auto j = nlohmann::json::parse(LastLine(p.err));
  EXPECT_EQ(j["reused_tokens"], 236);
  EXPECT_EQ(j["computed_tokens"], 10);
  EXPECT_EQ(j["encoded_tokens"], 0);
  EXPECT_GT(j["ttft_ms"].get<double>(), 0);
  EXPECT_EQ(j["generated_tokens"], 12);

  // The full recompute: nothing reused, every token computed.
  const Output b = RunCli(args + " --baseline");
  ASSERT_EQ(b.code, 0) << b.err;
  const auto jb = nlohmann::json::parse(LastLine(b.err));
  EXPECT_EQ(jb["reused_tokens"], 0);
  EXPECT_EQ(jb["computed_tokens"], 246);
  EXPECT_EQ(jb["mode"], "baseline");
  const Output g = RunCli(args + " --baseline-gapped");
  ASSERT_EQ(g.code, 0) << g.err;
  const auto jg = nlohmann::json::parse(LastLine(g.err));
  EXPECT_EQ(jg["computed_tokens"], 246);
  EXPECT_EQ(jg["mode"], "baseline-gapped");
  // lily.xml leaves modules out, so the two baselines see different positions: both are run
  // (their continuations are compared in the engine tests).
  EXPECT_NE(RunCli(args + " --baseline --baseline-gapped").code, 0);

  // Without the cache folder, the first prompt encodes its modules and counts them as computed.
  const Output cold = RunCli("prompt -m " + kModel + " -t 2 --schema " + kStory + "/story.xml " +
                             kStory + "/lily.xml " + kStory + "/lily.xml -n 4 --temp 0 --stats");
  ASSERT_EQ(cold.code, 0) << cold.err;
  std::istringstream lines(cold.err);
  std::vector<nlohmann::json> objects;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') objects.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(objects.size(), 3u);  // two prompts and the summary
  EXPECT_EQ(objects[0]["reused_tokens"], 0);
  EXPECT_EQ(objects[0]["computed_tokens"], 246);
  EXPECT_EQ(objects[1]["reused_tokens"], 236);
  EXPECT_EQ(objects[2]["prompts"], 2);
}

// The command's output against the baseline it computes: a prompt whose modules each follow what
// they attended to (the always text and one module, at contiguous positions) continues exactly
// as the plain prompt does; one that combines modules at the schema's positions need not.
TEST_F(ModulesCli, PromptOutputEqualsItsBaselineWhereReuseIsExact) {
  const std::string schema =
      Write("pets.xml", R"(<schema name="pets"> Once upon a time, there was a girl named Lily.
  <module name="dog"><![CDATA[
She had a dog named Max. Max liked to run and jump in the park with his ball.]]></module>
  <module name="cat"><![CDATA[
She also had a cat. The cat liked to sleep in the sun all day long.]]></module>
</schema>)");
  const std::string base =
      "prompt -m " + kModel + " -t 2 --schema " + schema + " -n 24 --temp 0 --ignore-eos ";
  const std::string one = Write("one.xml",
                                "<prompt schema=\"pets\" positions=\"contiguous\"><cat/>"
                                "<![CDATA[\nOne day,]]></prompt>");
  const Output modules = RunCli(base + one);
  const Output plain = RunCli(base + one + " --baseline");
  ASSERT_EQ(modules.code, 0) << modules.err;
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_GT(modules.out.size(), 20u);
  EXPECT_EQ(modules.out, plain.out);
}

TEST_F(ModulesCli, EvalModulesReportsEveryPrompt) {
  const Output o = RunCli("eval-modules -m " + kModel + " -t 2 --schema " + kStory +
                          "/story.xml --prompts " + kStory + "/prompts.txt -n 8 --json");
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompts"], 5);
  ASSERT_EQ(j["per_prompt"].size(), 5u);
  // Against the contiguous prompt (the headline) and the gapped recompute.
  for (const auto& row : j["per_prompt"]) {
    for (const auto& r : {row, row["gapped"]}) {
      EXPECT_EQ(r["steps"], 8);
      EXPECT_GE(r["top1_agreement"].get<double>(), 0.0);
      EXPECT_LE(r["top1_agreement"].get<double>(), 1.0);
      EXPECT_GE(r["first_token_kl"].get<double>(), 0.0);
      // The headline counts only the steps whose top two are clearly apart: a subset.
      EXPECT_LE(r["margin_steps"].get<int>(), 8);
      EXPECT_LE(r["margin_agreements"].get<int>(), r["margin_steps"].get<int>());
      EXPECT_GE(r["margin_agreements"].get<int>(),
                r["margin_steps"].get<int>() -
                    (8 - int(std::lround(8 * r["top1_agreement"].get<double>()))));
    }
    // The story prompts leave modules out: the gaps change the contiguous baseline's logits.
    EXPECT_NE(row["first_token_kl"].get<double>(), row["gapped"]["first_token_kl"].get<double>());
  }
  EXPECT_TRUE(j["gapped"].contains("mean_first_token_kl"));
  EXPECT_TRUE(j.contains("margin_top1_agreement"));
}

TEST_F(ModulesCli, BadInputIsOneErrorLine) {
  const std::string base = "prompt -m " + kModel + " --schema " + kStory + "/story.xml ";
  ExpectError(base + Write("two.xml", "<prompt schema=\"story\"><lily/><tim/></prompt>"),
              "two.xml:1:31: prompt for schema 'story': modules 'lily' and 'tim' are members of "
              "one union");
  ExpectError(base + Write("unknown.xml", "<prompt schema=\"story\"><dragon/></prompt>"),
              "unknown module 'dragon'");
  ExpectError(base + Write("other.xml", "<prompt schema=\"support\"/>"),
              "unknown schema 'support' (loaded: story)");
  ExpectError(base + Write("long.xml",
                           "<prompt schema=\"story\"><find thing=\" a very big and very shiny red "
                           "box\"/></prompt>"),
              "longer than its length 10");
  ExpectError(base + Write("broken.xml", "<prompt schema=\"story\"><lily>"), "malformed XML");
  ExpectError(base + (dir_ / "missing.xml").string(), "cannot open prompt file");
  ExpectError("schema show " + Write("dup.xml",
                                     "<schema name=\"s\">\n  <module name=\"a\">x</module>\n  "
                                     "<module name=\"a\">y</module>\n</schema>"),
              "dup.xml:3:3: schema 's': duplicate module name 'a'");
  ExpectError("schema load " +
                  Write("src.xml",
                        "<schema name=\"s\"><module name=\"a\" src=\"../x.txt\"/>"
                        "</schema>") +
                  " -m " + kModel,
              "leaves the schema's folder");
  ExpectError("schema load " + kStory + "/story.xml -m " + kModel + " -c 128",
              "exceeds the model's context of 128");
  ExpectError("prompt -m " + kModel + " --schema " + kStory + "/story.xml " + kStory +
                  "/lily.xml --baseline --prefix-only",
              "excludes");
  ExpectError("eval-modules -m " + kModel + " --schema " + kStory + "/story.xml --prompts " +
                  Write("empty.txt", "# nothing\n"),
              "names no prompt files");
}

// eval-segments on the scaled RAG workload: every setting reported, fidelity scored only where a
// segment was reused, and at recompute 1 (f32 K/V) the reused requests equal their full
// recompute. Mutation tried: the fidelity scored on every request (the `segment_hits == 0`
// skip removed): scored_requests then equals requests, which the first request's misses forbid.
TEST_F(ModulesCli, EvalSegmentsReportsEachSetting) {
  const std::string rag = std::string(PC_SOURCE_DIR) + "/examples/rag/stories";
  const Output o = RunCli("eval-segments -m " + kModel + " -t 1 --kv-type f32 --rag " + rag +
                          " --requests 6 -n 4 --recompute 0,1 --encoding in-context --json");
  ASSERT_EQ(o.code, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["settings"].size(), 2u);
  for (const nlohmann::json& s : j["settings"]) {
    EXPECT_EQ(s["requests"].get<int>(), 6);
    EXPECT_GT(s["segment_hits"].get<int>(), 0);
    EXPECT_LE(s["segment_hits"].get<int>(), s["segment_lookups"].get<int>());
    // The first request has nothing cached: never scored.
    EXPECT_GT(s["scored_requests"].get<int>(), 0);
    EXPECT_LT(s["scored_requests"].get<int>(), 6);
    EXPECT_LE(s["margin_agreements"].get<int>(), s["margin_steps"].get<int>());
    EXPECT_LE(s["margin_steps"].get<int>(), 4 * s["scored_requests"].get<int>());
  }
  const nlohmann::json& all = j["settings"][1];
  EXPECT_EQ(all["recomputed_tokens"].get<int>(), all["recompute_candidates"].get<int>());
  EXPECT_EQ(all["margin_top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(all["mean_first_token_kl"].get<double>(), 1e-9);
  ExpectError("eval-segments -m " + kModel, "give one of --rag DIR and --synthetic");
  ExpectError("eval-segments -m " + kModel + " --rag " + rag + " --recompute 2",
              "--recompute shares must be from 0 to 1");
  ExpectError("eval-segments -m " + kModel + " --rag " + dir_.string(), "cannot open file");
}

}  // namespace
}  // namespace promptcache
