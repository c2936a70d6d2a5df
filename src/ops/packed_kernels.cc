// Matrix products of packed quantized weights (packed.h), for any number of tokens, with the
// integer form's canonical arithmetic (weight_types.h): results equal DotIntForm's bit for bit.
//
// x86 (AVX2, AVX-512): a packed group's plane vectors give, for each dword group, the quants of 8
// rows x 4 columns in one vector; each token's 4 activations of that group are broadcast and
// multiplied into the 8 rows' int32 sums at once (AVX-512 VNNI vpdpbusd, or maddubs + madd). At
// each block's end the exact sums are scaled into one float accumulator per 8 rows and token.
// Few tokens run whole rows with the accumulators in registers; many tokens run chunks of columns
// (kept in L1) for groups of 4 tokens; with AVX-512 VNNI, those run two panels at once in 512-bit
// vectors (packed_pairs-inl.h). The weights are read in the order they are stored.
//
// Other targets read the integer form back block by block (UnpackBlock) in plain C++.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/packed_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "hwy/highway.h"
#include "ops/kernel_util-inl.h"
#include "ops/matmul_internal.h"
#include "ops/packed.h"
#include "ops/quant_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---------------------------------------------------------------- x86

enum class DotKind { kUnsigned, kSigned, kVnni };

// Software prefetch distance of the K kernels, in packed groups (8 rows x 256 columns).
constexpr int kAheadGroups = 2;
// And of the 32-element kernels, in bytes.
constexpr int kPf32 = 1024;

// acc += per dword lane, the 4 products of w's unsigned bytes and x's signed bytes (kSigned: w's
// signed bytes, their signs moved onto x so maddubs cannot saturate).
template <DotKind K>
HWY_INLINE __m256i Dot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (K == DotKind::kVnni) {
#if HWY_TARGET <= HWY_AVX3
    // EVEX encoding by hand: Highway's AVX3_DL flags would let the compiler pick the VEX form
    // (AVX-VNNI), which AVX-512 VNNI CPUs such as Ice Lake do not have.
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
#endif
  } else {
    if constexpr (K == DotKind::kSigned) {
      x = _mm256_sign_epi8(x, w);
      w = _mm256_sign_epi8(w, w);
    }
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
  }
}

HWY_INLINE __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
HWY_INLINE __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// (v >> shift) & mask in every byte (16-bit shifts; the mask drops the neighbour's bits).
template <int kShift, int kMask>
HWY_INLINE __m256i Bits(__m256i v) {
  if constexpr (kShift != 0) v = _mm256_srli_epi16(v, kShift);
  return _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(kMask)));
}
HWY_INLINE __m256i BitsRt(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}

// The compile-time view of a packed format, and how its dword group G of one packed group reads
// as the 8 rows' quants ready for Dot: u (unsigned types), or the signed value (Q8_0, IQ4 types),
// flipped to value + 128 when kFlip (VNNI's unsigned multiply).
template <GgmlType kType, bool kFlip>
struct Fmt {
  static constexpr PackedFormat f = *FindPackedFormat(kType);
  static constexpr bool kK = f.ng == 64;
  static constexpr bool kSigned = f.p8 || f.lut;
  static constexpr bool kMin = f.m_offset >= 0;
  static constexpr int kBias = kSigned ? (kFlip ? 128 : 0) : f.bias;

