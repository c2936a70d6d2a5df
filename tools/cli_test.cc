// The promptcache binary as a user runs it: outputs on stdout, and for every kind of bad input
// one clear line on stderr and a non-zero exit, never a crash or a hang.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "gguf/gguf.h"
#include "nlohmann/json.hpp"
#include "promptcache/version.h"

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

// The last line of `out` (bench --json's object), without its newline.
std::string LastLine(std::string out) {
  if (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t start = out.rfind('\n');
  return start == std::string::npos ? out : out.substr(start + 1);
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

// --help offers --version: it prints the version CMake's project(VERSION) generated, on stdout.
TEST_F(CliTest, VersionPrintsTheVersion) {
  const Output o = RunCli("--version");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, std::string("promptcache ") + PROMPTCACHE_VERSION_STRING + "\n");
  EXPECT_EQ(o.err, "");
  EXPECT_NE(RunCli("--help").out.find("--version"), std::string::npos);
}

TEST_F(CliTest, RunPrintsOnlyTheContinuation) {
  const Output o = RunCli("run -m " + kStories + " -p 'Once upon a time' -n 12 --temp 0");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, ", there was a little girl named Lily. She\n");
  EXPECT_NE(o.err.find("generation: 12 tokens"), std::string::npos) << o.err;
  const Output nc =
      RunCli("run -m " + kStories + " -p 'Once upon a time' -n 12 --temp 0 --no-kv-cache");
  EXPECT_EQ(nc.out, o.out);
}

TEST_F(CliTest, ChatRendersTheModelsJinjaTemplate) {
  // stories260K has no chat template: the plain transcript.
  const Output plain = RunCli("run -m " + kStories + " -p 'Once upon a time' -n 4 --temp 0 --chat");
  EXPECT_EQ(plain.code, 0) << plain.err;
  // A template that writes the story's opening itself: the continuation is the one of that
  // text (RunPrintsOnlyTheContinuation), so the template ran, with the message's content.
  const std::string tmpl = WriteFile("t.jinja",
                                     "{%- for m in messages -%}\n"
                                     "  {{- m['content'] | trim -}}\n"
                                     "{%- endfor %}\n");
  const Output o =
      RunCli("run -m " + kStories + " -p '  Once upon a time ' -n 12 --temp 0 --chat " +
             "--chat-template " + tmpl);
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, ", there was a little girl named Lily. She\n");
  // The file's own template, set in its metadata.
  const std::string model = Variant("chat.gguf", [](GgufWriter& w) {
    w.SetString("tokenizer.chat_template",
                "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
                "{{ raise_exception('System role not supported') }}{% endif %}"
                "{{ messages[0]['content'] }}");
  });
  const Output f = RunCli("run -m " + model + " -p 'Once upon a time' -n 12 --temp 0 --chat");
  EXPECT_EQ(f.code, 0) << f.err;
  EXPECT_EQ(f.out, o.out);
  EXPECT_NE(RunCli("inspect -m " + model).out.find("chat template: Jinja"), std::string::npos);
  // --chat-template overrides it.
  const std::string raising = WriteFile("raise.jinja", "{{ raise_exception('no chats here') }}");
  ExpectOneLineError("run -m " + model + " -p hi --chat --chat-template " + raising,
                     "chat template: line 1: no chats here");
}

TEST_F(CliTest, BadChatTemplatesGiveOneLineErrors) {
  ExpectOneLineError("run -m " + kStories + " -p hi --chat --chat-template /nonexistent.jinja",
                     "/nonexistent.jinja");
  ExpectOneLineError("run -m " + kStories + " -p hi --chat --chat-template " +
                         WriteFile("bad.jinja", "line 1\n{% for m in messages %}\n"),
                     "line 2: unexpected end of template");
  ExpectOneLineError(
      "run -m " + kStories + " -p hi --chat --chat-template " + WriteFile("empty.jinja", " \n"),
      "is empty");
  ExpectOneLineError("run -m " + kStories + " -p hi --chat-template " +
                         WriteFile("ok.jinja", "{{ messages[0].content }}"),
                     "--chat-template needs --chat");
  ExpectOneLineError("serve -m " + kStories + " --port 0 --chat-template " +
                         WriteFile("bad2.jinja", "{{ x | nosuchfilter }}"),
                     "no filter named 'nosuchfilter'");
}

