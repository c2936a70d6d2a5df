// How the packed kernels (packed_tile-inl.h) run a matrix: which vector width, tile and
// multiply-add run which rows and tokens, for one packed type (RunType). Shared by the two units
// that instantiate it: packed_kernels.cc (every type but the low-bit i-quants, and the dispatch)
// and packed_kernels_iq.cc (the low-bit i-quants' three shapes), so that they compile in parallel.
//
// Included once per Highway target after hwy/highway.h, as Highway's -inl.h convention requires.

// Per-target include guard (toggled by foreach_target).
#if defined(PC_OPS_PACKED_RUN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PC_OPS_PACKED_RUN_INL_H_
#undef PC_OPS_PACKED_RUN_INL_H_
#else
#define PC_OPS_PACKED_RUN_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "core/check.h"
#include "hwy/highway.h"
#include "ops/matmul_internal.h"
#include "ops/packed.h"
#include "ops/packed_tile-inl.h"
#include "ops/packed_width-inl.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

using Width256 = PanelWidth<1>;
#if HWY_TARGET <= HWY_AVX3
using Width512 = PanelWidth<2>;
#endif

constexpr int kMaxRowTokens = 4;           // up to this many tokens, whole rows at a time
constexpr int64_t kChunkBytes = 16 << 10;  // else: column chunks of about this many packed bytes
// ... and groups of tokens whose int8 activations take about this many bytes, so that they stay
// in L2 while every panel of the range runs over them (the weights then stream from memory once
// per group, which the kernels prefetch). All tokens at once, llama3.2-1b's ffn_down (8192
// columns, 171 tokens: 1.4 MB) reread its activations from L3 for every 32 rows.
constexpr int64_t kGroupActBytes = 256 << 10;

// But at least this many tokens: a group's every column chunk is decoded once (kDecodeTokens
// below) for the group's tiles, and the budget alone left 2-4 tiles to share each decode over
// wide rows (24 tokens over llama3.2-1b's ffn_down, 8192 columns; 12 over 14336): 48 tokens
// measured 5-25% faster there (docs/benchmarks.md), and 72 no faster than 48.
constexpr int64_t kMinGroupTokens = 48;

// Tokens per group for rows of `cols` columns: groups of about equal size, in multiples of 12
// (whole tiles of 6 tokens, and of 4).
inline int64_t TokenGroup(int64_t cols, int64_t n_tokens) {
  constexpr int64_t kUnit = 12;
  const int64_t fit = std::max<int64_t>(kMinGroupTokens, kGroupActBytes / cols / kUnit * kUnit);
  const int64_t groups = (n_tokens + fit - 1) / fit;
  return ((n_tokens + groups - 1) / groups + kUnit - 1) / kUnit * kUnit;
}

#if HWY_TARGET <= HWY_AVX3
constexpr int kVectors256 = 2;  // 32 registers: two 256-bit vectors of panels per pass
#else
constexpr int kVectors256 = 1;
#endif

// With at least this many tokens, the tiles decode each column chunk once (Decoded) and run
// every tile of the token group over the decoded bytes; fewer decode in each tile.
constexpr int64_t kDecodeTokens = 12;
// The decoded chunk's bytes, about: it stays in L1 beside the activations.
constexpr int64_t kDecodedChunkBytes = 24 << 10;

// This thread's buffer for decoded chunks, at least `bytes` long.
inline uint8_t* DecodeScratch(size_t bytes) {
  thread_local std::unique_ptr<uint8_t, decltype(&std::free)> buf{nullptr, &std::free};
  thread_local size_t size = 0;
  if (size < bytes) {
    size = (bytes + 63) / 64 * 64;
    buf.reset(static_cast<uint8_t*>(std::aligned_alloc(64, size)));
    PC_CHECK(buf != nullptr && "out of memory for the decode scratch");
  }
  return buf.get();
}