  static HWY_INLINE __m256i Group(const uint8_t* g, int G) {
    constexpr int ng = f.ng;
    __m256i u;
    if constexpr (f.p8) {
      u = Load(g + f.p8_offset + G * 32);
    } else if constexpr (f.p4) {
      const __m256i v = Load(g + f.p4_offset + (G % (ng / 2)) * 32);
      u = G < ng / 2 ? Bits<0, 15>(v) : Bits<4, 15>(v);
      if constexpr (f.p1) {
        const __m256i h = Load(g + f.p1_offset + (G % (ng / 8)) * 32);
        u = _mm256_or_si256(u, _mm256_slli_epi16(BitsRt(h, G / (ng / 8), 1), 4));
      }
      if constexpr (f.p2) {
        const __m256i h = Load(g + f.p2_offset + (G % (ng / 4)) * 32);
        u = _mm256_or_si256(u, _mm256_slli_epi16(BitsRt(h, 2 * (G / (ng / 4)), 3), 4));
      }
      if constexpr (f.lut) {
        const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIQ4Values));
        u = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), u);
      }
    } else {
      const __m256i v = Load(g + f.p2_offset + (G % (ng / 4)) * 32);
      u = BitsRt(v, 2 * (G / (ng / 4)), 3);
      if constexpr (f.p1) {
        const __m256i h = Load(g + f.p1_offset + (G % (ng / 8)) * 32);
        u = _mm256_or_si256(u, _mm256_slli_epi16(BitsRt(h, G / (ng / 8), 1), 2));
      }
    }
    if constexpr (kFlip) u = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
    return u;
  }

#if HWY_TARGET <= HWY_AVX3
  // Group() of two panels' groups at once, g0's in the low half: the same bytes, with each plane
  // vector loaded for both and the bits taken out once.
  static HWY_INLINE __m512i Group2(const uint8_t* g0, const uint8_t* g1, int G) {
    constexpr int ng = f.ng;
    auto load2 = [&](int at) {
      return _mm512_inserti64x4(_mm512_castsi256_si512(Load(g0 + at)), Load(g1 + at), 1);
    };
    auto bits = [](__m512i v, int shift, int mask) {
      return _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                              _mm512_set1_epi8(static_cast<char>(mask)));
    };
    __m512i u;
    if constexpr (f.p8) {
      u = load2(f.p8_offset + G * 32);
    } else if constexpr (f.p4) {
      const __m512i v = load2(f.p4_offset + (G % (ng / 2)) * 32);
      u = bits(v, G < ng / 2 ? 0 : 4, 15);
      if constexpr (f.p1) {
        const __m512i h = load2(f.p1_offset + (G % (ng / 8)) * 32);
        u = _mm512_or_si512(u, _mm512_slli_epi16(bits(h, G / (ng / 8), 1), 4));
      }
      if constexpr (f.p2) {
        const __m512i h = load2(f.p2_offset + (G % (ng / 4)) * 32);
        u = _mm512_or_si512(u, _mm512_slli_epi16(bits(h, 2 * (G / (ng / 4)), 3), 4));
      }
      if constexpr (f.lut) {
        const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIQ4Values));
        u = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), u);
      }
    } else {
      const __m512i v = load2(f.p2_offset + (G % (ng / 4)) * 32);
      u = bits(v, 2 * (G / (ng / 4)), 3);
      if constexpr (f.p1) {
        const __m512i h = load2(f.p1_offset + (G % (ng / 8)) * 32);
        u = _mm512_or_si512(u, _mm512_slli_epi16(bits(h, G / (ng / 8), 1), 2));
      }
    }
    if constexpr (kFlip) u = _mm512_xor_si512(u, _mm512_set1_epi8(static_cast<char>(0x80)));
    return u;
  }
#endif
};

// One token's activations from a chunk's first column.
struct TokenActs {
  const int8_t* q;
  const float* d;
  const int16_t* sums;
  const float* s;
};

// Rows of a panel of 8 that are real (the rest are padding, never stored).
HWY_INLINE __m256i RowMask(int valid) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

