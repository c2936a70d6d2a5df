// The promptcache binary as a user runs it: outputs on stdout, and for every kind of bad input
// one clear line on stderr and a non-zero exit, never a crash or a hang.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

const std::string kBin = std::string(PC_BINARY_DIR) + "/promptcache";
const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

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
  const std::string out = (dir / ("pc_cli_out_" + std::to_string(getpid()))).string();
  const std::string err = (dir / ("pc_cli_err_" + std::to_string(getpid()))).string();
  const std::string cmd = "timeout 60 " + kBin + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  Output o{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
  fs::remove(out);
  fs::remove(err);
  return o;
}

// A bad-input run: exit code 1, and stderr ends with exactly one error line that mentions
// `needle` (progress logs may come before it).
void ExpectOneLineError(const std::string& args, const std::string& needle) {
  const Output o = RunCli(args);
  EXPECT_EQ(o.code, 1) << args << "\n" << o.err;
  ASSERT_FALSE(o.err.empty()) << args;
  EXPECT_EQ(o.err.back(), '\n');
  const size_t start = o.err.rfind('\n', o.err.size() - 2);
  const std::string last = o.err.substr(start == std::string::npos ? 0 : start + 1);
  EXPECT_EQ(last.rfind("promptcache: error: ", 0), 0u) << args << "\n" << o.err;
  EXPECT_NE(last.find(needle), std::string::npos) << args << "\n" << o.err;
  size_t errors = 0;
  for (size_t p = 0; (p = o.err.find("error", p)) != std::string::npos; ++p) ++errors;
  EXPECT_EQ(errors, 1u) << args << "\n" << o.err;
  EXPECT_TRUE(o.out.empty()) << args;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pc_cli_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string WriteFile(const std::string& name, const std::string& data) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << data;
    return p;
  }

  // A copy of stories260K with one metadata value or one tensor's type changed.
  std::string Variant(const std::string& name, const std::function<void(GgufWriter&)>& edit,
                      GgmlType embd_type = GgmlType::kF32, const std::string& source = kStories) {
    auto src = GgufFile::Open(source);
    PC_CHECK(src.ok());
    GgufWriter w;
    for (const auto& [k, v] : (*src)->metadata()) w.SetValue(k, v);
    for (const GgufTensorInfo& t : (*src)->tensors()) {
      const bool retype = t.name == "token_embd.weight" && embd_type != GgmlType::kF32;
      const GgmlType type = retype ? embd_type : t.type;
      const GgufTensorInfo* info = &t;
      w.AddTensor(t.name, t.dims, type, [info, retype](uint8_t* dst, size_t n) {
        if (retype) {
          std::memset(dst, 0, n);
        } else {
          std::memcpy(dst, info->data, n);
        }
      });
    }
    edit(w);
    const std::string p = (dir_ / name).string();
    const Status st = w.Write(p);
    EXPECT_TRUE(st.ok()) << st.message();
    sources_.push_back(std::move(src).value());
    return p;
  }

  fs::path dir_;
  std::vector<std::unique_ptr<GgufFile>> sources_;
};

TEST_F(CliTest, RunPrintsOnlyTheContinuation) {
  const Output o = RunCli("run -m " + kStories + " -p 'Once upon a time' -n 12 --temp 0");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, ", there was a little girl named Lily. She\n");
  EXPECT_NE(o.err.find("generation: 12 tokens"), std::string::npos) << o.err;
  const Output nc = RunCli("run -m " + kStories + " -p 'Once upon a time' -n 12 --temp 0 --no-kv-cache");
  EXPECT_EQ(nc.out, o.out);
}

TEST_F(CliTest, TokenizePrintsIds) {
  EXPECT_EQ(RunCli("tokenize -m " + kStories + " 'Once upon a time'").out, "1 403 407 261 378\n");
  EXPECT_EQ(RunCli("tokenize -m " + kStories + " --no-bos 'Once upon a time'").out,
            "403 407 261 378\n");
}

