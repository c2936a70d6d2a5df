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
#include "tools/cli_test_util.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

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
  // The depth tokens are in the K/V (PrepareTokens evaluates them): the peak holds at least them
  // and each sequence's 12 tokens, 640 bytes a token. (Mutation: skipping that Eval left 3 blocks,
  // 30720 bytes.)
  const nlohmann::json js = nlohmann::json::parse(LastLine(s.out));
  EXPECT_GE(js.at("kv_peak_bytes").get<size_t>(), size_t(40 + 3 * 12) * 640) << js.dump();
}

// bench --profile --json: where each pass's bytes were read. Prompt and generation each read every
// matrix once (stories260K's F32 matrices: per layer Q and O 64x64, K and V 32x64, gate, up and
// down 172x64, five layers, and the tied output 512x64: 259,328 floats, 1,037,312 bytes). The
// generation steps (bench times them on an empty cache) read 1, 2, 3, then 4 keys, 640 bytes of K
// and V a key (5 layers, f16 rows of 32 values): 1,600 a step on average.
TEST_F(CliTest, BenchProfileCountsTheBytesRead) {
  const Output b = RunCli("bench -m " + kStories + " -t 2 -p 64 -n 4 -r 1 --profile --json");
  ASSERT_EQ(b.code, 0) << b.err;
  const nlohmann::json profile = nlohmann::json::parse(LastLine(b.out)).at("profile");
  for (const char* pass : {"prompt", "generation"}) {
    double matmul = 0, attention = 0, all = 0;
    for (const nlohmann::json& op : profile.at(pass).at("ops")) {
      const double bytes = op.at("bytes_per_pass").get<double>();
      all += bytes;
      if (op.at("kind") == "matmul") matmul += bytes;
      if (op.at("kind") == "attention") attention += bytes;
    }
    EXPECT_EQ(matmul, 1037312) << pass;
    EXPECT_EQ(all, profile.at(pass).at("bytes_per_pass").get<double>()) << pass;
    double by_thread = 0;
    for (const nlohmann::json& th : profile.at(pass).at("per_thread")) {
      by_thread += th.at("bytes_per_pass").get<double>();
    }
    EXPECT_EQ(by_thread, all) << pass;
    if (std::string(pass) == "generation") {
      EXPECT_EQ(attention, 1600);
    }
  }
  EXPECT_NE(b.out.find("weights and K/V read per pass"), std::string::npos) << b.out;
}

// Mixture-of-experts files (synth's tiny-qwen3moe, tiny-qwen2moe, tiny-mixtral and tiny-gpt-oss
// in Q8_0) run from the CLI: the same greedy continuation at 1 and 2 threads and without the KV
// cache, and bench --profile names the experts' operations (and tiny-qwen2moe's shared expert's),
// their weights counted as read (a decode step reads 2 of each layer's 8 experts: less than the
// prompt pass, which uses them all).
TEST_F(CliTest, MixtureOfExpertsFilesRun) {
  for (const char* preset : {"tiny-qwen3moe", "tiny-qwen2moe", "tiny-mixtral", "tiny-gpt-oss"}) {
    const std::string path = (dir_ / (std::string(preset) + ".gguf")).string();
    ASSERT_EQ(RunCli(std::string("synth --preset ") + preset + " --vocab " + kStories +
                     " --type q8_0 -o " + path)
                  .code,
              0);
    const std::string run = "run -m " + path + " -p 'Once upon a time' -n 10 --temp 0";
    const Output one = RunCli(run + " -t 1");
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_NE(one.out, "\n") << preset;
    EXPECT_NE(one.err.find("generation: 10 tokens"), std::string::npos) << one.err;
    EXPECT_EQ(RunCli(run + " -t 2").out, one.out) << preset;
    EXPECT_EQ(RunCli(run + " -t 2 --no-kv-cache").out, one.out) << preset;

    const Output b = RunCli("bench -m " + path + " -t 2 -p 64 -n 4 -r 1 --profile --json");
    ASSERT_EQ(b.code, 0) << b.err;
    const nlohmann::json profile = nlohmann::json::parse(LastLine(b.out)).at("profile");
    double expert_bytes[2] = {0, 0};
    int i = 0;
    for (const char* pass : {"prompt", "generation"}) {
      std::set<std::string> names;
      for (const nlohmann::json& op : profile.at(pass).at("ops")) {
        const std::string name = op.at("name");
        names.insert(name);
        if (name.find("matmul experts") != std::string::npos) {
          expert_bytes[i] += op.at("bytes_per_pass").get<double>();
        }
      }
      for (const char* want : {"residual, ffn_norm, matmul moe router", "moe routing",
                               "moe gather, matmul experts gate,up",
                               "moe activation, matmul experts down", "moe weighted sum"}) {
        EXPECT_EQ(names.count(want), 1u) << preset << " " << pass << ": " << want;
      }
      const bool shared = std::string(preset) == "tiny-qwen2moe";
      EXPECT_EQ(names.count("shared expert activation, matmul down"), shared ? 1u : 0u) << preset;
      ++i;
    }
    EXPECT_GT(expert_bytes[1], 0) << preset;
    EXPECT_LT(expert_bytes[1], expert_bytes[0]) << preset;
  }
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
      {with(e.type, static_cast<uint32_t>(GgmlType::kTQ1_0), 4),
       q + " has type TQ1_0, which is not supported"},
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
                            "type.gguf", [](GgufWriter&) {}, GgmlType::kTQ1_0, q4_0),
      "tensor 'token_embd.weight' has type TQ1_0, which is not supported");
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
  ExpectOneLineError(m + " -p hi --mirostat 3", "mirostat");
  ExpectOneLineError(m + " -p hi --typical 0", "typical_p");
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
  // A tenants' keys file that cannot be read stops the server before it listens (ignored, the
  // server would start without its tenants and this run would time out).
  ExpectOneLineError(
      "serve -m " + kStories + " --port 0 --api-keys " + (dir_ / "no-such-keys.txt").string(),
      "cannot read the API keys file");
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

}  // namespace
}  // namespace promptcache