HWY_INLINE __m256 Halves(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Where to prefetch `offset` bytes ahead in a panel's stream of `len` bytes: past its end, the
// stream goes on `skip` bytes further (0: right after).
HWY_INLINE const uint8_t* Ahead(const uint8_t* g, int64_t offset, int64_t len, int64_t skip) {
  return g + offset + (offset >= len ? skip : 0);
}

// fn(0) .. fn(n - 1), the loop unrolled kUnroll times (the pragma needs a literal).
template <int kUnroll, class Fn>
HWY_INLINE void UnrolledFor(int n, Fn&& fn) {
  static_assert(kUnroll == 1 || kUnroll == 8 || kUnroll == 16);
  if constexpr (kUnroll == 16) {
    HWY_UNROLL(16)
    for (int i = 0; i < n; ++i) fn(i);
  } else if constexpr (kUnroll == 8) {
    HWY_UNROLL(8)
    for (int i = 0; i < n; ++i) fn(i);
  } else {
    HWY_UNROLL(1)
    for (int i = 0; i < n; ++i) fn(i);
  }
}

// Integer sums are exact in any order, so with few tokens each (panel, token) sum is split over
// kSplit accumulators (dword groups round-robin) to hide vpdpbusd's latency: H * T * kSplit
// independent chains.
template <int T>
constexpr int SplitFor() {
  return T == 1 ? 4 : T == 2 ? 2 : 1;
}
template <int N>
HWY_INLINE __m256i SumSplit(const __m256i* v) {
  if constexpr (N == 4) {
    return _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
  } else if constexpr (N == 2) {
    return _mm256_add_epi32(v[0], v[1]);
  } else {
    return v[0];
  }
}

// 32-element blocks [b0, b0 + n): H panels (g[h] at block b0) x T tokens into F.
template <class F, DotKind K, int H, int T>
HWY_INLINE void Blocks32(const uint8_t* const* g, int n, int64_t skip, const TokenActs* tok,
                         __m256 (&acc)[H][T]) {
  constexpr int kSplit = SplitFor<T>();
  constexpr int kGB = F::f.group_bytes;
  constexpr int kShift = F::kBias ? __builtin_ctz(F::kBias) : 0;
  for (int b = 0; b < n; ++b) {
    __m256i I[H][T][kSplit];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      for (int o = 0; o < kGB; o += 64)
        hwy::Prefetch(Ahead(g[h], b * kGB + kPf32 + o, n * kGB, skip));
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        HWY_UNROLL(4)
        for (int a = 0; a < kSplit; ++a) I[h][t][a] = _mm256_setzero_si256();
      }
    }
    HWY_UNROLL(8)
    for (int G = 0; G < 8; ++G) {
      __m256i W[H];
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) W[h] = F::Group(g[h] + b * kGB, G);
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        const __m256i X = Broadcast4(tok[t].q + 32 * b + 4 * G);
        HWY_UNROLL(8)
        for (int h = 0; h < H; ++h) I[h][t][G % kSplit] = Dot<K>(I[h][t][G % kSplit], W[h], X);
      }
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(tok[t].d[b]);
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        __m256i isum = SumSplit<kSplit>(I[h][t]);
        if constexpr (kShift != 0) {
          isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(tok[t].sums[b] << kShift));
        }
        const __m256 dd = _mm256_mul_ps(Halves(g[h] + b * kGB), dx);
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, acc[h][t]);
        if constexpr (F::kMin) {
          const __m256 m = Halves(g[h] + b * kGB + F::f.m_offset);
          acc[h][t] = _mm256_fmadd_ps(m, _mm256_set1_ps(tok[t].s[b]), acc[h][t]);
        }
      }
    }
  }
}

// The correction term of one super-block for 8 rows and one token: sum over the integer-scale
// groups of coef (int8 [groups][8]) times the token's activation sum over the group.
template <int kSub>
HWY_INLINE __m256i Correction(const uint8_t* coef, const int16_t* sums) {
  constexpr int kGroups = 256 / kSub;
  __m256i c = _mm256_setzero_si256();
  HWY_UNROLL(8)
  for (int j = 0; j < kGroups; j += 2) {
    // Lane r: (coef[j][r], coef[j + 1][r]) as int16, times (sum j, sum j + 1).
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(coef + j * 8));
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(coef + (j + 1) * 8));
    const __m256i pairs = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    int32_t s;
    if constexpr (kSub == 16) {
      std::memcpy(&s, sums + j, 4);
    } else {  // groups of 32: two sums of 16 each
      const int lo = sums[2 * j] + sums[2 * j + 1], hi = sums[2 * j + 2] + sums[2 * j + 3];
      s = static_cast<int32_t>(static_cast<uint16_t>(lo) | static_cast<uint32_t>(hi) << 16);
    }
    c = _mm256_add_epi32(c, _mm256_madd_epi16(pairs, _mm256_set1_epi32(s)));
  }
  return c;
}