TEST_F(CliTest, LongContextRunsWhenAllowed) {
  const Output o = RunCli("run -m " + kStories +
                          " -p 'Once upon a time' -n 4 --temp 0 -c 4096 --allow-long-context");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_FALSE(o.out.empty());
}

TEST_F(CliTest, TokenizePrintsIds) {
  EXPECT_EQ(RunCli("tokenize -m " + kStories + " 'Once upon a time'").out, "1 403 407 261 378\n");
  EXPECT_EQ(RunCli("tokenize -m " + kStories + " --no-bos 'Once upon a time'").out,
            "403 407 261 378\n");
  EXPECT_EQ(RunCli("tokenize -m " + kStories + " ''").out, "1\n");
}

TEST_F(CliTest, TokenizeBatchMatchesOneByOne) {
  const std::string batch =
      (fs::temp_directory_path() / ("pc_cli_batch_" + std::to_string(getpid()) + ".json")).string();
  std::ofstream(batch) << R"(["Once upon a time", "", "a\nb </s> \u00e9"])";
  // The same ids as tokenizing each text alone, as JSON.
  std::string expected = "[";
  for (const char* text : {"'Once upon a time'", "''", "'a\nb </s> \xC3\xA9'"}) {
    std::string ids = RunCli("tokenize -m " + kStories + " --special " + std::string(text)).out;
    ids.pop_back();
    std::replace(ids.begin(), ids.end(), ' ', ',');
    expected += (expected.size() > 1 ? ",[" : "[") + ids + "]";
  }
  expected += "]\n";
  EXPECT_EQ(RunCli("tokenize -m " + kStories + " --special --batch " + batch).out, expected);
  EXPECT_EQ(RunCli("tokenize -m " + kStories + " --special --batch - < " + batch).out, expected);
  std::ofstream(batch) << R"(["a", 3])";
  ExpectOneLineError("tokenize -m " + kStories + " --batch " + batch, "element 1 is not a string");
  std::ofstream(batch) << "[";
  ExpectOneLineError("tokenize -m " + kStories + " --batch " + batch, "not valid JSON");
  fs::remove(batch);
  ExpectOneLineError("tokenize -m " + kStories + " --batch " + batch, "cannot open");
  ExpectOneLineError("tokenize -m " + kStories, "either a text or --batch");
  ExpectOneLineError("vocab --hf " + batch + " -o " + batch + ".gguf", "cannot open");
}

TEST_F(CliTest, InspectAndBenchJson) {
  const Output i = RunCli("inspect -m " + kStories);
  EXPECT_EQ(i.code, 0);
  EXPECT_NE(i.out.find("KV cache:      640 bytes/token in F16"), std::string::npos) << i.out;
  const Output b = RunCli("bench -m " + kStories + " -p 32 -n 8 -r 1 --json");
  EXPECT_EQ(b.code, 0) << b.err;
  const std::string last = LastLine(b.out);
  for (const char* key :
       {"\"prompt_tps\"", "\"gen_tps\"", "\"peak_rss_bytes\"", "\"kv_bytes_per_token\":640"}) {
    EXPECT_NE(last.find(key), std::string::npos) << key << " in " << last;
  }
  // Several sequences sharing the depth tokens, decoded as one batch per step.
  const Output s = RunCli("bench -m " + kStories + " -d 40 -p 8 -n 4 -s 3 -r 1 --json");
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("generation (3xtg4)"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("\"sequences\":3"), std::string::npos) << s.out;
}

