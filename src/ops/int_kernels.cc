// Matrix products of quantized weights in their integer form (weight_types.h), for any number of
// tokens: decoding (one token or a few) and prefill (hundreds) run the same arithmetic, so a
// token's result never depends on its batch, and every target's result equals DotIntForm's.
//
// x86 (AVX2 and AVX-512): 16 weight rows at a time are decoded, a chunk of columns at a time,
// into a panel in L1: int8 quants interleaved so one 256-bit vector holds 4 consecutive quants of
// 8 rows, plus the rows' scales. A micro-kernel then runs every token over the panel: each 4-byte
// group of a token's activations is broadcast and multiplied into the 8 rows' int32 sums at once
// (AVX-512 VNNI vpdpbusd, or maddubs + madd), so no horizontal sums are needed; at each block's
// end the exact int32 sums are scaled into one float accumulator per row and token, in the
// canonical order. Signed quants are biased to unsigned for the u8 x s8 multiply (q + bias) and
// the bias is taken back exactly with the activations' block sums.
//
// Other targets decode each row's blocks once and dot them with every token in plain C++.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/int_kernels.cc"
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
#include "ops/quant_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

// ---------------------------------------------------------------- activations

// Bit-identical to QuantizeActivationsReference (weight_types.cc).
void QuantizeQ8_0Form(const float* x, int64_t n, int8_t* q, float* d, int16_t* sums, float* s) {
  const DF df;
  const DI32 di32;
  const DI8Q di8;
  const size_t nf = hn::Lanes(df);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    auto vmax = hn::Zero(df);
    for (size_t j = 0; j < kBlock; j += nf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float scale = amax / 127.0f;
    const auto inv = hn::Set(df, amax != 0.0f ? 127.0f / amax : 0.0f);
    auto sum = hn::Zero(df);
    for (size_t j = 0; j < kBlock; j += nf) {
      const auto r = hn::Round(hn::Mul(hn::LoadU(df, xb + j), inv));  // half to even
      hn::StoreU(hn::DemoteTo(di8, hn::ConvertTo(di32, r)), di8, q + b * kBlock + j);
      sum = hn::Add(sum, r);
    }
    const float total = ReduceSum(sum);  // exact: small integers
    d[b] = F16ToF32(F32ToF16(scale));
    sums[b] = static_cast<int16_t>(total);
    s[b] = F16ToF32(F32ToF16(scale * total));
  }
}

void QuantizeQ8_KForm(const float* x, int64_t n, int8_t* q, float* d, int16_t* sums) {
  constexpr int kSuper = quant::kSuperBlock;
  const DF df;
  const DI32 di32;
  const DI8Q di8;
  const size_t nf = hn::Lanes(df);
  for (int64_t b = 0; b < n / kSuper; ++b) {
    const float* xb = x + b * kSuper;
    int8_t* qb = q + b * kSuper;
    auto vhi = hn::LoadU(df, xb), vlo = vhi;
    for (size_t j = nf; j < kSuper; j += nf) {
      const auto v = hn::LoadU(df, xb + j);
      vhi = hn::Max(vhi, v);
      vlo = hn::Min(vlo, v);
    }
    const float hi = hn::GetLane(hn::MaxOfLanes(df, vhi));
    const float lo = hn::GetLane(hn::MinOfLanes(df, vlo));
    const float max = hi >= -lo ? hi : lo;
    if (max == 0.0f) {
      std::memset(qb, 0, kSuper);
      d[b] = 0.0f;
    } else {
      const float iscale = -127.0f / max;
      const auto vscale = hn::Set(df, iscale), limit = hn::Set(df, 127.0f);
      for (size_t j = 0; j < kSuper; j += nf) {
        const auto r = hn::Min(hn::Round(hn::Mul(hn::LoadU(df, xb + j), vscale)), limit);
        hn::StoreU(hn::DemoteTo(di8, hn::ConvertTo(di32, r)), di8, qb + j);
      }
      d[b] = 1.0f / iscale;
    }
    for (int g = 0; g < kSuper / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qb[16 * g + j];
      sums[b * (kSuper / 16) + g] = static_cast<int16_t>(sum);
    }
  }
}

void QuantizeActivationsImpl(ActFormat format, const float* x, int64_t n, int8_t* q, float* d,
                             int16_t* sums, float* s) {
  if (format == ActFormat::kQ8_0) {
    QuantizeQ8_0Form(x, n, q, d, sums, s);
  } else {
    QuantizeQ8_KForm(x, n, q, d, sums);
  }
}

// One token's activations for the columns of a chunk.
struct TokenActs {
  const int8_t* q;
  const float* d;
  const int16_t* sums;
  const float* s;
};

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---------------------------------------------------------------- x86 panels

constexpr int kPanelRows = 16;     // two halves of 8 rows, one 256-bit vector each
constexpr int kChunkCols = 512;    // columns decoded at a time (a multiple of 256)
constexpr int kChunkGroups = kChunkCols / 4;

struct Panel {
  // q[g][h]: quants 4g..4g+3 (of the chunk) of rows 8h..8h+7, row-major within the vector.
  alignas(32) uint8_t q[kChunkGroups][2][32];
  // 32-blocks: per block, each row's scale and offset. K: per super-block, d and the minimums'.
  alignas(32) float d[kChunkCols / 32][kPanelRows];
  alignas(32) float m[kChunkCols / 32][kPanelRows];
  // K: per super-block, each 16-group's scale, and the correction coefficients of groups
  // (2i, 2i + 1) as two int16 in one int32 (bias * scale, or the minimum).
  alignas(32) int32_t sc[kChunkCols / 256][16][kPanelRows];
  alignas(32) int32_t coef[kChunkCols / 256][8][kPanelRows];
  // Each row's quants of the chunk in element order, before interleaving.
  alignas(32) uint8_t stage[kPanelRows][kChunkCols];
};