TEST_F(CliTest, InspectAndBenchJson) {
  const Output i = RunCli("inspect -m " + kStories);
  EXPECT_EQ(i.code, 0);
  EXPECT_NE(i.out.find("KV cache:      640 bytes/token in F16"), std::string::npos) << i.out;
  const Output b = RunCli("bench -m " + kStories + " -p 32 -n 8 -r 1 --json");
  EXPECT_EQ(b.code, 0) << b.err;
  const std::string last = b.out.substr(b.out.rfind('{'));
  for (const char* key : {"\"prompt_tps\"", "\"gen_tps\"", "\"peak_rss_bytes\"", "\"kv_bytes_per_token\":640"}) {
    EXPECT_NE(last.find(key), std::string::npos) << key << " in " << last;
  }
  // Several sequences sharing the depth tokens, decoded as one batch per step.
  const Output s = RunCli("bench -m " + kStories + " -d 40 -p 8 -n 4 -s 3 -r 1 --json");
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("generation (3xtg4)"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("\"sequences\":3"), std::string::npos) << s.out;
}

TEST_F(CliTest, BadFilesGiveOneLineErrors) {
  ExpectOneLineError("run -m /nonexistent.gguf -p hi", "/nonexistent.gguf");
  ExpectOneLineError("run -m " + WriteFile("text.gguf", "hello, not a model\n") + " -p hi",
                     "not a GGUF file");
  const std::string model = Slurp(kStories);
  for (size_t cut : {size_t(3), size_t(100), size_t(4000), model.size() / 2, model.size() - 1}) {
    ExpectOneLineError("run -m " + WriteFile("cut.gguf", model.substr(0, cut)) + " -p hi", "cut.gguf");
  }
  std::string flipped = model;
  flipped[5] = '\x7f';  // the version field
  ExpectOneLineError("run -m " + WriteFile("flip.gguf", flipped) + " -p hi", "flip.gguf");
  ExpectOneLineError("run -m " + std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf -p hi",
                     "unsupported architecture 'gpt2'");
}

TEST_F(CliTest, UnsupportedModelsGiveOneLineErrors) {
  ExpectOneLineError("run -p hi -m " + Variant("arch.gguf", [](GgufWriter& w) {
                       w.SetString("general.architecture", "falcon");
                     }),
                     "unsupported architecture 'falcon'");
  // A type the engine cannot compute with, in a file whose rows it could otherwise hold (256
  // wide: a conformance file): the error names the tensor and the type.
  const std::string q4_0 = std::string(PC_SHARED_DIR) + "/models/conformance/tiny-q4_0.gguf";
  ExpectOneLineError(
      "run -p hi -m " + Variant("type.gguf", [](GgufWriter&) {}, GgmlType::kIQ2_XXS, q4_0),
      "tensor 'token_embd.weight' has type IQ2_XXS, which is not supported");
  ExpectOneLineError("run -p hi -m " + Variant("shape.gguf", [](GgufWriter& w) {
                       w.SetU32("llama.feed_forward_length", 100);
                     }),
                     "has shape");
  ExpectOneLineError("run -p hi -m " + Variant("heads.gguf", [](GgufWriter& w) {
                       w.SetU32("llama.attention.head_count_kv", 3);
                     }),
                     "head_count_kv");
}

TEST_F(CliTest, BadFlagsAndPromptsGiveOneLineErrors) {
  const std::string m = "run -m " + kStories;
  ExpectOneLineError(m + " -p 'Once upon a time there was' -c 4", "context size 4");
  ExpectOneLineError(m + " -p hi --temp -1", "temperature");
  ExpectOneLineError(m + " -p hi --top-p 2", "top_p");
  ExpectOneLineError(m + " -p hi --min-p -0.5", "min_p");
  ExpectOneLineError(m + " -p hi -n -3", "-n");
  ExpectOneLineError(m + " -p hi -t -1", "--threads");
  ExpectOneLineError(m + " -p hi --kv-type q4", "--kv-type");
  ExpectOneLineError(m + " -p hi --bogus", "bogus");
  ExpectOneLineError(m + " -p hi -n abc", "abc");
  ExpectOneLineError("bench -m " + kStories + " -s 0", "-s");
  ExpectOneLineError("serve -m " + kStories + " --block-size 0", "--block-size");
  ExpectOneLineError("serve -m " + kStories + " --isa NOPE", "--isa 'NOPE'");
  ExpectOneLineError(m + " -p hi --isa NOPE", "--isa 'NOPE'");
  ExpectOneLineError("serve -m " + kStories + " --parallel 0", "--parallel");
  ExpectOneLineError("run -p hi", "--model");
  ExpectOneLineError("frobnicate", "frobnicate");
  ExpectOneLineError("synth --preset nope --vocab " + kStories + " -o " + (dir_ / "x.gguf").string(),
                     "nope");
}

}  // namespace
}  // namespace promptcache