// bench --plot writes one SVG with the three charts (generation with and without the KV cache,
// TTFT cold / prefix hit / modules, bytes per token by KV type) and reports their numbers; a
// prefix hit and modules compute less than a cold prompt, so their TTFT is lower at the longest
// prompt.
TEST_F(CliTest, BenchPlotWritesSvg) {
  const std::string svg = (dir_ / "plot.svg").string();
  const Output b = RunCli("bench -m " + kStories + " -t 1 -p 160 -n 48 -r 1 --json --plot " + svg);
  ASSERT_EQ(b.code, 0) << b.err;
  const std::string text = Slurp(svg);
  EXPECT_EQ(text.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << text.substr(0, 80);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  for (const char* title : {"Generation: with vs without KV cache", "Time to first token",
                            "K/V bytes per token by KV type", "schema modules + new text"}) {
    EXPECT_NE(text.find(title), std::string::npos) << title;
  }
  EXPECT_NE(b.out.find("wrote " + svg), std::string::npos) << b.out;
  const nlohmann::json j = nlohmann::json::parse(LastLine(b.out));
  const nlohmann::json& plot = j["plot"];
  ASSERT_FALSE(plot["generation"].empty());
  const nlohmann::json& longest = plot["generation"].back();
  EXPECT_EQ(longest["tokens"], 48);
  EXPECT_GT(longest["no_cache_ms"].get<double>(), longest["with_cache_ms"].get<double>());
  ASSERT_FALSE(plot["ttft"].empty());
  const nlohmann::json& t = plot["ttft"].back();
  EXPECT_GT(t["cold_ms"].get<double>(), t["prefix_hit_ms"].get<double>()) << t.dump();
  EXPECT_GT(t["cold_ms"].get<double>(), t["modules_ms"].get<double>()) << t.dump();
  EXPECT_EQ(plot["kv_bytes_per_token"]["f16"], 640);
  EXPECT_EQ(plot["kv_bytes_per_token"]["f32"], 1280);
  ExpectOneLineError("bench -m " + kStories + " -p 32 -n 8 -r 1 --plot /nonexistent/dir/p.svg",
                     "cannot write the plot");
}

// Whether this CPU has what Highway's AVX2 target requires (AVX2, FMA, F16C, BMI1/2), read from
// cpuid.
bool CpuRunsAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2");
}

// bench --json names the target and, for every weight type the model's matrices have (the
// output matrix, the tied embedding's type when it is the output, every layer's), the matmul
// kernel that runs it; the names follow --isa.
TEST_F(CliTest, BenchNamesTheKernelOfEveryWeightType) {
  const std::string q4k = (dir_ / "q4k.gguf").string(), f16 = (dir_ / "f16.gguf").string();
  ASSERT_EQ(RunCli("synth --preset tiny-256 --vocab " + kStories + " --type q4_k -o " + q4k).code,
            0);
  ASSERT_EQ(RunCli("synth --preset tiny-test --vocab " + kStories + " --type f16 -o " + f16).code,
            0);
  for (const std::string& model : {q4k, f16, kStories}) {
    auto f = GgufFile::Open(model);
    ASSERT_TRUE(f.ok());
    const bool tied = (*f)->FindTensor("output.weight") == nullptr;
    std::set<std::string> types;
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      if (t.dims.size() == 2 && (t.name != "token_embd.weight" || tied)) {
        types.insert(GgmlTypeName(t.type));
      }
    }
    for (const std::string isa : {"", "AVX2"}) {
      // Only a CPU without what Highway's AVX2 target needs skips it; on any other, --isa AVX2
      // failing is a failure.
      if (isa == "AVX2" && !CpuRunsAvx2()) continue;
      const Output b = RunCli("bench -m " + model + " -p 8 -n 2 -r 1 --json" +
                              (isa.empty() ? "" : " --isa " + isa));
      ASSERT_EQ(b.code, 0) << isa << ": " << b.err;
      const nlohmann::json j = nlohmann::json::parse(LastLine(b.out));
      ASSERT_TRUE(j["target"].is_string()) << j;
      if (!isa.empty()) {
        EXPECT_EQ(j["target"], isa);
      }
      std::set<std::string> got;
      for (const auto& [type, kernel] : j["kernels"].items()) {
        got.insert(type);
        const std::string k = kernel.get<std::string>();
        const bool quantized = type != "F32" && type != "F16" && type != "BF16";
        // Loaded to run, every quantized matrix is packed.
        EXPECT_EQ(k.rfind(quantized ? "packed_int8_" : "float_", 0), 0u) << type << " " << k;
        if (isa == "AVX2") {
          EXPECT_TRUE(k == "float_fma_256" || k == "packed_int8_maddubs" ||
                      k == "packed_int8_maddubs_sign")
              << type << " " << k;
        }
        // The short form in the text output too.
        EXPECT_NE(b.out.find(type + " " + k), std::string::npos) << b.out;
      }
      EXPECT_EQ(got, types) << model << " " << j;
    }
  }
}