// The 32 quants of one piece (32 consecutive elements) of a block, as bytes in element order:
// unsigned types give q + kBias (0..255), signed types (kSigned) give q itself.
HWY_INLINE __m256i Nibbles(const uint8_t* p) {  // 16 bytes: low nibbles, then high nibbles
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
}
HWY_INLINE __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// Byte k of the result is `value` where bit k of `bits` is set, else 0.
HWY_INLINE __m256i BitsToBytes(uint32_t bits, uint8_t value) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(value)));
}
// Bytes whose `bit` is set in `v`, as `value`; others 0.
HWY_INLINE __m256i MaskBytes(__m256i v, uint8_t bit, uint8_t value) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(bit));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, b), b),
                          _mm256_set1_epi8(static_cast<char>(value)));
}
HWY_INLINE __m256i LowBits(__m256i v, int shift, int mask) {  // (byte >> shift) & mask
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}
HWY_INLINE __m256i IQ4Lookup(__m256i nibbles) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIQ4Values));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles);
}
HWY_INLINE uint32_t U32At(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The per-type rows of the kernel table for x86: block geometry, quant bias, and piece decoding.
// kPieces: 32-element pieces per block (1, or 8 for K super-blocks); kGroup: elements sharing one
// integer scale (K types); kMin: offsets (32-blocks) or minimums (K); kBytes: block size.
struct CodecQ4_0 {
  static constexpr int kPieces = 1, kBias = 8, kGroup = 32;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kBytes = 18;
  static __m256i Piece(const uint8_t* b, int) { return Nibbles(b + 2); }
};
struct CodecQ4_1 {
  static constexpr int kPieces = 1, kBias = 0, kGroup = 32;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kBytes = 20;
  static __m256i Piece(const uint8_t* b, int) { return Nibbles(b + 4); }
};
struct CodecQ5_0 {
  static constexpr int kPieces = 1, kBias = 16, kGroup = 32;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kBytes = 22;
  static __m256i Piece(const uint8_t* b, int) {
    return _mm256_or_si256(Nibbles(b + 6), BitsToBytes(U32At(b + 2), 16));
  }
};
struct CodecQ5_1 {
  static constexpr int kPieces = 1, kBias = 0, kGroup = 32;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kBytes = 24;
  static __m256i Piece(const uint8_t* b, int) {
    return _mm256_or_si256(Nibbles(b + 8), BitsToBytes(U32At(b + 4), 16));
  }
};
struct CodecQ8_0 {
  static constexpr int kPieces = 1, kBias = 0, kGroup = 32;
  static constexpr bool kSigned = true, kMin = false;
  static constexpr int kBytes = 34;
  static __m256i Piece(const uint8_t* b, int) { return Load32(b + 2); }
};
struct CodecIQ4_NL {
  static constexpr int kPieces = 1, kBias = 0, kGroup = 32;
  static constexpr bool kSigned = true, kMin = false;
  static constexpr int kBytes = 18;
  static __m256i Piece(const uint8_t* b, int) { return IQ4Lookup(Nibbles(b + 2)); }
};
struct CodecQ2_K {  // qs at 16
  static constexpr int kPieces = 8, kBias = 0, kGroup = 16;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kBytes = 84;
  static __m256i Piece(const uint8_t* b, int p) {
    return LowBits(Load32(b + 16 + 32 * (p / 4)), 2 * (p % 4), 3);
  }
};
struct CodecQ3_K {  // hmask at 0, qs at 32
  static constexpr int kPieces = 8, kBias = 4, kGroup = 16;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kBytes = 110;
  static __m256i Piece(const uint8_t* b, int p) {
    const __m256i low = LowBits(Load32(b + 32 + 32 * (p / 4)), 2 * (p % 4), 3);
    return _mm256_or_si256(low, MaskBytes(Load32(b), static_cast<uint8_t>(1 << p), 4));
  }
};
struct CodecQ4_K {  // qs at 16
  static constexpr int kPieces = 8, kBias = 0, kGroup = 32;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kBytes = 144;
  static __m256i Piece(const uint8_t* b, int p) {
    return LowBits(Load32(b + 16 + 32 * (p / 2)), 4 * (p % 2), 15);
  }
};
struct CodecQ5_K {  // qh at 16, qs at 48
  static constexpr int kPieces = 8, kBias = 0, kGroup = 32;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kBytes = 176;
  static __m256i Piece(const uint8_t* b, int p) {
    const __m256i low = LowBits(Load32(b + 48 + 32 * (p / 2)), 4 * (p % 2), 15);
    return _mm256_or_si256(low, MaskBytes(Load32(b + 16), static_cast<uint8_t>(1 << p), 16));
  }
};
struct CodecQ6_K {  // ql at 0, qh at 128
  static constexpr int kPieces = 8, kBias = 32, kGroup = 16;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kBytes = 210;
  static __m256i Piece(const uint8_t* b, int p) {
    const int half = p / 4, k = p % 4;
    const __m256i low = LowBits(Load32(b + 64 * half + 32 * (k % 2)), 4 * (k / 2), 15);
    const __m256i high = LowBits(Load32(b + 128 + 32 * half), 2 * k, 3);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
};
struct CodecIQ4_XS {  // qs at 8
  static constexpr int kPieces = 8, kBias = 0, kGroup = 32;
  static constexpr bool kSigned = true, kMin = false;
  static constexpr int kBytes = 136;
  static __m256i Piece(const uint8_t* b, int p) { return IQ4Lookup(Nibbles(b + 8 + 16 * p)); }
};

// v[r] holds 8 dwords of row r; afterwards v[g] holds dword g of rows 0..7.
HWY_INLINE void Transpose8x8(__m256i v[8]) {
  __m256i t[8], u[8];
  HWY_UNROLL(8)
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  HWY_UNROLL(8)
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  HWY_UNROLL(8)
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

// The per-row part of decoding: row r's blocks [block0, block0 + nblocks) into the row-major
// staging area (quants) and the panel's scale arrays. Rows are streamed one after the other, each
// start to end, and the bytes each row will need next (`next`: its next chunk, or the next panel's
// row) are prefetched as we go: the hardware prefetchers do not follow 16 interleaved streams.
template <class C>
void DecodeRow(const WeightTypeInfo& info, const uint8_t* row, const uint8_t* next, int r,
               int64_t block0, int nblocks, bool flip, int bias, Panel* p) {
  const int bytes = info.block_bytes;
  const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
  const uint8_t* src = row + block0 * bytes;
  for (int64_t off = 0; off < int64_t{nblocks} * bytes; off += 64) hwy::Prefetch(next + off);
  uint8_t* stage = p->stage[r];
  for (int i = 0; i < nblocks; ++i) {
    const uint8_t* blk = src + i * bytes;
    HWY_UNROLL(8)
    for (int piece = 0; piece < C::kPieces; ++piece) {
      __m256i v = C::Piece(blk, piece);
      if (flip) v = _mm256_xor_si256(v, sign);
      _mm256_store_si256(reinterpret_cast<__m256i*>(stage + 32 * (i * C::kPieces + piece)), v);
    }
    if (info.act == ActFormat::kQ8_0) {
      p->d[i][r] = HalfAt(blk);
      p->m[i][r] = info.has_min ? HalfAt(blk + 2) : 0.0f;
      continue;
    }
    IntBlock s;
    info.decode_scales(blk, &s);
    p->d[i][r] = s.d;
    p->m[i][r] = s.m;
    int coef[16];
    for (int j = 0; j < 16; ++j) {
      p->sc[i][j][r] = s.sc[j];
      coef[j] = info.has_min ? s.mn[j] : bias * s.sc[j];
    }
    HWY_UNROLL(8)
    for (int j = 0; j < 8; ++j) {
      p->coef[i][j][r] =
          static_cast<int32_t>(static_cast<uint16_t>(coef[2 * j]) |
                               static_cast<uint32_t>(static_cast<uint16_t>(coef[2 * j + 1])) << 16);
    }
  }
}

HWY_INLINE void Transpose8x8(__m256 v[8]) {
  __m256i* i = reinterpret_cast<__m256i*>(v);
  __m256i tmp[8];
  HWY_UNROLL(8)
  for (int k = 0; k < 8; ++k) tmp[k] = _mm256_castps_si256(v[k]);
  Transpose8x8(tmp);
  HWY_UNROLL(8)
  for (int k = 0; k < 8; ++k) v[k] = _mm256_castsi256_ps(tmp[k]);
  (void)i;
}

// Decodes blocks [block0, block0 + nblocks) of 16 rows into the panel: each row into staging,
// then (from L1) 8 rows at a time interleaved by 4-byte groups. `flip` turns signed quants into
// q + 128 (for the unsigned multiply of VNNI).
template <class C>
void DecodePanel(const WeightTypeInfo& info, const uint8_t* const rows[kPanelRows],
                 const uint8_t* const next[kPanelRows], int64_t block0, int nblocks, bool flip,
                 int bias, Panel* p) {
  for (int r = 0; r < kPanelRows; ++r) {
    DecodeRow<C>(info, rows[r], next[r], r, block0, nblocks, flip, bias, p);
  }
  const int pieces = nblocks * C::kPieces;
  HWY_UNROLL(8)
  for (int h = 0; h < 2; ++h) {
    for (int piece = 0; piece < pieces; ++piece) {
      __m256i v[8];
      HWY_UNROLL(8)
      for (int r = 0; r < 8; ++r) {
        v[r] = _mm256_load_si256(
            reinterpret_cast<const __m256i*>(p->stage[8 * h + r] + 32 * piece));
      }
      Transpose8x8(v);
      uint8_t(*dst)[2][32] = p->q + piece * 8;
      HWY_UNROLL(8)
      for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(dst[g][h]), v[g]);
    }
  }
}

enum class DotKind { kUnsigned, kSigned, kVnni };

// acc += per dword lane, the sum of the 4 products of w's unsigned bytes and x's signed bytes
// (kSigned: of w's signed bytes, moving their signs onto x so maddubs cannot saturate).
template <DotKind K>
HWY_INLINE __m256i Dot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (K == DotKind::kVnni) {
#if HWY_TARGET <= HWY_AVX3
    // EVEX encoding by hand: Highway's AVX3_DL flags would let the compiler pick the VEX form
    // (AVX-VNNI), which AVX-512 VNNI CPUs such as Ice Lake do not have.
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
#else
    HWY_ASSERT(false);
#endif
  }
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (K == DotKind::kSigned) {
    x = _mm256_sign_epi8(x, w);
    w = _mm256_sign_epi8(w, w);
  }
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
}

HWY_INLINE __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// How a panel's integer sums are corrected before scaling: not at all, by the bias (subtracted
// with the scale's factor), or by the minimums (their own float term).
enum class Correction { kNone, kBias, kMin };

// 32-element blocks: H halves of the panel from h0, T tokens, F[h][t] the accumulators.
template <DotKind K, int H, int T>
void KernelQ8_0(const Panel& p, int h0, int nblocks, const TokenActs* tok, int bias_shift,
                bool has_min, __m256 (&F)[H][T]) {
  for (int b = 0; b < nblocks; ++b) {
    __m256i I[H][T];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) I[h][t] = _mm256_setzero_si256();
    }
    HWY_UNROLL(8)
    for (int g = 0; g < 8; ++g) {
      __m256i W[H];
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        W[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.q[8 * b + g][h0 + h]));
      }
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        const __m256i X = Broadcast4(tok[t].q + 32 * b + 4 * g);
        HWY_UNROLL(8)
        for (int h = 0; h < H; ++h) I[h][t] = Dot<K>(I[h][t], W[h], X);
      }
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(tok[t].d[b]);
      const int sum = tok[t].sums[b];
      const __m256i corr = _mm256_set1_epi32(bias_shift ? sum << bias_shift : 0);
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        const __m256 dd = _mm256_mul_ps(_mm256_load_ps(p.d[b] + 8 * (h0 + h)), dx);
        const __m256i isum = _mm256_sub_epi32(I[h][t], corr);
        F[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, F[h][t]);
        if (has_min) {
          const __m256 m = _mm256_load_ps(p.m[b] + 8 * (h0 + h));
          F[h][t] = _mm256_fmadd_ps(m, _mm256_set1_ps(tok[t].s[b]), F[h][t]);
        }
      }
    }
  }
}