template <class F, class W, int... kG>
HWY_INLINE void DecodeGroups(const uint8_t* const* g, uint8_t* dst,
                             std::integer_sequence<int, kG...>) {
  const typename W::D8 d8;
  constexpr int kVecBytes = Decoded<F, W::kPanels>::kVecBytes;  // as Decoded::Group reads them
  (hn::StoreU(F::template Group<W>(g, kG), d8, dst + kVecBytes * kG), ...);
}

// Blocks [b0, b0 + n) of the H vectors of W::kPanels panels from p0, decoded into `out`
// (Decoded's layout, vector after vector).
template <class F, class W, int H>
void DecodeChunk(const PackedMatrix& pm, int64_t p0, int64_t b0, int n, uint8_t* out) {
  constexpr int kP = W::kPanels;
  using D = Decoded<F, kP>;
  constexpr int kHB = D::kHeaderBytes;
  const int64_t last = (pm.rows - 1) / 8;
  for (int h = 0; h < H; ++h) {
    for (int b = 0; b < n; ++b) {
      const uint8_t* g[kP];
      uint8_t* dst = out + (h * n + b) * D::f.group_bytes;
      for (int k = 0; k < kP; ++k) {
        g[k] = pm.Group(std::min(p0 + kP * h + k, last), b0 + b);
        std::memcpy(dst + k * kHB, g[k], kHB);
      }
      DecodeGroups<F, W>(g, dst + kP * kHB, std::make_integer_sequence<int, F::f.ng>());
    }
  }
}

// Panels [p0, p0 + H * W::kPanels), tokens [t0, t1), in column chunks of `chunk` blocks.
template <class F, DotKind K, class W, int H, int T>
void RunChunks(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int chunk, int64_t t0,
               int64_t t1) {
  const int blocks = static_cast<int>(pm.blocks);
  // The main tiles only (not those of a pair or panel left over).
  if constexpr (H == (W::kPanels == 2 ? 2 : kVectors256)) {
    if (t1 - t0 >= kDecodeTokens) {
      using D = Decoded<F, W::kPanels>;
      const int dchunk =
          std::max<int>(1, static_cast<int>(kDecodedChunkBytes / (H * D::f.group_bytes)));
      uint8_t* scratch = DecodeScratch(static_cast<size_t>(H) * dchunk * D::f.group_bytes);
      for (int b0 = 0; b0 < blocks; b0 += dchunk) {
        const int n = std::min(dchunk, blocks - b0);
        DecodeChunk<F, W, H>(pm, p0, b0, n, scratch);
        RunTokens<D, K, W, H, T>(job, pm, p0, W::kPanels, b0, n, t0, t1, scratch);
      }
      return;
    }
  }
  for (int b0 = 0; b0 < blocks; b0 += chunk) {
    RunTokens<F, K, W, H, T>(job, pm, p0, W::kPanels, b0, std::min(chunk, blocks - b0), t0, t1);
  }
}

// Panels [q0, q1) (of 8 rows), tokens [t0, t1), more than kMaxRowTokens of them.
template <class F, DotKind K>
void RunPanelTokens(const MatMulJob& job, const PackedMatrix& pm, int64_t q0, int64_t q1,
                    int64_t t0, int64_t t1) {
  constexpr int H = kVectors256;
#if HWY_TARGET <= HWY_AVX3
  if constexpr (K == DotKind::kVnni) {
    // Two vectors of two panels per pass, in tiles of 6 tokens (measured faster than 4); a pair
    // left over below with 4; a panel left over after them, 256-bit.
    constexpr int kPairs = 2;
    const int chunk =
        std::max<int>(1, static_cast<int>(kChunkBytes / (2 * kPairs * F::f.group_bytes)));
    for (; q0 + 2 * kPairs <= q1; q0 += 2 * kPairs) {
      RunChunks<F, K, Width512, kPairs, 6>(job, pm, q0, chunk, t0, t1);
    }
    for (; q0 + 2 <= q1; q0 += 2) RunChunks<F, K, Width512, 1, 4>(job, pm, q0, chunk, t0, t1);
  }
#endif
  const int chunk = std::max<int>(1, static_cast<int>(kChunkBytes / (H * F::f.group_bytes)));
  for (int64_t p0 = q0; p0 < q1; p0 += H) {
    if (p0 + H <= q1) {
      RunChunks<F, K, Width256, H, 4>(job, pm, p0, chunk, t0, t1);
    } else {  // an odd panel left: alone
      RunChunks<F, K, Width256, 1, 4>(job, pm, p0, chunk, t0, t1);
    }
  }
}

