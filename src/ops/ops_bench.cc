// Microbenchmarks for the ops kernels (not run by ctest).
//
//   BM_MatMul/<type>/<rows>/<cols>/<tokens>/<threads>: one matrix multiply. For one token, and
//     for 256 (a prompt of a model larger than the caches), the weights rotate through enough
//     copies (>= 256 MiB) that every call streams them from memory, as a forward pass does; with
//     512 tokens they stay in cache (the kernels' arithmetic alone). Counters: GFLOP/s and
//     weight GB/s.
//   BM_Forward/<type>/<tokens>/<threads>: the matrix multiplies of one forward pass of a
//     SmolLM2-135M-shaped model (30 layers, n_embd 576, n_ff 1536, 3 KV heads of 64, tied 50257
//     vocab output), with Q/K/V and gate/up fused: an upper bound on tokens/s.
//   BM_AttendTile/<queries>/<keys>: the tiled attention kernel (f16 rows of three KV heads).
//   BM_Vec*, BM_Quantize*: the small kernels.
//   BM_MemoryRead/<threads>: the read bandwidth generation is bounded by.
//   BM_PeakCompute/<kind>/<threads>: the arithmetic ceiling prefill is bounded by (the roofline):
//     0 f32 FMA on 256-bit vectors, 1 on 512-bit, 2 int8 dot products with AVX2 (maddubs +
//     madd + add, the pattern the AVX2 kernels use), 3 with AVX-512 VNNI (vpdpbusd).
// Types: 0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 12 Q4_K, 14 Q6_K, 23 IQ4_XS, 30 BF16 across the shapes;
// every other packed type (3 Q4_1, 6 Q5_0, 7 Q5_1, 20 IQ4_NL, 10 Q2_K, 11 Q3_K, 13 Q5_K, and the
// low-bit i-quants 21 IQ3_S, 18 IQ3_XXS, 22 IQ2_S, 17 IQ2_XS, 16 IQ2_XXS, 29 IQ1_M, 19 IQ1_S,
// random blocks since they have no quantizer) on the square and FFN shapes (ggml ids; any type
// of weight_types.h works). Quantized matrices are packed as the model packs them.
// --isa=NAME runs the kernels of that Highway target (AVX2, SSE4 ...) instead of the CPU's best.
#include <benchmark/benchmark.h>
#include <strings.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/packed.h"
#include "ops/quant.h"
#include "ops/targets.h"
#include "ops/vec.h"
#include "ops/weight_types.h"