TEST_F(CliTest, BadFilesGiveOneLineErrors) {
  ExpectOneLineError("run -m /nonexistent.gguf -p hi", "/nonexistent.gguf");
  ExpectOneLineError("run -m " + WriteFile("text.gguf", "hello, not a model\n") + " -p hi",
                     "not a GGUF file");
  const std::string model = Slurp(kStories);
  for (size_t cut : {size_t(3), size_t(100), size_t(4000), model.size() / 2, model.size() - 1}) {
    ExpectOneLineError("run -m " + WriteFile("cut.gguf", model.substr(0, cut)) + " -p hi",
                       "cut.gguf");
  }
  std::string flipped = model;
  flipped[5] = '\x7f';  // the version field
  ExpectOneLineError("run -m " + WriteFile("flip.gguf", flipped) + " -p hi", "flip.gguf");
  ExpectOneLineError(
      "run -m " + std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf -p hi",
      "unsupported architecture 'gpt2'");
}

// Where tensor `name`'s entry in the tensor table of a GGUF image puts its type and first
// dimension (found by its length-prefixed name, which the table holds once).
struct TensorEntry {
  size_t dim0, type;
};
TensorEntry FindTensorEntry(const std::string& image, const std::string& name) {
  const uint64_t len = name.size();
  const size_t at = image.find(std::string(reinterpret_cast<const char*>(&len), 8) + name);
  PC_CHECK(at != std::string::npos);
  const size_t dims_at = at + 8 + name.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, image.data() + dims_at, 4);
  return {dims_at + 4, dims_at + 4 + 8 * n_dims};
}