// K super-blocks [s0, s0 + n): H panels x T tokens into F.
template <class F, DotKind K, int H, int T>
HWY_INLINE void Blocks256(const uint8_t* const* g, int n, int64_t skip, const TokenActs* tok,
                          __m256 (&acc)[H][T]) {
  constexpr int kGB = F::f.group_bytes;
  constexpr int kSub = F::f.sub;
  constexpr int kShift = F::kBias ? __builtin_ctz(F::kBias) : 0;
  constexpr int kSplit = SplitFor<T>();
  constexpr int kLines = (kGB + 63) / 64, kLinesPerJ = (kLines + 256 / kSub - 1) / (256 / kSub);
  for (int s = 0; s < n; ++s) {
    __m256i S[H][T];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) S[h][t] = _mm256_setzero_si256();
    }
    auto sub_block = [&](int j) __attribute__((always_inline)) {
      __m256i I[H][T][kSplit];
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        // Every cache line of the group kAheadGroups ahead, spread over its integer-scale groups.
        HWY_UNROLL(8)
        for (int l = j * kLinesPerJ; l < (j + 1) * kLinesPerJ && l < kLines; ++l) {
          hwy::Prefetch(Ahead(g[h], (s + kAheadGroups) * kGB + l * 64, n * kGB, skip));
        }
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          HWY_UNROLL(4)
          for (int a = 0; a < kSplit; ++a) I[h][t][a] = _mm256_setzero_si256();
        }
      }
      HWY_UNROLL(8)
      for (int i = 0; i < kSub / 4; ++i) {
        const int G = j * (kSub / 4) + i;
        __m256i W[H];
        HWY_UNROLL(8)
        for (int h = 0; h < H; ++h) W[h] = F::Group(g[h] + s * kGB, G);
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          const __m256i X = Broadcast4(tok[t].q + 256 * s + 4 * G);
          HWY_UNROLL(8)
          for (int h = 0; h < H; ++h) {
            I[h][t][i % kSplit] = Dot<K>(I[h][t][i % kSplit], W[h], X);
          }
        }
      }
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) I[h][t][0] = SumSplit<kSplit>(I[h][t]);
      }
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
            reinterpret_cast<const __m128i*>(g[h] + s * kGB + F::f.sc_offset + j * 8)));
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          S[h][t] = _mm256_add_epi32(S[h][t], _mm256_mullo_epi32(I[h][t][0], sc));
        }
      }
    };
    // With many tokens the sub-blocks are a loop: the super-block unrolled whole outgrew the CPU's
    // decoded-instruction cache (llama3.2-1b Q4_K_M's prompt with AVX2 took 20-40% longer).
    // Decoding's one or two tokens keep the unrolled form, measured faster there.
    UnrolledFor<T <= 2 ? 16 : 1>(256 / kSub, sub_block);
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(tok[t].d[s]);
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        const uint8_t* grp = g[h] + s * kGB;
        const __m256 dd = _mm256_mul_ps(Halves(grp), dx);
        if constexpr (F::kMin) {
          const __m256i c = Correction<kSub>(grp + F::f.mn_offset, tok[t].sums + 16 * s);
          acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[h][t]), dd, acc[h][t]);
          const __m256 md = _mm256_mul_ps(Halves(grp + F::f.m_offset), dx);
          acc[h][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(c), md, acc[h][t]);
        } else if constexpr (kShift != 0) {
          const __m256i c = _mm256_slli_epi32(
              Correction<kSub>(grp + F::f.sc_offset, tok[t].sums + 16 * s), kShift);
          acc[h][t] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(S[h][t], c)), dd, acc[h][t]);
        } else {
          acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[h][t]), dd, acc[h][t]);
        }
      }
    }
  }
}