// K super-blocks: per group of kGroup quants sharing a scale, exact sums scaled in int32.
template <DotKind K, int H, int T, int kGroup>
void KernelQ8_K(const Panel& p, int h0, int nsuper, const TokenActs* tok, Correction corr,
                __m256 (&F)[H][T]) {
  for (int s = 0; s < nsuper; ++s) {
    __m256i S[H][T];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) S[h][t] = _mm256_setzero_si256();
    }
    HWY_UNROLL(8)
    for (int j = 0; j < 256 / kGroup; ++j) {
      __m256i G[H][T];
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) G[h][t] = _mm256_setzero_si256();
      }
      HWY_UNROLL(8)
      for (int g = 0; g < kGroup / 4; ++g) {
        const int dw = 64 * s + (kGroup / 4) * j + g;  // dword of the chunk
        __m256i W[H];
        HWY_UNROLL(8)
        for (int h = 0; h < H; ++h) {
          W[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.q[dw][h0 + h]));
        }
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          const __m256i X = Broadcast4(tok[t].q + 4 * dw);
          HWY_UNROLL(8)
          for (int h = 0; h < H; ++h) G[h][t] = Dot<K>(G[h][t], W[h], X);
        }
      }
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        const __m256i sc = _mm256_load_si256(
            reinterpret_cast<const __m256i*>(p.sc[s][j * (kGroup / 16)] + 8 * (h0 + h)));
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) S[h][t] = _mm256_add_epi32(S[h][t], _mm256_mullo_epi32(G[h][t], sc));
      }
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(tok[t].d[s]);
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        __m256i C = _mm256_setzero_si256();
        if (corr != Correction::kNone) {
          HWY_UNROLL(8)
          for (int i = 0; i < 8; ++i) {
            const __m256i coef = _mm256_load_si256(
                reinterpret_cast<const __m256i*>(p.coef[s][i] + 8 * (h0 + h)));
            const __m256i sums = Broadcast4(reinterpret_cast<const int8_t*>(tok[t].sums + 16 * s + 2 * i));
            C = _mm256_add_epi32(C, _mm256_madd_epi16(coef, sums));
          }
        }
        const __m256 dd = _mm256_mul_ps(_mm256_load_ps(p.d[s] + 8 * (h0 + h)), dx);
        if (corr == Correction::kMin) {
          F[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[h][t]), dd, F[h][t]);
          const __m256 md = _mm256_mul_ps(_mm256_load_ps(p.m[s] + 8 * (h0 + h)), dx);
          F[h][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(C), md, F[h][t]);
        } else {
          F[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(S[h][t], C)), dd, F[h][t]);
        }
      }
    }
  }
}

