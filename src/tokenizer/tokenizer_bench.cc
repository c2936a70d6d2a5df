// Encode/decode throughput of both tokenizer kinds on a long mixed text (Google Benchmark).
// Run: tokenizer_bench [--benchmark_filter=...]; reads the vocabularies from PC_SHARED_DIR.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {
namespace {

struct Vocab {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

const Vocab& Get(const std::string& name) {
  static std::map<std::string, Vocab> cache;
  Vocab& v = cache[name];
  if (!v.tok) {
    auto file = GgufFile::Open(std::string(PC_SHARED_DIR) + "/tokenizers/" + name);
    if (!file.ok()) std::fprintf(stderr, "%s\n", file.status().message().c_str()), std::abort();
    v.file = std::move(file).value();
    auto tok = Tokenizer::FromGguf(*v.file);
    if (!tok.ok()) std::fprintf(stderr, "%s\n", tok.status().message().c_str()), std::abort();
    v.tok = std::move(tok).value();
  }
  return v;
}

// ~400 KB: English prose, code-like text and the conformance strings (emoji, CJK, Khmer).
std::string LongText() {
  std::ifstream in(std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf.inp");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string prose =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
      "Lily's mom said, \"Lily, let's go to the store and buy some apples for the pie.\"\n"
      "for (int i = 0; i < n; ++i) { sum += values[i] * 3.14159; }  // accumulate\n";
  std::string text;
  for (int i = 0; i < 600; ++i) text += prose + (i % 4 == 0 ? ss.str() : "");
  return text;
}

void BM_Encode(benchmark::State& state, const char* vocab) {
  const Tokenizer& tok = *Get(vocab).tok;
  const std::string text = LongText();
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tok.Encode(text, true);
    tokens += ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["tokens"] = static_cast<double>(tokens / state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(text.size() * state.iterations()));
}

void BM_EncodeLongWord(benchmark::State& state, const char* vocab) {
  const Tokenizer& tok = *Get(vocab).tok;
  std::string word;
  for (int i = 0; i < state.range(0); ++i) word += "abcdefghij"[(i * 7) % 10];
  for (auto _ : state) benchmark::DoNotOptimize(tok.Encode(word, false).data());
}

void BM_Decode(benchmark::State& state, const char* vocab) {
  const Tokenizer& tok = *Get(vocab).tok;
  const std::vector<int32_t> ids = tok.Encode(LongText(), false);
  for (auto _ : state) benchmark::DoNotOptimize(tok.Decode(ids).data());
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(ids.size() * state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Encode, gpt2, "ggml-vocab-gpt-2.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, llama_spm, "ggml-vocab-llama-spm.gguf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeLongWord, gpt2, "ggml-vocab-gpt-2.gguf")
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeLongWord, llama_spm, "ggml-vocab-llama-spm.gguf")
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, gpt2, "ggml-vocab-gpt-2.gguf")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace promptcache

BENCHMARK_MAIN();