// Tokens [t0, t0 + T) over blocks [b0, b0 + n) of the panels from p0 (H of them), accumulated
// into out (starting from 0 when b0 == 0).
template <class F, DotKind K, int H, int T>
void RunTile(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int64_t pstride, int64_t b0,
             int n, int64_t t0) {
  const int64_t cols = pm.cols, rows = pm.rows;
  const int64_t x_blocks = cols / (F::kK ? 256 : 32), x_sums = cols / (F::kK ? 16 : 32);
  const int64_t k0 = b0 * (F::kK ? 256 : 32);
  TokenActs tok[T];
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) {
    const int64_t i = t0 + t;
    tok[t] = {job.xq.q + i * cols + k0, job.xq.d + i * x_blocks + b0,
              job.xq.sums + i * x_sums + k0 / (F::kK ? 16 : 32),
              F::kK ? nullptr : job.xq.s + i * x_blocks + b0};
  }
  const uint8_t* g[H];
  __m256 acc[H][T];
  __m256i mask[H];
  HWY_UNROLL(8)
  for (int h = 0; h < H; ++h) {
    const int64_t p = p0 + h * pstride;
    g[h] = pm.Group(std::min(p, (rows - 1) / 8), b0);
    mask[h] = RowMask(static_cast<int>(std::clamp<int64_t>(rows - 8 * p, 0, 8)));
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      float* o = job.out + (t0 + t) * rows + 8 * p;
      acc[h][t] = b0 == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(o, mask[h]);
    }
  }
  // A panel's stream goes on in the next tile's same stream: H panels on when they are
  // consecutive and whole rows are run; else right after.
  const int64_t skip =
      n == pm.blocks && pstride == 1 ? (H - 1) * static_cast<int64_t>(pm.panel_bytes) : 0;
  if constexpr (F::kK) {
    Blocks256<F, K, H, T>(g, n, skip, tok, acc);
  } else {
    Blocks32<F, K, H, T>(g, n, skip, tok, acc);
  }
  HWY_UNROLL(8)
  for (int h = 0; h < H; ++h) {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      _mm256_maskstore_ps(job.out + (t0 + t) * rows + 8 * (p0 + h * pstride), mask[h], acc[h][t]);
    }
  }
}

#if HWY_TARGET <= HWY_AVX3
#include "ops/packed_pairs-inl.h"  // NOLINT(build/include): per target
#endif

constexpr int kMaxRowTokens = 4;           // up to this many tokens, whole rows at a time
constexpr int64_t kChunkBytes = 16 << 10;  // else: column chunks of about this many packed bytes

template <class F, DotKind K, int H, int T>
void RunTokens(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int64_t pstride,
               int64_t b0, int n, int64_t t0, int64_t t1) {
  for (; t0 + T <= t1; t0 += T) RunTile<F, K, H, T>(job, pm, p0, pstride, b0, n, t0);
  switch (t1 - t0) {
    case 3:
      return RunTile<F, K, H, 3>(job, pm, p0, pstride, b0, n, t0);
    case 2:
      return RunTile<F, K, H, 2>(job, pm, p0, pstride, b0, n, t0);
    case 1:
      return RunTile<F, K, H, 1>(job, pm, p0, pstride, b0, n, t0);
    default:
      return;
  }
}