// Rows of the panel's half h that are real (the rest are clamped copies, never stored).
HWY_INLINE __m256i RowMask(int valid_in_half) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid_in_half),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Everything of one multiply that does not change within it.
struct IntPlan {
  const MatMulJob* job;
  int64_t cols, rows;
  int64_t x_blocks;  // activation scales per token
  int64_t x_sums;    // activation sums per token
  int bias_shift;    // 32-blocks: log2 of the bias (0: none)
  Correction corr;   // K
};

// Tokens [t0, t0 + n)'s activations from column k0 on.
void MakeTokenActs(const IntPlan& plan, int64_t k0, int64_t t0, int n, TokenActs* tok) {
  const MatMulJob& job = *plan.job;
  const bool k_type = job.info->act == ActFormat::kQ8_K;
  const int elems_per_scale = k_type ? 256 : 32;
  const int elems_per_sum = k_type ? 16 : 32;
  for (int t = 0; t < n; ++t) {
    const int64_t i = t0 + t;
    tok[t] = {job.xq.q + i * plan.cols + k0, job.xq.d + i * plan.x_blocks + k0 / elems_per_scale,
              job.xq.sums + i * plan.x_sums + k0 / elems_per_sum,
              k_type ? nullptr : job.xq.s + i * plan.x_blocks + k0 / 32};
  }
}

// Runs T tokens from t0 over the decoded panel (rows p0.., `valid` of them) for chunk k0.
template <DotKind K, int H, int T, int kGroup>
void RunTokens(const IntPlan& plan, const Panel& panel, int64_t p0, int valid, int64_t k0,
               int64_t kc, int64_t t0) {
  const MatMulJob& job = *plan.job;
  const bool k_type = job.info->act == ActFormat::kQ8_K;
  TokenActs tok[T];
  MakeTokenActs(plan, k0, t0, T, tok);
  for (int h0 = 0; h0 < 2; h0 += H) {
    if (valid <= 8 * h0) break;
    __m256 F[H][T];
    __m256i mask[H];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      mask[h] = RowMask(valid - 8 * (h0 + h));
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        float* o = job.out + (t0 + t) * plan.rows + p0 + 8 * (h0 + h);
        F[h][t] = k0 == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(o, mask[h]);
      }
    }
    if (k_type) {
      KernelQ8_K<K, H, T, kGroup>(panel, h0, static_cast<int>(kc / 256), tok, plan.corr, F);
    } else {
      KernelQ8_0<K, H, T>(panel, h0, static_cast<int>(kc / 32), tok, plan.bias_shift,
                          job.info->has_min, F);
    }
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        float* o = job.out + (t0 + t) * plan.rows + p0 + 8 * (h0 + h);
        _mm256_maskstore_ps(o, mask[h], F[h][t]);
      }
    }
  }
}