// Files with a bad tensor (from a Q4_K tiny-256, its table or data edited): `run` and `inspect`
// end with one line naming the tensor and the problem, never a crash.
TEST_F(CliTest, BadTensorsGiveOneLineErrors) {
  const std::string q4k = (dir_ / "q4k.gguf").string();
  ASSERT_EQ(RunCli("synth --preset tiny-256 --vocab " + kStories + " --type q4_k -o " + q4k).code,
            0);
  const std::string image = Slurp(q4k);
  const std::string name = "blk.0.attn_q.weight", q = "tensor '" + name + "'";
  auto f = GgufFile::FromMemory(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufTensorInfo* t = (*f)->FindTensor(name);
  ASSERT_EQ(t->type, GgmlType::kQ4_K);
  ASSERT_EQ(t->dims[0], 256);
  const size_t data_at =
      static_cast<size_t>(t->data - reinterpret_cast<const uint8_t*>(image.data()));
  const TensorEntry e = FindTensorEntry(image, name);
  auto with = [&](size_t at, uint64_t v, size_t bytes) {
    std::string m = image;
    std::memcpy(m.data() + at, &v, bytes);  // little-endian
    return m;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      // (a) Cut inside the tensor's data.
      {image.substr(0, data_at + t->nbytes / 2), "truncated: " + q + " data ends at"},
      // (b) Sizes that do not match the type and shape: a row width Q4_K's 256-element
      // super-blocks do not divide; the Q4_K data declared Q6_K (larger blocks: into the next
      // tensor) or Q5_0 (32-element blocks, larger too).
      {with(e.dim0, 200, 8),
       q + " of type Q4_K has rows of 200 elements, not a multiple of its block size 256"},
      {with(e.type, static_cast<uint32_t>(GgmlType::kQ6_K), 4),
       q + " of type Q6_K and shape [256, 256] needs 53760 bytes"},
      {with(e.type, static_cast<uint32_t>(GgmlType::kQ5_0), 4),
       "its size does not match its type and shape"},
      // (c) A type id ggml does not have.
      {with(e.type, 99, 4), q + " has unknown type id 99"},
      // A known type the engine cannot compute with: the loader's error.
      {with(e.type, static_cast<uint32_t>(GgmlType::kIQ2_XXS), 4),
       q + " has type IQ2_XXS, which is not supported"},
  };
  for (const auto& [data, needle] : cases) {
    const std::string path = WriteFile("bad.gguf", data);
    ExpectOneLineError("run -p hi -m " + path, needle);
    ExpectOneLineError("inspect -m " + path, needle);
  }
}

TEST_F(CliTest, UnsupportedModelsGiveOneLineErrors) {
  ExpectOneLineError("run -p hi -m " + Variant("arch.gguf",
                                               [](GgufWriter& w) {
                                                 w.SetString("general.architecture", "falcon");
                                               }),
                     "unsupported architecture 'falcon'");
  // A type the engine cannot compute with, in a file whose rows it could otherwise hold (256
  // wide: a conformance file): the error names the tensor and the type.
  const std::string q4_0 = std::string(PC_SHARED_DIR) + "/models/conformance/tiny-q4_0.gguf";
  ExpectOneLineError(
      "run -p hi -m " + Variant(
                            "type.gguf", [](GgufWriter&) {}, GgmlType::kIQ2_XXS, q4_0),
      "tensor 'token_embd.weight' has type IQ2_XXS, which is not supported");
  ExpectOneLineError(
      "run -p hi -m " +
          Variant("shape.gguf", [](GgufWriter& w) { w.SetU32("llama.feed_forward_length", 100); }),
      "has shape");
  ExpectOneLineError("run -p hi -m " + Variant("heads.gguf",
                                               [](GgufWriter& w) {
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
  // Pin quotas within the cache's budget, and a tenant's within the total.
  ExpectOneLineError("serve -m " + kStories + " --cache-ram 64 --pin-ram 65", "--pin-ram");
  ExpectOneLineError("serve -m " + kStories + " --pin-ram 8 --pin-ram-tenant 9",
                     "--pin-ram-tenant");
  ExpectOneLineError("serve -m " + kStories + " --pin-ttl 0", "--pin-ttl");
  // A context beyond the trained 2048 tokens: refused, naming both numbers and the way past.
  ExpectOneLineError(m + " -p hi -c 4096", "context 4096 is more than the 2048 tokens");
  ExpectOneLineError("serve -m " + kStories + " -c 4096", "--allow-long-context");
  ExpectOneLineError("bench -m " + kStories + " -c 4096", "--allow-long-context");
  // The same when no -c is given and the depth and prompt need more than that.
  ExpectOneLineError("bench -m " + kStories + " -d 4000 -p 8 -n 1", "context 4008 is more than");
  ExpectOneLineError("run -p hi", "--model");
  ExpectOneLineError("frobnicate", "frobnicate");
  ExpectOneLineError(
      "synth --preset nope --vocab " + kStories + " -o " + (dir_ / "x.gguf").string(), "nope");
}

// ---------------------------------------------------------------- quantize

// Logits of `ids` from the engine, or empty on failure.
std::vector<float> Logits(const std::string& model, const std::string& out, const char* ids) {
  const Output o = RunCli("logits -m " + model + " -o " + out + " " + ids);
  EXPECT_EQ(o.code, 0) << model << "\n" << o.err;
  const std::string bytes = Slurp(out);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

bool SameMetadataValue(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || !(a.scalar == b.scalar) || a.array.size() != b.array.size()) return false;
  for (size_t i = 0; i < a.array.size(); ++i) {
    if (!SameMetadataValue(a.array[i], b.array[i])) return false;
  }
  return true;
}

// The types llama.cpp's quantizer gives tiny-256's tensors (the conformance fixtures have its
// shape and names): the file type's own for the matrices, with these exceptions.
std::map<std::string, GgmlType> ExpectedExceptions(const std::string& type) {
  using T = GgmlType;
  std::map<std::string, GgmlType> e;
  const bool floats = type == "F32" || type == "F16" || type == "BF16";
  if (!floats && type != "Q8_0") e["token_embd.weight"] = T::kQ6_K;  // tied: the output matrix
  for (int l = 0; l < 4; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (type == "Q2_K") {
      e[p + "attn_v.weight"] = e[p + "ffn_down.weight"] = e[p + "attn_output.weight"] = T::kQ3_K;
    } else if (type == "Q3_K_M") {
      e[p + "attn_v.weight"] = l < 2 ? T::kQ5_K : T::kQ4_K;
      e[p + "ffn_down.weight"] = e[p + "attn_output.weight"] = T::kQ4_K;
    } else if (type == "Q3_K_L") {
      e[p + "attn_v.weight"] = e[p + "ffn_down.weight"] = e[p + "attn_output.weight"] = T::kQ5_K;
    } else if (type == "Q4_K_S") {
      e[p + "attn_v.weight"] = T::kQ5_K;  // the first 4 layers
    } else if ((type == "Q4_K_M" || type == "Q5_K_M") && l >= 2) {
      e[p + "attn_v.weight"] = e[p + "ffn_down.weight"] = T::kQ6_K;  // layers 2 and 3 of 4
    }
  }
  return e;
}

// Every file type from an F32 tiny-256 (rows that 256 divides): the mix llama.cpp's quantizer
// makes (the same as in the llama.cpp-quantized fixtures, where there is one), the metadata kept,
// and a model that runs with logits near the F32 model's.
TEST_F(CliTest, QuantizeEveryFileType) {
  const std::string f32 = (dir_ / "f32.gguf").string();
  ASSERT_EQ(RunCli("synth --preset tiny-256 --vocab " + kStories + " --type f32 -o " + f32).code,
            0);
  const char* ids = "1 403 407 261 378 432 383 286";
  const std::vector<float> want = Logits(f32, (dir_ / "f32.logits").string(), ids);
  ASSERT_EQ(want.size(), 8u * 512);
  auto src = GgufFile::Open(f32);
  ASSERT_TRUE(src.ok());
  const std::map<std::string, uint32_t> ids_of = {
      {"F32", 0},     {"F16", 1},     {"BF16", 32},   {"Q8_0", 7},    {"Q4_0", 2},
      {"Q4_1", 3},    {"Q5_0", 8},    {"Q5_1", 9},    {"IQ4_NL", 25}, {"IQ4_XS", 30},
      {"Q2_K", 10},   {"Q3_K_S", 11}, {"Q3_K_M", 12}, {"Q3_K_L", 13}, {"Q4_K_S", 14},
      {"Q4_K_M", 15}, {"Q5_K_S", 16}, {"Q5_K_M", 17}, {"Q6_K", 18}};
  const std::map<std::string, GgmlType> base = {
      {"F32", GgmlType::kF32},       {"F16", GgmlType::kF16},     {"BF16", GgmlType::kBF16},
      {"Q8_0", GgmlType::kQ8_0},     {"Q4_0", GgmlType::kQ4_0},   {"Q4_1", GgmlType::kQ4_1},
      {"Q5_0", GgmlType::kQ5_0},     {"Q5_1", GgmlType::kQ5_1},   {"IQ4_NL", GgmlType::kIQ4_NL},
      {"IQ4_XS", GgmlType::kIQ4_XS}, {"Q2_K", GgmlType::kQ2_K},   {"Q3_K_S", GgmlType::kQ3_K},
      {"Q3_K_M", GgmlType::kQ3_K},   {"Q3_K_L", GgmlType::kQ3_K}, {"Q4_K_S", GgmlType::kQ4_K},
      {"Q4_K_M", GgmlType::kQ4_K},   {"Q5_K_S", GgmlType::kQ5_K}, {"Q5_K_M", GgmlType::kQ5_K},
      {"Q6_K", GgmlType::kQ6_K}};
  for (const auto& [type, id] : ids_of) {
    std::string lower = type;
    for (char& c : lower) c = static_cast<char>(std::tolower(c));
    const std::string out = (dir_ / ("q-" + type + ".gguf")).string();
    const Output o = RunCli("quantize " + f32 + " " + out + " " + lower + " -t 2");
    ASSERT_EQ(o.code, 0) << type << "\n" << o.err;
    EXPECT_NE(o.out.find("general.file_type " + std::to_string(id)), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("MiB ->"), std::string::npos) << o.out;
    auto q = GgufFile::Open(out);
    ASSERT_TRUE(q.ok()) << q.status().message();
    EXPECT_EQ(*(*q)->GetInt("general.file_type"), id) << type;
    for (const auto& [key, value] : (*src)->metadata()) {
      if (key == "general.file_type") continue;
      const GgufValue* got = (*q)->Find(key);
      ASSERT_NE(got, nullptr) << type << " " << key;
      EXPECT_TRUE(SameMetadataValue(*got, value)) << type << " " << key;
    }
    const std::map<std::string, GgmlType> exceptions = ExpectedExceptions(type);
    ASSERT_EQ((*q)->tensors().size(), (*src)->tensors().size());
    for (const GgufTensorInfo& t : (*q)->tensors()) {
      GgmlType expect = t.dims.size() == 1 ? GgmlType::kF32 : base.at(type);
      if (auto it = exceptions.find(t.name); it != exceptions.end()) expect = it->second;
      EXPECT_EQ(t.type, expect) << type << " " << t.name << " is " << GgmlTypeName(t.type);
    }
    const std::string fixture =
        std::string(PC_SHARED_DIR) + "/models/conformance/tiny-" + lower + ".gguf";
    if (fs::exists(fixture)) {  // llama.cpp's own choice for the same shape
      auto ref = GgufFile::Open(fixture);
      ASSERT_TRUE(ref.ok());
      for (const GgufTensorInfo& t : (*ref)->tensors()) {
        EXPECT_EQ((*q)->FindTensor(t.name)->type, t.type) << type << " " << t.name;
      }
    }
    // The file runs, and its logits stay near the F32 model's (those of a broken file would
    // not: the logits' own spread is about 0.3; Q2_K's mean error here is about 0.1).
    const std::vector<float> got = Logits(out, (dir_ / "q.logits").string(), ids);
    ASSERT_EQ(got.size(), want.size()) << type;
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += std::fabs(got[i] - want[i]);
    diff /= static_cast<double>(got.size());
    const bool is_float = type == "F32" || type == "F16" || type == "BF16";
    EXPECT_LT(diff, is_float ? 0.005 : 0.2) << type;
  }
}

// Rows that 256 (and 32) do not divide, and requantizing an already quantized file.
TEST_F(CliTest, QuantizeFallbacksAndRequantizing) {
  // tiny-test: 64- and 128-wide rows, its own output matrix.
  const std::string f32 = (dir_ / "tiny.gguf").string(), q = (dir_ / "q.gguf").string();
  ASSERT_EQ(RunCli("synth --preset tiny-test --vocab " + kStories + " --type f32 -o " + f32).code,
            0);
  Output o = RunCli("quantize " + f32 + " " + q + " Q4_K_M");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("warning: 16 matrices have rows that Q4_K's 256-element blocks do not"),
            std::string::npos)
      << o.err;
  auto f = GgufFile::Open(q);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->FindTensor("output.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ((*f)->FindTensor("token_embd.weight")->type, GgmlType::kQ5_0);    // Q4_K's fallback
  EXPECT_EQ((*f)->FindTensor("blk.1.attn_v.weight")->type, GgmlType::kQ8_0);  // Q6_K's
  EXPECT_EQ((*f)->FindTensor("blk.0.attn_q.weight")->type, GgmlType::kQ5_0);
  EXPECT_EQ(RunCli("run -m " + q + " -p hi -n 2").code, 0);

  // Requantizing works, with a warning.
  const std::string q8 = (dir_ / "q8.gguf").string();
  o = RunCli("quantize " + q + " " + q8 + " q8_0");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("already quantized"), std::string::npos) << o.err;
  f = GgufFile::Open(q8);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_down.weight")->type, GgmlType::kQ8_0);

  // stories260K: ffn_down rows of 172 fit no block; they stay floats (F16).
  const std::string s = (dir_ / "stories-q4_0.gguf").string();
  ASSERT_EQ(RunCli("quantize " + kStories + " " + s + " Q4_0").code, 0);
  f = GgufFile::Open(s);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_down.weight")->type, GgmlType::kF16);
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_up.weight")->type, GgmlType::kQ4_0);
  EXPECT_EQ((*f)->FindTensor("output.weight")->type, GgmlType::kQ8_0);  // 64 wide: no Q6_K
  o = RunCli("run -m " + s + " -p 'Once upon a time' -n 4 --temp 0");
  EXPECT_EQ(o.code, 0) << o.err;
}

TEST_F(CliTest, QuantizeBadInputGivesOneLineErrors) {
  const std::string out = (dir_ / "out.gguf").string();
  ExpectOneLineError("quantize /nonexistent.gguf " + out + " Q4_0", "/nonexistent.gguf");
  ExpectOneLineError("quantize " + WriteFile("text.gguf", "not a model\n") + " " + out + " Q4_0",
                     "not a GGUF file");
  ExpectOneLineError("quantize " + kStories + " " + out + " Q7_K",
                     "unknown quantization type 'Q7_K'");
  ExpectOneLineError("quantize " + kStories + " /nonexistent-dir/out.gguf Q4_0",
                     "/nonexistent-dir/out.gguf");
  ExpectOneLineError("quantize " + kStories + " " + out + " Q4_0 -t -2", "--threads");
  ExpectOneLineError("quantize " + kStories + " " + out, "type");
  EXPECT_FALSE(fs::exists(out));
  // synth takes every type with a quantizer, and names them when given another.
  ExpectOneLineError(
      "synth --preset tiny-test --vocab " + kStories + " --type q7_k -o " + out,
      "--type must be one of F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
      "IQ4_NL, IQ4_XS, BF16, not 'q7_k'");
}

}  // namespace
}  // namespace promptcache