// Panels [q0, q1) (of 8 rows), all tokens. Few tokens run whole rows, 256-bit, the H vectors of
// a tile a 1/H of the range apart, so that each is one long sequential stream through the
// weights (the pattern memory prefetchers serve best); many tokens run in groups (TokenGroup),
// each over column chunks of consecutive panels, with AVX-512 VNNI two panels per 512-bit vector
// (on CPUs that run 512-bit vectors at full width, twice the products per instruction issued),
// each chunk decoded once for the group's tiles (RunChunks).
template <class F, DotKind K>
void RunPanels(const MatMulJob& job, const PackedMatrix& pm, int64_t q0, int64_t q1) {
  constexpr int H = kVectors256;
  const int64_t n_tokens = job.n_tokens;
  if (n_tokens <= kMaxRowTokens) {
    const int blocks = static_cast<int>(pm.blocks);
    const int64_t step = (q1 - q0) / H;
    for (int64_t j = 0; j < step; ++j) {
      RunTokens<F, K, Width256, H, 4>(job, pm, q0 + j, step, 0, blocks, 0, n_tokens);
    }
    for (int64_t p = q0 + H * step; p < q1; ++p) {
      RunTokens<F, K, Width256, 1, 4>(job, pm, p, 1, 0, blocks, 0, n_tokens);
    }
    return;
  }
  const int64_t group = TokenGroup(pm.cols, n_tokens);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += group) {
    RunPanelTokens<F, K>(job, pm, q0, q1, t0, std::min(n_tokens, t0 + group));
  }
}

// Whether kType's packed quants are signed values (Q8_0, IQ4 types) rather than unsigned u, and
// so the multiply-add its panels take without VNNI.
template <GgmlType kType>
constexpr bool kSignedQuants = FindPackedFormat(kType)->p8 ||
                               FindPackedFormat(kType)->lut != nullptr;
template <GgmlType kType>
constexpr DotKind kPlainDot = kSignedQuants<kType> ? DotKind::kSigned : DotKind::kUnsigned;

// The multiply-add RunType runs f's panels with on this target and CPU.
inline DotKind ChooseDot(const PackedFormat& f) {
#if HWY_TARGET <= HWY_AVX3
  if (VnniEnabled()) return DotKind::kVnni;
#endif
  return f.p8 || f.lut != nullptr ? DotKind::kSigned : DotKind::kUnsigned;
}

template <GgmlType kType>
void RunType(const MatMulJob& job, const PackedMatrix& pm, int64_t q0, int64_t q1) {
#if HWY_TARGET <= HWY_AVX3
  if (ChooseDot(*FindPackedFormat(kType)) == DotKind::kVnni) {
    return RunPanels<Fmt<kType, kSignedQuants<kType>>, DotKind::kVnni>(job, pm, q0, q1);
  }
#endif
  return RunPanels<Fmt<kType, false>, kPlainDot<kType>>(job, pm, q0, q1);
}

// Panels [q0, q1) of a low-bit i-quant matrix (packed_kernels_iq.cc).
void PackedMatMulIQuantRows(const MatMulJob& job, const PackedMatrix& pm, int64_t q0, int64_t q1);

#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#endif  // PC_OPS_PACKED_RUN_INL_H_