// ---------------------------------------------------------------- few tokens: row dots

// With few tokens each weight serves too few multiplies to pay for interleaving a panel. Instead
// each row, as it streams by, is multiplied piece by piece (32 quants) with every token's
// activations into int32 lane sums; 8 rows' lane sums of one block are then added up together,
// which leaves the 8 rows' exact block sums in one vector: from there the float steps are the
// panel kernels' own, so both paths give the same bits.
constexpr int kMaxDotTokens = 4;
// Software prefetch distance along a row's stream.
constexpr int kDotPrefetchBytes = 1024;

// Lane r of the result: the sum of p[r]'s lanes.
HWY_INLINE __m256i SumLanes8(const __m256i* p) {
  __m256i v[8], a[4], b[2];
  HWY_UNROLL(8)
  for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_si256(p + i);
  HWY_UNROLL(8)
  for (int i = 0; i < 4; ++i) {
    a[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                            _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
  HWY_UNROLL(8)
  for (int i = 0; i < 2; ++i) {
    b[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(a[2 * i], a[2 * i + 1]),
                            _mm256_unpackhi_epi64(a[2 * i], a[2 * i + 1]));
  }
  return _mm256_add_epi32(_mm256_permute2x128_si256(b[0], b[1], 0x20),
                          _mm256_permute2x128_si256(b[0], b[1], 0x31));
}

// The low 16 bits of each 32-bit lane, in order.
HWY_INLINE __m128i LowHalves(__m256i v) {
  const __m256i take = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, take), 0x08));
}

// Few tokens, 32-element types. Rows are streamed one after the other, start to end (the
// prefetchers follow one stream; 8 interleaved rows were 3x slower here), each row dotted with
// every token: per group of 8 blocks, the 8 blocks' lane-sum vectors are reduced together
// (SumLanes8) into their 8 exact sums, and the 8 scales come in one gather from the row. Each
// row's block sums and scale products are staged as floats; then 8 rows' are transposed, so the
// canonical per-block float chain runs on 8 rows in one vector (a scalar chain per row would be
// bound by its latency).
template <class C, DotKind K, int T>
struct DotRowsQ8_0 {
  static constexpr int kB = C::kBytes;
  static constexpr bool kFlip = C::kSigned && K == DotKind::kVnni;
  static constexpr int kShift =
      C::kSigned ? (kFlip ? 7 : 0) : (C::kBias ? __builtin_ctz(C::kBias) : 0);

  // Per token and row of 8, per block: float(isum), d * dx, and the offset m (types with kMin).
  struct Stage {
    std::vector<float> p, dd, m;
    int64_t blocks = 0;  // padded to a multiple of 8
    float* P(int t, int r) { return p.data() + (int64_t{t} * 8 + r) * blocks; }
    float* DD(int t, int r) { return dd.data() + (int64_t{t} * 8 + r) * blocks; }
    float* M(int r) { return m.data() + int64_t{r} * blocks; }
  };

  // Blocks [b0, b0 + n) of one row (n = 8 unless kTail) into the stage (row r of 8).
  template <bool kTail>
  static HWY_INLINE void Group(const uint8_t* row, int b0, int n, const TokenActs* tok, int r,
                               Stage* st) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i stride =
        _mm256_setr_epi32(0, kB, 2 * kB, 3 * kB, 4 * kB, 5 * kB, 6 * kB, 7 * kB);
    const uint8_t* group = row + int64_t{b0} * kB;
    __m256i w[8];
    HWY_UNROLL(8)
    for (int i = 0; i < 8; ++i) {
      w[i] = !kTail || i < n ? C::Piece(group + i * kB, 0) : zero;
      if constexpr (kFlip) w[i] = _mm256_xor_si256(w[i], _mm256_set1_epi8(static_cast<char>(0x80)));
    }
    // The blocks' headers: f16 scale (low half) and offset (high half, types with kMin).
    const __m256i lanes =
        kTail ? _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
              : _mm256_set1_epi32(-1);
    const __m256i head =
        kTail ? _mm256_mask_i32gather_epi32(zero, reinterpret_cast<const int*>(group), stride,
                                            lanes, 1)
              : _mm256_i32gather_epi32(reinterpret_cast<const int*>(group), stride, 1);
    const __m256 d = _mm256_cvtph_ps(LowHalves(head));
    if constexpr (C::kMin) {
      _mm256_storeu_ps(st->M(r) + b0, _mm256_cvtph_ps(LowHalves(_mm256_srli_epi32(head, 16))));
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      __m256i v[8];
      HWY_UNROLL(8)
      for (int i = 0; i < 8; ++i) {
        // Past the row's end w is zero, so any activations give 0 (read within the token).
        const int8_t* x = tok[t].q + 32 * (kTail ? std::min(b0 + i, b0 + n - 1) : b0 + i);
        v[i] = Dot<K>(zero, w[i], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
      }
      __m256i isum = SumLanes8(v);
      if constexpr (kShift != 0) {
        __m256i sums;
        if constexpr (kTail) {
          alignas(16) int16_t s16[8] = {};
          for (int i = 0; i < n; ++i) s16[i] = tok[t].sums[b0 + i];
          sums = _mm256_cvtepi16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s16)));
        } else {
          sums = _mm256_cvtepi16_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(tok[t].sums + b0)));
        }
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(sums, kShift));
      }
      const __m256 dx = kTail ? _mm256_maskload_ps(tok[t].d + b0, lanes)
                              : _mm256_loadu_ps(tok[t].d + b0);
      _mm256_storeu_ps(st->P(t, r) + b0, _mm256_cvtepi32_ps(isum));
      _mm256_storeu_ps(st->DD(t, r) + b0, _mm256_mul_ps(d, dx));
    }
  }

  // One row's blocks into the stage (row r of 8).
  static HWY_INLINE void Row(const uint8_t* row, int nblocks, const TokenActs* tok, int r,
                             Stage* st) {
    const uint8_t* fetched = row;
    int b0 = 0;
    for (; b0 + 8 <= nblocks; b0 += 8) {
      for (; fetched < row + int64_t{b0 + 8} * kB; fetched += 64) {
        hwy::Prefetch(fetched + kDotPrefetchBytes);
      }
      Group<false>(row, b0, 8, tok, r, st);
    }
    if (b0 < nblocks) Group<true>(row, b0, nblocks - b0, tok, r, st);
  }

  static void Run(const IntPlan& plan, const uint8_t* const rows[kPanelRows], int64_t p0,
                  int valid) {
    const MatMulJob& job = *plan.job;
    const int nblocks = static_cast<int>(plan.cols / 32);
    TokenActs tok[T];
    MakeTokenActs(plan, 0, 0, T, tok);
    thread_local Stage st;
    st.blocks = (nblocks + 7) / 8 * 8;
    const size_t size = size_t{T} * 8 * st.blocks;
    if (st.p.size() < size) st.p.resize(size), st.dd.resize(size), st.m.resize(8 * st.blocks);
    for (int h = 0; h < 2 && valid > 8 * h; ++h) {
      const int nrows = std::min(8, valid - 8 * h);
      for (int r = 0; r < 8; ++r) Row(rows[8 * h + std::min(r, nrows - 1)], nblocks, tok, r, &st);
      const __m256i mask = RowMask(nrows);
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        __m256 F = _mm256_setzero_ps();
        for (int b0 = 0; b0 < nblocks; b0 += 8) {
          __m256 p[8], dd[8], m[8];
          HWY_UNROLL(8)
          for (int r = 0; r < 8; ++r) {
            p[r] = _mm256_loadu_ps(st.P(t, r) + b0);
            dd[r] = _mm256_loadu_ps(st.DD(t, r) + b0);
            if constexpr (C::kMin) m[r] = _mm256_loadu_ps(st.M(r) + b0);
          }
          Transpose8x8(p);  // now p[i]: block b0 + i of the 8 rows
          Transpose8x8(dd);
          if constexpr (C::kMin) Transpose8x8(m);
          const int n = std::min(8, nblocks - b0);
          for (int i = 0; i < n; ++i) {
            F = _mm256_fmadd_ps(p[i], dd[i], F);
            if constexpr (C::kMin) F = _mm256_fmadd_ps(m[i], _mm256_set1_ps(tok[t].s[b0 + i]), F);
          }
        }
        _mm256_maskstore_ps(job.out + t * plan.rows + p0 + 8 * h, mask, F);
      }
    }
  }
};