// Panels [q0, q1) (of 8 rows), all tokens. Few tokens run whole rows, the H panels of a tile
// a 1/H of the range apart, so that each is one long sequential stream through the weights (the
// pattern memory prefetchers serve best); many tokens run column chunks of H consecutive panels.
template <class F, DotKind K, int H>
void RunPanels(const MatMulJob& job, const PackedMatrix& pm, int64_t q0, int64_t q1) {
  const int64_t n_tokens = job.n_tokens;
  const int blocks = static_cast<int>(pm.blocks);
  if (n_tokens <= kMaxRowTokens) {
    const int64_t step = (q1 - q0) / H;
    for (int64_t j = 0; j < step; ++j) {
      RunTokens<F, K, H, 4>(job, pm, q0 + j, step, 0, blocks, 0, n_tokens);
    }
    for (int64_t p = q0 + H * step; p < q1; ++p) {
      RunTokens<F, K, 1, 4>(job, pm, p, 1, 0, blocks, 0, n_tokens);
    }
    return;
  }
#if HWY_TARGET <= HWY_AVX3
  if constexpr (K == DotKind::kVnni) {
    // Pairs of panels in 512-bit vectors, kPairs of them per pass; a panel left over below.
    constexpr int kPairs = 2;
    const int chunk =
        std::max<int>(1, static_cast<int>(kChunkBytes / (2 * kPairs * F::f.group_bytes)));
    for (; q0 + 2 * kPairs <= q1; q0 += 2 * kPairs) {
      for (int b0 = 0; b0 < blocks; b0 += chunk) {
        RunTokens512<F, kPairs, 6>(job, pm, q0, b0, std::min(chunk, blocks - b0), 0, n_tokens);
      }
    }
    for (; q0 + 2 <= q1; q0 += 2) {
      for (int b0 = 0; b0 < blocks; b0 += chunk) {
        RunTokens512<F, 1, 4>(job, pm, q0, b0, std::min(chunk, blocks - b0), 0, n_tokens);
      }
    }
  }
#endif
  const int chunk = std::max<int>(1, static_cast<int>(kChunkBytes / (H * F::f.group_bytes)));
  for (int64_t p0 = q0; p0 < q1; p0 += H) {
    const int h = static_cast<int>(std::min<int64_t>(H, q1 - p0));
    for (int b0 = 0; b0 < blocks; b0 += chunk) {
      const int n = std::min(chunk, blocks - b0);
      if (h == H) {
        RunTokens<F, K, H, 4>(job, pm, p0, 1, b0, n, 0, n_tokens);
      } else {  // an odd panel left: alone
        RunTokens<F, K, 1, 4>(job, pm, p0, 1, b0, n, 0, n_tokens);
      }
    }
  }
}

#if HWY_TARGET <= HWY_AVX3
constexpr int kPanels = 2;  // 32 registers: two panels per pass
#else
constexpr int kPanels = 1;
#endif

// Whether kType's packed quants are signed values (Q8_0, IQ4 types) rather than unsigned u, and
// so the multiply-add its panels take without VNNI.
template <GgmlType kType>
constexpr bool kSignedQuants = FindPackedFormat(kType)->p8 || FindPackedFormat(kType)->lut;
template <GgmlType kType>
constexpr DotKind kPlainDot = kSignedQuants<kType> ? DotKind::kSigned : DotKind::kUnsigned;

// The multiply-add RunType runs kType's panels with on this target and CPU.
template <GgmlType kType>
DotKind ChooseDot() {
#if HWY_TARGET <= HWY_AVX3
  if (VnniEnabled()) return DotKind::kVnni;
#endif
  return kPlainDot<kType>;
}

template <GgmlType kType>
void RunType(const MatMulJob& job, const PackedMatrix& pm, int64_t q0, int64_t q1) {
#if HWY_TARGET <= HWY_AVX3
  if (ChooseDot<kType>() == DotKind::kVnni) {
    return RunPanels<Fmt<kType, kSignedQuants<kType>>, DotKind::kVnni, kPanels>(job, pm, q0, q1);
  }
#endif
  return RunPanels<Fmt<kType, false>, kPlainDot<kType>, kPanels>(job, pm, q0, q1);
}