namespace promptcache {
namespace {

size_t BytesFor(GgmlType t, int64_t cols) {
  const WeightTypeInfo* info = FindWeightType(t);
  PC_CHECK(info != nullptr);
  return cols / info->block_elems * info->block_bytes;
}

ThreadPool* Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return p.get();
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// `copies` distinct [rows x cols] matrices in one buffer (content: a quantized random pattern).
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<WeightMatrix> mats;
  std::vector<std::unique_ptr<PackedMatrix>> packed;  // as Model::PackWeights makes them
};

Weights MakeWeights(GgmlType type, int64_t rows, int64_t cols, int64_t copies) {
  Weights w;
  const size_t rb = BytesFor(type, cols);
  // Quantize a few distinct rows and tile them; the values do not matter for speed.
  constexpr int kDistinct = 64;
  std::vector<uint8_t> pattern(rb * kDistinct);
  const WeightTypeInfo* info = FindWeightType(type);
  if (info != nullptr && info->decode != nullptr && info->quantize == nullptr) {
    // No quantizer (the low-bit i-quants): random blocks, every byte pattern being one. Those
    // that start with an f16 d get a small finite one (IQ1_M spreads its d over the scales).
    std::mt19937 rng(3);
    for (uint8_t& b : pattern) b = static_cast<uint8_t>(rng());
    if (type != GgmlType::kIQ1_M) {
      const uint16_t d = 0x211f;  // f16 0.01
      for (size_t at = 0; at < pattern.size(); at += info->block_bytes) {
        std::memcpy(pattern.data() + at, &d, sizeof(d));
      }
    }
  } else {
    const auto src = RandomFloats(cols * kDistinct, 1);
    for (int i = 0; i < kDistinct; ++i) {
      QuantizeRow(type, src.data() + i * cols, cols, pattern.data() + i * rb);
    }
  }
  w.bytes.resize(rb * rows * copies);
  for (int64_t r = 0; r < rows * copies; ++r) {
    std::memcpy(w.bytes.data() + r * rb, pattern.data() + (r % kDistinct) * rb, rb);
  }
  for (int64_t c = 0; c < copies; ++c) {
    w.mats.push_back({type, w.bytes.data() + c * rows * rb, rows, cols, rb});
  }
  if (FindPackedFormat(type) != nullptr) {
    for (WeightMatrix& m : w.mats) {
      w.packed.push_back(std::make_unique<PackedMatrix>(PackMatrix(m, Pool(2))));
      m.packed = w.packed.back().get();
    }
  }
  return w;
}

void BM_MatMul(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n_tokens = state.range(3);
  ThreadPool* pool = Pool(static_cast<int>(state.range(4)));
  const size_t matrix_bytes = BytesFor(type, cols) * rows;
  // Up to 16 tokens (decoding) and at 256 (a prompt) the weights stream from memory.
  const bool streamed = n_tokens <= 16 || n_tokens == 256;
  const int64_t copies =
      streamed ? std::max<int64_t>(1, (256 << 20) / static_cast<int64_t>(matrix_bytes)) : 1;
  Weights w = MakeWeights(type, rows, cols, copies);
  const auto x = RandomFloats(n_tokens * cols, 2);
  std::vector<float> out(n_tokens * rows);
  int64_t i = 0;
  for (auto _ : state) {
    MatMul(w.mats[i++ % copies], x.data(), n_tokens, out.data(), pool);
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * rows * cols * n_tokens * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(matrix_bytes * iters / 1e9, benchmark::Counter::kIsRate);
}

void MatMulArgs(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{576, 576},   {192, 576},   {1536, 576},  {576, 1536},
                               {50257, 576}, {2048, 2048}, {8192, 2048}, {2048, 8192}};
  for (int type : {8, 1, 2, 30, 0, 12, 14, 23}) {
    const int block = FindWeightType(static_cast<GgmlType>(type))->block_elems;
    for (const auto& s : shapes) {
      if (s[1] % block != 0) continue;  // 576-wide rows have no K-quant form
      for (int tokens : {1, 256, 512}) {
        for (int threads : {1, 2}) b->Args({type, s[0], s[1], tokens, threads});
      }
    }
  }
  // Small batches (several sequences decoding together): bandwidth-bound like one token.
  for (int type : {8, 1}) {
    for (int tokens : {2, 4, 8, 16}) {
      for (int threads : {1, 2}) b->Args({type, 1536, 576, tokens, threads});
    }
  }
  // Every packed format (each kernel family's every plane layout): the rows above for the types
  // not listed there (decoding 2048x2048, a prompt in cache; 8192x2048, a prompt streamed), and
  // two tokens for all of them.
  for (int type : {2, 8, 12, 14, 23, 3, 6, 7, 20, 10, 11, 13, 21, 18, 22, 17, 16, 29, 19}) {
    const bool listed = type == 2 || type == 8 || type == 12 || type == 14 || type == 23;
    for (int threads : {1, 2}) {
      for (int tokens : {1, 2, 512}) {
        if (!listed || tokens == 2) b->Args({type, 2048, 2048, tokens, threads});
      }
      if (!listed) b->Args({type, 8192, 2048, 256, threads});
    }
  }
}
BENCHMARK(BM_MatMul)->Apply(MatMulArgs)->UseRealTime()->Unit(benchmark::kMicrosecond);

// One forward pass worth of matrix multiplies of a SmolLM2-135M-shaped model.
void BM_Forward(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t n_tokens = state.range(1);
  ThreadPool* pool = Pool(static_cast<int>(state.range(2)));
  constexpr int64_t kLayers = 30, kEmbd = 576, kKv = 192, kFf = 1536, kVocab = 50257;
  std::vector<Weights> layer;
  for (int64_t l = 0; l < kLayers; ++l) {
    layer.push_back(MakeWeights(type, kEmbd, kEmbd, 2));  // q, o
    layer.push_back(MakeWeights(type, kKv, kEmbd, 2));    // k, v
    layer.push_back(MakeWeights(type, kFf, kEmbd, 2));    // gate, up
    layer.push_back(MakeWeights(type, kEmbd, kFf, 1));    // down
  }
  Weights output = MakeWeights(type, kVocab, kEmbd, 1);
  const auto x = RandomFloats(n_tokens * kFf, 3);
  std::vector<float> a(n_tokens * kFf), b(n_tokens * kFf), c(n_tokens * kFf);
  std::vector<float> logits(kVocab);  // the output matrix runs on the last token only
  for (auto _ : state) {
    for (int64_t l = 0; l < kLayers; ++l) {
      const Weights* lw = &layer[4 * l];
      const WeightMatrix qkv[3] = {lw[0].mats[0], lw[1].mats[0], lw[1].mats[1]};
      float* qkv_out[3] = {a.data(), b.data(), c.data()};
      MatMulMulti(qkv, 3, x.data(), n_tokens, qkv_out, pool);
      MatMul(lw[0].mats[1], x.data(), n_tokens, a.data(), pool);
      const WeightMatrix gate_up[2] = {lw[2].mats[0], lw[2].mats[1]};
      float* gu_out[2] = {a.data(), b.data()};
      MatMulMulti(gate_up, 2, x.data(), n_tokens, gu_out, pool);
      MatMul(lw[3].mats[0], x.data(), n_tokens, c.data(), pool);
    }
    MatMul(output.mats[0], x.data() + (n_tokens - 1) * kEmbd, 1, logits.data(), pool);
    benchmark::ClobberMemory();
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(n_tokens) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Forward)
    ->ArgsProduct({{8, 1, 2, 30, 0}, {1, 512}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_VecRmsNorm(benchmark::State& state) {
  const auto x = RandomFloats(576, 1), w = RandomFloats(576, 2);
  std::vector<float> out(576);
  for (auto _ : state) {
    RmsNorm(x.data(), w.data(), 576, 1e-5f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_VecRmsNorm);

void BM_VecSoftmax(benchmark::State& state) {
  const auto x0 = RandomFloats(state.range(0), 1);
  std::vector<float> x(x0.size());
  for (auto _ : state) {
    std::copy(x0.begin(), x0.end(), x.begin());
    Softmax(x.data(), state.range(0));
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_VecSoftmax)->Arg(512)->Arg(4096);

void BM_VecRope(benchmark::State& state) {
  const auto x0 = RandomFloats(9 * 64, 1);
  std::vector<float> x(x0.size());
  std::vector<float> inv_freq(32);
  for (int i = 0; i < 32; ++i) inv_freq[i] = std::pow(10000.0f, -i / 32.0f);
  float pos = 0;
  for (auto _ : state) {
    std::copy(x0.begin(), x0.end(), x.begin());
    Rope(x.data(), 9, 64, pos++, inv_freq.data());
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_VecRope);

void BM_VecSwiGlu(benchmark::State& state) {
  // Fresh inputs each time (the copy is part of the time): applied in place over and over, the
  // values would decay into subnormals, which are slow for reasons unrelated to the kernel.
  const auto g0 = RandomFloats(1536, 1);
  const auto u = RandomFloats(1536, 2);
  std::vector<float> g(1536);
  for (auto _ : state) {
    std::copy(g0.begin(), g0.end(), g.begin());
    SwiGlu(g.data(), u.data(), 1536);
    benchmark::DoNotOptimize(g.data());
  }
}
BENCHMARK(BM_VecSwiGlu);

void BM_VecDotF32F16(benchmark::State& state) {
  const auto a = RandomFloats(64, 1);
  std::vector<uint16_t> b(64);
  F32ToF16Row(RandomFloats(64, 2).data(), b.data(), 64);
  for (auto _ : state) benchmark::DoNotOptimize(DotF32F16(a.data(), b.data(), 64));
}
BENCHMARK(BM_VecDotF32F16);

// Tiled attention (ops/attention.h) of <queries> queries over 512 cached keys of one KV head
// (dim 64, f16 rows of 3 KV heads, as in the cache): the model's inner loop. Counter:
// nanoseconds per query per key.
void BM_AttendTile(benchmark::State& state) {
  const int kRows = static_cast<int>(state.range(1)), kDim = 64, kStride = 192;
  const int n_queries = static_cast<int>(state.range(0));
  std::vector<uint16_t> k(kRows * kStride), v(kRows * kStride);
  F32ToF16Row(RandomFloats(kRows * kStride, 2).data(), k.data(), kRows * kStride);
  F32ToF16Row(RandomFloats(kRows * kStride, 3).data(), v.data(), kRows * kStride);
  const auto q = RandomFloats(int64_t(n_queries) * kDim, 1);
  std::vector<float> out(q.size());
  std::vector<AttnState> st(n_queries);
  std::vector<const float*> q_ptr(n_queries);
  std::vector<float*> o_ptr(n_queries);
  std::vector<AttnState*> st_ptr(n_queries);
  std::vector<int> n_valid(n_queries, kAttnTileRows);
  for (int i = 0; i < n_queries; ++i) {
    q_ptr[i] = q.data() + i * kDim;
    o_ptr[i] = out.data() + i * kDim;
    st_ptr[i] = &st[i];
  }
  for (auto _ : state) {
    std::fill(out.begin(), out.end(), 0.0f);
    std::fill(st.begin(), st.end(), AttnState{});
    for (int r0 = 0; r0 < kRows; r0 += kAttnTileRows) {
      AttnTile tile;
      tile.n = kAttnTileRows;
      for (int r = 0; r < kAttnTileRows; ++r) {
        tile.k[r] = &k[size_t(r0 + r) * kStride];
        tile.v[r] = &v[size_t(r0 + r) * kStride];
      }
      AttendTile(tile, kDim, AttnScoring{0.125f}, n_queries, q_ptr.data(), nullptr, n_valid.data(),
                 st_ptr.data(), o_ptr.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["ns/query-key"] =
      benchmark::Counter(double(n_queries) * kRows * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AttendTile)
    ->ArgsProduct({{1, 2, 3, 6, 12, 24, 48}, {512}})
    ->Args({3, 4096})
    ->Args({48, 4096})
    ->Unit(benchmark::kMicrosecond);

// The machine's read bandwidth: <threads> threads each summing its part of a 1 GiB buffer, as a
// decode step streams the weights. The ceiling generation speed is measured against
// (docs/benchmarks.md). Counter: GB/s.
void BM_MemoryRead(benchmark::State& state) {
  using V = uint64_t __attribute__((vector_size(32)));
  constexpr size_t kBytes = size_t(1) << 30, kVecs = kBytes / sizeof(V);
  const int threads = static_cast<int>(state.range(0));
  // Fresh anonymous memory with huge pages asked for, as packed weights are allocated.
  void* mem = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  PC_CHECK(mem != MAP_FAILED);
  madvise(mem, kBytes, MADV_HUGEPAGE);
  std::memset(mem, 1, kBytes);
  const V* buf = static_cast<const V*>(mem);
  std::vector<V> sums(threads * 4);
  for (auto _ : state) {
    Pool(threads)->ParallelFor(threads, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const size_t b = kVecs / threads * t, e = b + kVecs / threads;
        V a0 = {}, a1 = {}, a2 = {}, a3 = {};
        for (size_t i = b; i < e; i += 4) {
          a0 += buf[i];
          a1 += buf[i + 1];
          a2 += buf[i + 2];
          a3 += buf[i + 3];
        }
        sums[t * 4] = a0 + a1 + a2 + a3;
      }
    });
    benchmark::DoNotOptimize(sums.data());
  }
  munmap(mem, kBytes);
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(kBytes) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MemoryRead)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

#if defined(__x86_64__)
// Register-only loops with independent accumulators (more than latency x issue width), compiled
// for their instruction set whatever the build's baseline; each returns a value so the work
// stays. Operations counted: 2 per multiply-add lane (a multiply and an add).
constexpr int kChains = 10;

__attribute__((target("avx2,fma"))) float PeakF32x8(int64_t iters) {
  __m256 a[kChains];
#pragma GCC unroll 16
  for (int k = 0; k < kChains; ++k) a[k] = _mm256_set1_ps(0.001f * k);
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChains; ++k) a[k] = _mm256_fmadd_ps(a[k], x, y);
  }
  __m256 s = a[0];
#pragma GCC unroll 16
  for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, a[k]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) float PeakF32x16(int64_t iters) {
  __m512 a[kChains];
#pragma GCC unroll 16
  for (int k = 0; k < kChains; ++k) a[k] = _mm512_set1_ps(0.001f * k);
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChains; ++k) a[k] = _mm512_fmadd_ps(a[k], x, y);
  }
  __m512 s = a[0];
#pragma GCC unroll 16
  for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, a[k]);
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  return lanes[0] + lanes[15];
}

__attribute__((target("avx2"))) float PeakInt8Avx2(int64_t iters) {
  __m256i a[kChains];
#pragma GCC unroll 16
  for (int k = 0; k < kChains; ++k) a[k] = _mm256_set1_epi32(k);
  const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChains; ++k) {
      a[k] = _mm256_add_epi32(a[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    }
  }
  __m256i t = a[0];
#pragma GCC unroll 16
  for (int k = 1; k < kChains; ++k) t = _mm256_add_epi32(t, a[k]);
  return static_cast<float>(_mm256_extract_epi32(t, 0));
}

__attribute__((target("avx512f,avx512vnni"))) float PeakInt8Vnni(int64_t iters) {
  __m512i a[kChains];
#pragma GCC unroll 16
  for (int k = 0; k < kChains; ++k) a[k] = _mm512_set1_epi32(k);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kChains; ++k) a[k] = _mm512_dpbusd_epi32(a[k], u, s);
  }
  __m512i t = a[0];
#pragma GCC unroll 16
  for (int k = 1; k < kChains; ++k) t = _mm512_add_epi32(t, a[k]);
  int32_t lanes[16];
  _mm512_storeu_si512(lanes, t);
  return static_cast<float>(lanes[0] + lanes[15]);
}

void BM_PeakCompute(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const bool ok = kind == 0   ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                  : kind == 1 ? __builtin_cpu_supports("avx512f")
                  : kind == 2 ? __builtin_cpu_supports("avx2")
                              : __builtin_cpu_supports("avx512vnni");
  if (!ok) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  constexpr int64_t kIters = 1 << 22;
  // Operations per iteration of one thread: chains x lanes x 2.
  const double ops_per_iter = kChains * 2.0 *
                              (kind == 0   ? 8
                               : kind == 1 ? 16
                               : kind == 2 ? 32
                                           : 64);
  std::vector<float> out(threads);
  for (auto _ : state) {
    Pool(threads)->ParallelFor(threads, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        out[t] = kind == 0   ? PeakF32x8(kIters)
                 : kind == 1 ? PeakF32x16(kIters)
                 : kind == 2 ? PeakInt8Avx2(kIters)
                             : PeakInt8Vnni(kIters);
      }
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["Gop/s"] = benchmark::Counter(
      ops_per_iter * kIters * threads * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PeakCompute)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
#endif

void BM_Quantize(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  constexpr int64_t kN = 1 << 16;
  const auto x = RandomFloats(kN, 1);
  std::vector<uint8_t> out(kN * 4);
  for (auto _ : state) {
    QuantizeRow(type, x.data(), kN, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["Mfloats/s"] = benchmark::Counter(
      kN * static_cast<double>(state.iterations()) / 1e6, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Quantize)->Arg(8)->Arg(2)->Arg(1)->Arg(30);

// --isa=NAME (a Highway target name such as AVX2, as `promptcache bench --isa` takes): run the
// kernels of that target instead of the CPU's best.
std::unique_ptr<ScopedOpsTarget> SelectIsa(int* argc, char** argv) {
  std::unique_ptr<ScopedOpsTarget> scoped;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--isa=", 0) != 0) {
      argv[out++] = argv[i];
      continue;
    }
    const std::string name = arg.substr(6);
    bool found = false;
    for (int64_t t : OpsTargets()) {
      if (strcasecmp(OpsTargetName(t).c_str(), name.c_str()) == 0) {
        scoped = std::make_unique<ScopedOpsTarget>(t);
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "--isa=%s is not a target this CPU runs\n", name.c_str());
      std::exit(2);
    }
  }
  *argc = out;
  return scoped;
}

}  // namespace
}  // namespace promptcache

int main(int argc, char** argv) {
  const auto isa = promptcache::SelectIsa(&argc, argv);
  std::fprintf(stderr, "ops target: %s\n", promptcache::OpsActiveTargetName().c_str());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