// Few tokens, K super-blocks: as DotRowsQ8_0, a super-block in place of a block. Each piece's lane
// sums are multiplied by their groups' integer scales; 8 super-blocks' vectors are reduced
// together, and so are the correction terms (bias times scale, or minimum, against the
// activations' group sums).
template <class C, DotKind K, int T>
struct DotRowsQ8_K {
  static constexpr int kB = C::kBytes;
  static constexpr bool kFlip = C::kSigned && K == DotKind::kVnni;
  static constexpr int kBias = C::kSigned ? (kFlip ? 128 : 0) : C::kBias;

  // Per token and row of 8, per super-block: float(S), d * dx, and for minimums float(M) and
  // dmin * dx.
  struct Stage {
    std::vector<float> p, dd, pm, md;
    int64_t blocks = 0;  // padded to a multiple of 8
    size_t At(int t, int r) const { return (size_t(t) * 8 + r) * blocks; }
  };

  // Super-blocks [s0, s0 + n) of one row into the stage (row r of 8).
  static HWY_INLINE void Group(const WeightTypeInfo& info, const uint8_t* row, int s0, int n,
                               const TokenActs* tok, int r, Stage* st) {
    const __m256i zero = _mm256_setzero_si256();
    __m256i S[T][8], Cv[T][8];
    alignas(32) float d[8] = {}, dmin[8] = {};
    for (int i = 0; i < 8; ++i) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) S[t][i] = Cv[t][i] = zero;
      if (i >= n) continue;
      const int sb = s0 + i;
      const uint8_t* blk = row + int64_t{sb} * kB;
      IntBlock sc;
      info.decode_scales(blk, &sc);
      d[i] = sc.d;
      dmin[i] = sc.m;
      alignas(32) int16_t coef[16];
      for (int j = 0; j < 16; ++j) {
        coef[j] = static_cast<int16_t>(C::kMin ? sc.mn[j] : kBias * sc.sc[j]);
      }
      const __m256i coefs = _mm256_load_si256(reinterpret_cast<const __m256i*>(coef));
      const __m256i sc_lo = _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc.sc)));
      const __m256i sc_hi =
          _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc.sc + 8)));
      HWY_UNROLL(8)
      for (int piece = 0; piece < 8; ++piece) {
        __m256i w = C::Piece(blk, piece);
        if constexpr (kFlip) w = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
        // Lanes 0-3 hold elements of group 2 * piece, lanes 4-7 of the next.
        const int g = 2 * (piece % 4);
        const __m256i lane_scale = _mm256_permutevar8x32_epi32(
            piece < 4 ? sc_lo : sc_hi, _mm256_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1));
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          const __m256i x = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(tok[t].q + 256 * sb + 32 * piece));
          S[t][i] = _mm256_add_epi32(S[t][i], _mm256_mullo_epi32(Dot<K>(zero, w, x), lane_scale));
        }
      }
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        const __m256i sums =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tok[t].sums + 16 * sb));
        Cv[t][i] = _mm256_madd_epi16(coefs, sums);
        if constexpr (!C::kMin) S[t][i] = _mm256_sub_epi32(S[t][i], Cv[t][i]);
      }
    }
    const __m256i lanes =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_maskload_ps(tok[t].d + s0, lanes);
      const size_t at = st->At(t, r) + s0;
      _mm256_storeu_ps(st->p.data() + at, _mm256_cvtepi32_ps(SumLanes8(S[t])));
      _mm256_storeu_ps(st->dd.data() + at, _mm256_mul_ps(_mm256_load_ps(d), dx));
      if constexpr (C::kMin) {
        _mm256_storeu_ps(st->pm.data() + at, _mm256_cvtepi32_ps(SumLanes8(Cv[t])));
        _mm256_storeu_ps(st->md.data() + at, _mm256_mul_ps(_mm256_load_ps(dmin), dx));
      }
    }
  }

  static void Run(const IntPlan& plan, const uint8_t* const rows[kPanelRows], int64_t p0,
                  int valid) {
    const MatMulJob& job = *plan.job;
    const int nsuper = static_cast<int>(plan.cols / 256);
    TokenActs tok[T];
    MakeTokenActs(plan, 0, 0, T, tok);
    thread_local Stage st;
    st.blocks = (nsuper + 7) / 8 * 8;
    const size_t size = size_t{T} * 8 * st.blocks;
    if (st.p.size() < size) {
      st.p.resize(size), st.dd.resize(size), st.pm.resize(size), st.md.resize(size);
    }
    for (int h = 0; h < 2 && valid > 8 * h; ++h) {
      const int nrows = std::min(8, valid - 8 * h);
      for (int r = 0; r < 8; ++r) {
        const uint8_t* row = rows[8 * h + std::min(r, nrows - 1)];
        const uint8_t* fetched = row;
        for (int s0 = 0; s0 < nsuper; s0 += 8) {
          const int n = std::min(8, nsuper - s0);
          for (; fetched < row + int64_t{s0 + n} * kB; fetched += 64) {
            hwy::Prefetch(fetched + kDotPrefetchBytes);
          }
          Group(*job.info, row, s0, n, tok, r, &st);
        }
      }
      const __m256i mask = RowMask(nrows);
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        __m256 F = _mm256_setzero_ps();
        for (int s0 = 0; s0 < nsuper; s0 += 8) {
          __m256 p[8], dd[8], pm[8], md[8];
          HWY_UNROLL(8)
          for (int r = 0; r < 8; ++r) {
            const size_t at = st.At(t, r) + s0;
            p[r] = _mm256_loadu_ps(st.p.data() + at);
            dd[r] = _mm256_loadu_ps(st.dd.data() + at);
            if constexpr (C::kMin) {
              pm[r] = _mm256_loadu_ps(st.pm.data() + at);
              md[r] = _mm256_loadu_ps(st.md.data() + at);
            }
          }
          Transpose8x8(p);  // now p[i]: super-block s0 + i of the 8 rows
          Transpose8x8(dd);
          if constexpr (C::kMin) {
            Transpose8x8(pm);
            Transpose8x8(md);
          }
          const int n = std::min(8, nsuper - s0);
          for (int i = 0; i < n; ++i) {
            F = _mm256_fmadd_ps(p[i], dd[i], F);
            if constexpr (C::kMin) F = _mm256_fnmadd_ps(pm[i], md[i], F);
          }
        }
        _mm256_maskstore_ps(job.out + t * plan.rows + p0 + 8 * h, mask, F);
      }
    }
  }
};