// Calls fn(std::integral_constant<GgmlType, T>()) for the packed type T == type.
template <class Fn>
decltype(auto) VisitPackedType(GgmlType type, Fn&& fn) {
  using T = GgmlType;
  switch (type) {
    case T::kQ4_0:
      return fn(std::integral_constant<T, T::kQ4_0>());
    case T::kQ4_1:
      return fn(std::integral_constant<T, T::kQ4_1>());
    case T::kQ5_0:
      return fn(std::integral_constant<T, T::kQ5_0>());
    case T::kQ5_1:
      return fn(std::integral_constant<T, T::kQ5_1>());
    case T::kQ8_0:
      return fn(std::integral_constant<T, T::kQ8_0>());
    case T::kIQ4_NL:
      return fn(std::integral_constant<T, T::kIQ4_NL>());
    case T::kQ2_K:
      return fn(std::integral_constant<T, T::kQ2_K>());
    case T::kQ3_K:
      return fn(std::integral_constant<T, T::kQ3_K>());
    case T::kQ4_K:
      return fn(std::integral_constant<T, T::kQ4_K>());
    case T::kQ5_K:
      return fn(std::integral_constant<T, T::kQ5_K>());
    case T::kQ6_K:
      return fn(std::integral_constant<T, T::kQ6_K>());
    case T::kIQ4_XS:
      return fn(std::integral_constant<T, T::kIQ4_XS>());
    default:
      PC_CHECK(false && "not a packed type");
      __builtin_unreachable();
  }
}

void PackedMatMulRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  const PackedMatrix& pm = *job.w->packed;
  PC_CHECK(r0 % 8 == 0);
  const int64_t q0 = r0 / 8, q1 = (r1 + 7) / 8;
  VisitPackedType(pm.format->type,
                  [&](auto type) { RunType<decltype(type)::value>(job, pm, q0, q1); });
}

const char* PackedKernelNameImpl(GgmlType type) {
  if (FindPackedFormat(type) == nullptr) return "unsupported";
  return VisitPackedType(type, [](auto t) {
    switch (ChooseDot<decltype(t)::value>()) {
      case DotKind::kVnni:
        return "packed_int8_vpdpbusd";
      case DotKind::kSigned:
        return "packed_int8_maddubs_sign";
      case DotKind::kUnsigned:
        break;
    }
    return "packed_int8_maddubs";
  });
}

#else
// ---------------------------------------------------------------- portable

void PackedMatMulRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  const PackedMatrix& pm = *job.w->packed;
  const WeightTypeInfo& t = *job.info;
  const bool k_type = t.act == ActFormat::kQ8_K;
  const int64_t sums_per_token = pm.cols / (k_type ? 16 : 32);
  const int sums_per_block = k_type ? 16 : 1;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(job.n_tokens));
  IntBlock b;
  for (int64_t r = r0; r < r1; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t i = 0; i < pm.blocks; ++i) {
      UnpackBlock(pm, r, i, &b);
      for (int64_t k = 0; k < job.n_tokens; ++k) {
        acc[k] = AccumulateBlock(t, b, job.xq.q + k * pm.cols + i * t.block_elems,
                                 job.xq.d[k * pm.blocks + i],
                                 job.xq.sums + k * sums_per_token + i * sums_per_block,
                                 k_type ? 0.0f : job.xq.s[k * pm.blocks + i], acc[k]);
      }
    }
    for (int64_t k = 0; k < job.n_tokens; ++k) job.out[k * pm.rows + r] = acc[k];
  }
}

const char* PackedKernelNameImpl(GgmlType type) {
  return FindPackedFormat(type) != nullptr ? "packed_int8_portable" : "unsupported";
}

#endif  // HWY_TARGET

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache::internal {

HWY_EXPORT(PackedMatMulRowsImpl);
HWY_EXPORT(PackedKernelNameImpl);

const char* PackedKernelName(GgmlType type) {
  return HWY_DYNAMIC_DISPATCH(PackedKernelNameImpl)(type);
}

void PackedMatMulRows(const MatMulJob& job, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(PackedMatMulRowsImpl)(job, r0, r1);
}

}  // namespace promptcache::internal
#endif  // HWY_ONCE