template <class C, DotKind K, int T>
using RowsFor =
    std::conditional_t<C::kPieces == 1, DotRowsQ8_0<C, K, T>, DotRowsQ8_K<C, K, T>>;

// Everything of the plan that depends on the type and the dot kind.
template <class C, DotKind K>
IntPlan MakePlan(const MatMulJob& job) {
  const WeightMatrix& w = *job.w;
  constexpr int kBias = C::kSigned ? (K == DotKind::kVnni ? 128 : 0) : C::kBias;
  IntPlan plan{&job, w.cols, w.rows, 0, 0, 0, Correction::kNone};
  if constexpr (C::kPieces == 1) {
    plan.x_blocks = plan.x_sums = w.cols / 32;
    plan.bias_shift = kBias ? __builtin_ctz(kBias) : 0;
  } else {
    plan.x_blocks = w.cols / 256;
    plan.x_sums = w.cols / 16;
    plan.corr = C::kMin ? Correction::kMin : (kBias ? Correction::kBias : Correction::kNone);
  }
  return plan;
}

// Rows [r0, r1) in panels of 16: the pointers to a panel's rows (past r1, copies of the last).
struct PanelRows {
  const uint8_t* rows[kPanelRows];
  int valid;
  PanelRows(const WeightMatrix& w, int64_t p0, int64_t r1)
      : valid(static_cast<int>(std::min<int64_t>(kPanelRows, r1 - p0))) {
    for (int i = 0; i < kPanelRows; ++i) rows[i] = w.data + std::min(p0 + i, r1 - 1) * w.row_bytes;
  }
};

template <class C, DotKind K, int T>
using RowsFor =
    std::conditional_t<C::kPieces == 1, DotRowsQ8_0<C, K, T>, DotRowsQ8_K<C, K, T>>;

// Few tokens: whole rows streamed (DotRowsQ8_0, DotRowsQ8_K).
template <class C, DotKind K>
void RunRows(const MatMulJob& job, int64_t r0, int64_t r1) {
  const IntPlan plan = MakePlan<C, K>(job);
  for (int64_t p0 = r0; p0 < r1; p0 += kPanelRows) {
    const PanelRows p(*job.w, p0, r1);
    switch (job.n_tokens) {
      case 4:
        RowsFor<C, K, 4>::Run(plan, p.rows, p0, p.valid);
        break;
      case 3:
        RowsFor<C, K, 3>::Run(plan, p.rows, p0, p.valid);
        break;
      case 2:
        RowsFor<C, K, 2>::Run(plan, p.rows, p0, p.valid);
        break;
      default:
        RowsFor<C, K, 1>::Run(plan, p.rows, p0, p.valid);
        break;
    }
  }
}

// Many tokens: panels decoded a chunk of columns at a time, every token run over each.
template <class C, DotKind K, int H>
void RunPanels(const MatMulJob& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  const WeightTypeInfo& info = *job.info;
  const bool flip = C::kSigned && K == DotKind::kVnni;
  const int bias = C::kSigned ? (flip ? 128 : 0) : C::kBias;
  const IntPlan plan = MakePlan<C, K>(job);
  thread_local Panel panel;
  for (int64_t p0 = r0; p0 < r1; p0 += kPanelRows) {
    const PanelRows p(w, p0, r1);
    const PanelRows after(w, std::min(p0 + kPanelRows, r1 - 1), r1);
    const uint8_t* next[kPanelRows];
    for (int64_t k0 = 0; k0 < w.cols; k0 += kChunkCols) {
      const int64_t kc = std::min<int64_t>(kChunkCols, w.cols - k0);
      const int64_t block0 = k0 / info.block_elems;
      for (int i = 0; i < kPanelRows; ++i) {  // where each row goes next: its next chunk, or
        next[i] = k0 + kc < w.cols              // the first chunk of the next panel's row
                      ? p.rows[i] + (block0 + kc / info.block_elems) * info.block_bytes
                      : after.rows[i];
      }
      DecodePanel<C>(info, p.rows, next, block0, static_cast<int>(kc / info.block_elems), flip,
                     bias, &panel);
      int64_t t0 = 0;
      for (; t0 + 4 <= job.n_tokens; t0 += 4) {
        RunTokens<K, H, 4, C::kGroup>(plan, panel, p0, p.valid, k0, kc, t0);
      }
      switch (job.n_tokens - t0) {
        case 3:
          RunTokens<K, H, 3, C::kGroup>(plan, panel, p0, p.valid, k0, kc, t0);
          break;
        case 2:
          RunTokens<K, H, 2, C::kGroup>(plan, panel, p0, p.valid, k0, kc, t0);
          break;
        case 1:
          RunTokens<K, H, 1, C::kGroup>(plan, panel, p0, p.valid, k0, kc, t0);
          break;
        default:
          break;
      }
    }
  }
}

template <class C, DotKind K, int H>
void Run(const MatMulJob& job, int64_t r0, int64_t r1) {
  if (job.n_tokens <= kMaxDotTokens) return RunRows<C, K>(job, r0, r1);
  return RunPanels<C, K, H>(job, r0, r1);
}

template <class C>
void RunCodec(const MatMulJob& job, int64_t r0, int64_t r1) {
#if HWY_TARGET <= HWY_AVX3
  // 32 registers: both halves of the panel per pass.
  if (VnniEnabled()) return Run<C, DotKind::kVnni, 2>(job, r0, r1);
  return Run<C, C::kSigned ? DotKind::kSigned : DotKind::kUnsigned, 2>(job, r0, r1);
#else
  return Run<C, C::kSigned ? DotKind::kSigned : DotKind::kUnsigned, 1>(job, r0, r1);
#endif
}

void IntMatMulRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  switch (job.info->type) {
    case GgmlType::kQ4_0:
      return RunCodec<CodecQ4_0>(job, r0, r1);
    case GgmlType::kQ4_1:
      return RunCodec<CodecQ4_1>(job, r0, r1);
    case GgmlType::kQ5_0:
      return RunCodec<CodecQ5_0>(job, r0, r1);
    case GgmlType::kQ5_1:
      return RunCodec<CodecQ5_1>(job, r0, r1);
    case GgmlType::kQ8_0:
      return RunCodec<CodecQ8_0>(job, r0, r1);
    case GgmlType::kIQ4_NL:
      return RunCodec<CodecIQ4_NL>(job, r0, r1);
    case GgmlType::kQ2_K:
      return RunCodec<CodecQ2_K>(job, r0, r1);
    case GgmlType::kQ3_K:
      return RunCodec<CodecQ3_K>(job, r0, r1);
    case GgmlType::kQ4_K:
      return RunCodec<CodecQ4_K>(job, r0, r1);
    case GgmlType::kQ5_K:
      return RunCodec<CodecQ5_K>(job, r0, r1);
    case GgmlType::kQ6_K:
      return RunCodec<CodecQ6_K>(job, r0, r1);
    case GgmlType::kIQ4_XS:
      return RunCodec<CodecIQ4_XS>(job, r0, r1);
    default:
      PC_CHECK(false && "IntMatMulRows: not a quantized type");
  }
}

#else
// ---------------------------------------------------------------- portable

void IntMatMulRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  const WeightTypeInfo& t = *job.info;
  const bool k_type = t.act == ActFormat::kQ8_K;
  const int64_t nb = w.cols / t.block_elems;
  const int64_t sums_per_token = w.cols / (k_type ? 16 : 32);
  const int sums_per_block = k_type ? 16 : 1;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(job.n_tokens));
  IntBlock b;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t i = 0; i < nb; ++i) {
      t.decode(row + i * t.block_bytes, &b);
      for (int64_t k = 0; k < job.n_tokens; ++k) {
        acc[k] = AccumulateBlock(t, b, job.xq.q + k * w.cols + i * t.block_elems,
                                 job.xq.d[k * nb + i],
                                 job.xq.sums + k * sums_per_token + i * sums_per_block,
                                 k_type ? 0.0f : job.xq.s[k * nb + i], acc[k]);
      }
    }
    for (int64_t k = 0; k < job.n_tokens; ++k) job.out[k * w.rows + r] = acc[k];
  }
}

#endif  // HWY_TARGET

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache::internal {

HWY_EXPORT(IntMatMulRowsImpl);
HWY_EXPORT(QuantizeActivationsImpl);

void IntMatMulRows(const MatMulJob& job, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(IntMatMulRowsImpl)(job, r0, r1);
}

void QuantizeActivations(ActFormat format, const float* x, int64_t n, int8_t* q, float* d,
                         int16_t* sums, float* s) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationsImpl)(format, x, n, q, d, sums, s);
}

}  // namespace promptcache::internal
#endif  // HWY_ONCE
