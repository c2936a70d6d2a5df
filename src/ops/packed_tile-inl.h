// The packed int8 kernels' tiles (packed_kernels.cc), written once for every vector width
// (packed_width-inl.h): H vectors of panels x T tokens over a range of blocks, with the integer
// form's canonical arithmetic, so results equal DotIntForm's bit for bit at either width.
//
// A packed group's plane vectors give, for each dword group, the quants of each panel's 8 rows x
// 4 columns; each token's 4 activations of that group are broadcast and multiplied into the
// rows' int32 sums at once (Dot). At each block's end the exact sums are scaled into one float
// accumulator per row and token, in the same order at every width: a lane's arithmetic depends
// only on its row.
//
// Where the widths measured differently, PanelWidth<kP> says so (TilePolicy below); everything
// else is shared.
//
// Included once per Highway target after hwy/highway.h, as Highway's -inl.h convention requires.

// Per-target include guard (toggled by foreach_target).
#if defined(PC_OPS_PACKED_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PC_OPS_PACKED_TILE_INL_H_
#undef PC_OPS_PACKED_TILE_INL_H_
#else
#define PC_OPS_PACKED_TILE_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/matmul_internal.h"
#include "ops/packed.h"
#include "ops/packed_width-inl.h"
#include "ops/quant_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

// The choices measured to differ between the widths (each commit's message has its numbers).
template <class W>
struct TilePolicy {
  static constexpr bool kWide = W::kPanels == 2;
  // K super-blocks' sub-blocks unrolled whole (every plane offset and shift a constant) or a
  // loop. Unrolled whole with many tokens, the super-block outgrew the CPU's decoded-instruction
  // cache: 256-bit, every K type loops for 3 or more tokens (llama3.2-1b Q4_K_M's prompt with
  // AVX2 took 20-40% longer unrolled) and one or two tokens unroll; 512-bit, eight sub-blocks
  // (Q4_K, Q5_K) unroll, faster with the weights streamed from memory, and sixteen (Q6_K, Q3_K,
  // Q2_K) loop (BM_MatMul, 512 tokens: Q6_K 28% longer unrolled), as do eight of 3-bit planes
  // joined through a table (IQ2_XXS, IQ1_S: BM_MatMul 2048x2048, 512 tokens, 2 threads, Zen 5,
  // 395-483 GFLOP/s unrolled against 464-607 looped in alternating runs; one token alike).
  static constexpr bool UnrollSubBlocks(int tokens, int sub, bool three_bit) {
    return kWide ? sub == 32 && !three_bit : tokens <= 2;
  }
  // K types: accumulators in the output rows, read and written once per super-block, instead of
  // registers: 512-bit tiles of 2 x 6 with the super-block's integer sums needed more registers
  // than there are (a third of the loop's instructions were spills).
  static constexpr bool kAccInMemory = kWide;
};

// Software prefetch distance of the K kernels, in packed groups (8 rows x 256 columns).
constexpr int kAheadGroups = 2;
// And of the 32-element kernels, in bytes.
constexpr int kPf32 = 1024;

// (v >> shift) & mask in every byte (16-bit shifts; the mask drops the neighbour's bits).
template <class V>
HWY_INLINE V Bits(V v, int shift, int mask) {
  const hn::DFromV<V> d8;
  const hn::Repartition<uint16_t, decltype(d8)> d16;
  if (!__builtin_constant_p(shift) || shift != 0) {
    v = hn::BitCast(d8, hn::ShiftRightSame(hn::BitCast(d16, v), shift));
  }
  return hn::And(v, hn::Set(d8, static_cast<uint8_t>(mask)));
}
// v << kShift in every byte whose bits stay in it.
template <int kShift, class V>
HWY_INLINE V ShiftUp(V v) {
  const hn::DFromV<V> d8;
  const hn::Repartition<uint16_t, decltype(d8)> d16;
  return hn::BitCast(d8, hn::ShiftLeft<kShift>(hn::BitCast(d16, v)));
}

// The compile-time view of a packed format, and how its dword group G of one packed group per
// panel reads as the rows' quants ready for Dot: u (unsigned types), or the signed value (Q8_0,
// IQ4 types), flipped to value + 128 when kFlip (VNNI's unsigned multiply).
template <GgmlType kType, bool kFlip>
struct Fmt {
  static constexpr PackedFormat f = *FindPackedFormat(kType);
  static constexpr bool kK = f.ng == 64;
  static constexpr bool kSigned = f.p8 || f.lut != nullptr;
  static constexpr bool kMin = f.m_offset >= 0;
  static constexpr int kBias = kSigned ? (kFlip ? 128 : 0) : f.bias;
  static constexpr int kShift = kBias ? __builtin_ctz(kBias) : 0;
  static constexpr bool kDecoded = false;

  // A LUT type's 16 values in every 128-bit part, flipped here when kFlip (once per table load,
  // not once per looked-up vector: an instruction less per weight vector, no 0x80 held).
  template <class W>
  static HWY_INLINE typename W::V8 Table(const uint8_t* table) {
    const typename W::D8 d8;
    const auto t = hn::LoadDup128(d8, table);
    return kFlip ? hn::Xor(t, hn::Set(d8, uint8_t{0x80})) : t;
  }

  // g: the W::kPanels panels' groups.
  template <class W>
  static HWY_INLINE typename W::V8 Group(const uint8_t* const* g, int G) {
    constexpr int ng = f.ng;
    typename W::V8 u;
    if constexpr (f.p8) {
      u = W::Load(g, f.p8_offset + G * 32);
    } else if constexpr (f.p4) {
      // Each nibble's shift a constant (a looped sub-block's G is not): a shift by a register
      // count cost three more instructions per group (AVX2 Q4_K, 512 tokens: 12% longer).
      const auto v = W::Load(g, f.p4_offset + (G % (ng / 2)) * 32);
      u = G < ng / 2 ? Bits(v, 0, 15) : Bits(v, 4, 15);
      if constexpr (f.p1) {
        const auto h = W::Load(g, f.p1_offset + (G % (ng / 8)) * 32);
        u = hn::Or(u, ShiftUp<4>(Bits(h, G / (ng / 8), 1)));
      }
      if constexpr (f.p2) {
        const auto h = W::Load(g, f.p2_offset + (G % (ng / 4)) * 32);
        u = hn::Or(u, ShiftUp<4>(Bits(h, 2 * (G / (ng / 4)), 3)));
      }
      if constexpr (f.lut != nullptr) {
        // The table from the group's header where types of one shape share this kernel (the
        // same address in every group of a sub-block: loaded once).
        const uint8_t* table =
            f.lut_offset >= 0 ? g[0] + f.lut_offset : reinterpret_cast<const uint8_t*>(f.lut);
        return hn::TableLookupBytes(Table<W>(table), u);
      }
    } else {
      u = Bits(W::Load(g, f.p2_offset + (G % (ng / 4)) * 32), 2 * (G / (ng / 4)), 3);
      if constexpr (f.p1) {
        const auto h = W::Load(g, f.p1_offset + (G % (ng / 8)) * 32);
        u = hn::Or(u, ShiftUp<2>(Bits(h, G / (ng / 8), 1)));
      }
      if constexpr (f.lut != nullptr) {  // 3-bit i-quants: the table from the header
        static_assert(f.lut_offset >= 0);
        return hn::TableLookupBytes(Table<W>(g[0] + f.lut_offset), u);
      }
    }
    if constexpr (kFlip) u = hn::Xor(u, hn::Set(typename W::D8(), uint8_t{0x80}));
    return u;
  }
};

// F's packed groups decoded once for many tokens (packed_run-inl.h, DecodeChunk): per vector of
// kP panels and block, the kP panels' headers as F has them, then each dword group G as the
// 32 kP bytes F::Group gives a tile of that width (quants ready for Dot). The tiles read them
// with one load, no bit planes, table or join of panels, and F's header, scales and correction
// as before: the same sums. g[kP h] points at vector h's group, g[kP h + k] at its header k.
template <class F, int kP>
struct Decoded {
  static constexpr int kHeaderBytes = F::f.header_bytes, kVecBytes = 32 * kP;
  static constexpr PackedFormat f = [] {
    PackedFormat d = F::f;
    d.p8 = 1;
    d.p4 = d.p2 = d.p1 = 0;
    d.lut = nullptr;
    d.lut_offset = d.p4_offset = d.p2_offset = d.p1_offset = -1;
    d.p8_offset = kP * kHeaderBytes;
    d.group_bytes = kP * kHeaderBytes + d.ng * kVecBytes;
    return d;
  }();
  static constexpr bool kK = F::kK, kMin = F::kMin, kDecoded = true;
  static constexpr int kBias = F::kBias, kShift = F::kShift;

  template <class W>
  static HWY_INLINE typename W::V8 Group(const uint8_t* const* g, int G) {
    static_assert(W::kPanels == kP);
    return hn::LoadU(typename W::D8(), g[0] + f.p8_offset + G * kVecBytes);
  }
};

// One token's activations from a chunk's first column.
struct TokenActs {
  const int8_t* q;
  const float* d;
  const int16_t* sums;
  const float* s;
};

// A token's 4 activations at q in every dword lane.
template <class DI>
HWY_INLINE hn::Vec<DI> Broadcast4(DI di, const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, 4);
  return hn::Set(di, v);
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

// Integer sums are exact in any order, so with few tokens each (vector, token) sum is split over
// kSplit accumulators (dword groups round-robin) to hide the multiply-add's latency: H * T *
// kSplit independent chains.
template <int T>
constexpr int SplitFor() {
  return T == 1 ? 4 : T == 2 ? 2 : 1;
}
template <int N, class V>
HWY_INLINE V SumSplit(const V* v) {
  if constexpr (N == 4) {
    return hn::Add(hn::Add(v[0], v[1]), hn::Add(v[2], v[3]));
  } else if constexpr (N == 2) {
    return hn::Add(v[0], v[1]);
  } else {
    return v[0];
  }
}

// Every part of every (vector, token) sum set to 0.
template <class VI, int H, int T, int kSplit>
HWY_INLINE void ZeroSums(VI (&I)[H][T][kSplit]) {
  const hn::DFromV<VI> di;
  HWY_UNROLL(8)
  for (int h = 0; h < H; ++h) {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      HWY_UNROLL(4)
      for (int a = 0; a < kSplit; ++a) I[h][t][a] = hn::Zero(di);
    }
  }
}

// Dword group G of H vectors of panels (g[kP h + k]: vector h's panel k), of the block at column
// col, times each token's 4 activations there, into part a of the (vector, token) sums.
template <class F, DotKind K, class W, int H, int T, int kSplit>
HWY_INLINE void GroupDots(const uint8_t* const* g, int G, const TokenActs* tok, int col,
                          typename W::VI (&I)[H][T][kSplit], int a) {
  const typename W::DI di;
  typename W::V8 w[H];
  HWY_UNROLL(8)
  for (int h = 0; h < H; ++h) w[h] = F::template Group<W>(g + W::kPanels * h, G);
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) {
    const auto x = Broadcast4(di, tok[t].q + col + 4 * G);
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) I[h][t][a] = Dot<K>(I[h][t][a], w[h], x);
  }
}

// A tile's output: vector h's rows for token t start at P(h, t); mask[h] keeps the real ones.
// (Addresses computed where used: an array of them kept T * H registers busy across the tile.)
template <class W, int H, int T>
struct OutRows {
  float* first;            // vector 0, token 0
  int64_t rows, vec_rows;  // floats from one token to the next, and from one vector to the next
  typename W::Mask mask[H];
  HWY_INLINE float* P(int h, int t) const { return first + t * rows + h * vec_rows; }
};
// The tile's float accumulators: in registers (an array, taken from and put back to the output
// once per tile), or in the output rows themselves (read and written at each update).
template <class W, int H, int T>
struct MemAcc {
  const OutRows<W, H, T>& out;
};
// acc (vector h, token t) = fn(acc).
template <class VF, int H, int T, class Fn>
HWY_INLINE void Update(VF (&acc)[H][T], int h, int t, Fn fn) {
  acc[h][t] = fn(acc[h][t]);
}
template <class W, int H, int T, class Fn>
HWY_INLINE void Update(const MemAcc<W, H, T>& acc, int h, int t, Fn fn) {
  const typename W::DF df;
  float* p = acc.out.P(h, t);
  hn::BlendedStore(fn(hn::MaskedLoad(acc.out.mask[h], df, p)), acc.out.mask[h], df, p);
}

// 32-element blocks [0, n): H vectors of panels (g[kP h + k]: vector h's panel k, at the first
// block) x T tokens into acc. skip: see Ahead.
template <class F, DotKind K, class W, int H, int T, class Acc>
HWY_INLINE void Blocks32(const uint8_t* const* g, int n, int64_t skip, const TokenActs* tok,
                         Acc&& acc) {
  constexpr int kP = W::kPanels, kSplit = SplitFor<T>(), kGB = F::f.group_bytes;
  const typename W::DI di;
  const typename W::DF df;
  for (int b = 0; b < n; ++b) {
    const uint8_t* gb[H * kP];
    HWY_UNROLL(8)
    for (int i = 0; i < H * kP; ++i) {
      gb[i] = g[i] + b * kGB;
      if constexpr (F::kDecoded) continue;  // in L1: decoded just before
      for (int o = 0; o < kGB; o += 64)
        hwy::Prefetch(Ahead(g[i], b * kGB + kPf32 + o, n * kGB, skip));
    }
    typename W::VI I[H][T][kSplit];
    ZeroSums(I);
    HWY_UNROLL(8)
    for (int G = 0; G < 8; ++G) GroupDots<F, K, W>(gb, G, tok, 32 * b, I, G % kSplit);
    // The rows' scales (and minimums) once per vector, for all the tokens.
    typename W::VF rd[H], rm[H];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      if constexpr (F::f.d_f32) {
        rd[h] = W::Floats(gb + kP * h, 0);
      } else {
        rd[h] = W::Halves(gb + kP * h, 0);
      }
      if constexpr (F::kMin) rm[h] = W::Halves(gb + kP * h, F::f.m_offset);
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const auto dx = hn::Set(df, tok[t].d[b]);
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        auto isum = SumSplit<kSplit>(I[h][t]);
        if constexpr (F::kShift != 0) {
          isum = hn::Sub(isum, hn::Set(di, tok[t].sums[b] << F::kShift));
        }
        const auto dd = hn::Mul(rd[h], dx);
        Update(acc, h, t, [&](typename W::VF a) {
          a = hn::MulAdd(hn::ConvertTo(df, isum), dd, a);
          if constexpr (F::kMin) a = hn::MulAdd(rm[h], hn::Set(df, tok[t].s[b]), a);
          return a;
        });
      }
    }
  }
}

// The correction term of a K super-block: sum over its integer-scale groups of a coefficient
// (int8 [groups][8] per panel) times the token's activation sum over the group. The coefficient
// pairs (group j, j + 1) as int16 per vector of panels, taken once per super-block ...
template <class W, int kSub>
HWY_INLINE void CoefPairs(const uint8_t* const* g, int at, typename W::V16* pairs) {
  HWY_UNROLL(8)
  for (int j = 0; j < 256 / kSub; j += 2) pairs[j / 2] = W::Int8Pairs(g, at + j * 8);
}
// ... the activation-sum pairs, as (int16, int16) in an int32, once per token ...
template <int kSub>
HWY_INLINE void SumPairs(const int16_t* sums, int32_t* out) {
  HWY_UNROLL(8)
  for (int j = 0; j < 256 / kSub; j += 2) {
    if constexpr (kSub == 16) {
      std::memcpy(&out[j / 2], sums + j, 4);
    } else {  // groups of 32: two sums of 16 each
      const int lo = sums[2 * j] + sums[2 * j + 1], hi = sums[2 * j + 2] + sums[2 * j + 3];
      out[j / 2] =
          static_cast<int32_t>(static_cast<uint16_t>(lo) | static_cast<uint32_t>(hi) << 16);
    }
  }
}
// ... and their multiply-add (exact in any order).
template <DotKind K, class W, int kSub>
HWY_INLINE typename W::VI Correction(const typename W::V16* pairs, const int32_t* sums) {
  const typename W::DI di;
  const typename W::D16 d16;
  auto c = hn::Zero(di);
  HWY_UNROLL(8)
  for (int j = 0; j < 256 / kSub / 2; ++j) {
    c = DotPairs<K>(c, pairs[j], hn::BitCast(d16, hn::Set(di, sums[j])));
  }
  return c;
}

// A K super-block's end: its integer sums S (and correction) scaled into acc. gs: the panels'
// groups of this super-block, tok: the tokens' activations from its first column.
template <class F, DotKind K, class W, int H, int T, class Acc>
HWY_INLINE void ScaleSuperBlock(const uint8_t* const* gs, const TokenActs* tok, int s,
                                const typename W::VI (&S)[H][T], Acc&& acc) {
  constexpr int kP = W::kPanels, kSub = F::f.sub, kPairs = 256 / kSub / 2;
  const typename W::DF df;
  int32_t sums[T][kPairs];
  if constexpr (F::kMin || F::kShift != 0) {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) SumPairs<kSub>(tok[t].sums + 16 * s, sums[t]);
  }
  if constexpr (F::kMin) {
    // Vectors outermost, so that only one vector's coefficients are live at a time (all of them
    // would crowd out the accumulators).
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      typename W::V16 coef[kPairs];
      CoefPairs<W, kSub>(gs + kP * h, F::f.mn_offset, coef);
      const auto rd = W::Halves(gs + kP * h, 0), rm = W::Halves(gs + kP * h, F::f.m_offset);
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        const auto dx = hn::Set(df, tok[t].d[s]);
        const auto c = Correction<K, W, kSub>(coef, sums[t]);
        Update(acc, h, t, [&](typename W::VF a) {
          a = hn::MulAdd(hn::ConvertTo(df, S[h][t]), hn::Mul(rd, dx), a);
          return hn::NegMulAdd(hn::ConvertTo(df, c), hn::Mul(rm, dx), a);
        });
      }
    }
  } else {
    typename W::V16 coef[H][F::kShift != 0 ? kPairs : 1];
    typename W::VF rd[H];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      if constexpr (F::f.d_f32) {
        rd[h] = W::Floats(gs + kP * h, 0);
      } else {
        rd[h] = W::Halves(gs + kP * h, 0);
      }
      if constexpr (F::kShift != 0) CoefPairs<W, kSub>(gs + kP * h, F::f.sc_offset, coef[h]);
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const auto dx = hn::Set(df, tok[t].d[s]);
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        const auto dd = hn::Mul(rd[h], dx);
        auto sum = S[h][t];
        if constexpr (F::kShift != 0) {
          sum = hn::Sub(sum, hn::ShiftLeft<F::kShift>(Correction<K, W, kSub>(coef[h], sums[t])));
        }
        Update(acc, h, t,
               [&](typename W::VF a) { return hn::MulAdd(hn::ConvertTo(df, sum), dd, a); });
      }
    }
  }
}

// K super-blocks [0, n): H vectors of panels x T tokens into acc.
template <class F, DotKind K, class W, int H, int T, class Acc>
HWY_INLINE void Blocks256(const uint8_t* const* g, int n, int64_t skip, const TokenActs* tok,
                          Acc&& acc) {
  constexpr int kP = W::kPanels, kGB = F::f.group_bytes, kSub = F::f.sub;
  constexpr int kSplit = SplitFor<T>();
  constexpr int kLines = (kGB + 63) / 64, kLinesPerJ = (kLines + 256 / kSub - 1) / (256 / kSub);
  constexpr bool kUnroll = TilePolicy<W>::UnrollSubBlocks(T, kSub, F::f.p2 && F::f.p1);
  const typename W::DI di;
  for (int s = 0; s < n; ++s) {
    const uint8_t* gs[H * kP];
    HWY_UNROLL(8)
    for (int i = 0; i < H * kP; ++i) gs[i] = g[i] + s * kGB;
    typename W::VI S[H][T];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) S[h][t] = hn::Zero(di);
    }
    auto sub_block = [&](int j) __attribute__((always_inline)) {
      // Every cache line of the group kAheadGroups ahead, spread over its integer-scale groups.
      HWY_UNROLL(8)
      for (int i = 0; i < (F::kDecoded ? 0 : H * kP); ++i) {
        HWY_UNROLL(8)
        for (int l = j * kLinesPerJ; l < (j + 1) * kLinesPerJ && l < kLines; ++l) {
          hwy::Prefetch(Ahead(g[i], (s + kAheadGroups) * kGB + l * 64, n * kGB, skip));
        }
      }
      typename W::VI I[H][T][kSplit];
      ZeroSums(I);
      // Unrolled, the groups' addresses hidden from the compiler per sub-block: sub-blocks j and
      // j + 256 / kSub / 2 of 4-bit types read the same bytes (low and high nibbles), and where
      // both are in one body, merging their loads kept the second half's bytes live across it,
      // spilled (512-bit tiles: a third of the instructions); reloading them is cheaper.
      const uint8_t* gj[H * kP];
      HWY_UNROLL(8)
      for (int i = 0; i < H * kP; ++i) {
        gj[i] = gs[i];
        if constexpr (kUnroll) asm("" : "+r"(gj[i]));
      }
      HWY_UNROLL(8)
      for (int i = 0; i < kSub / 4; ++i) {
        const int G = j * (kSub / 4) + i;
        GroupDots<F, K, W>(gj, G, tok, 256 * s, I, i % kSplit);
      }
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        const auto sc = W::Int8s(gs + kP * h, F::f.sc_offset + j * 8);
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          S[h][t] = hn::Add(S[h][t], hn::Mul(SumSplit<kSplit>(I[h][t]), sc));
          // Scaled here, per sub-block: unrolled whole in 512-bit tiles, GCC kept every
          // sub-block's sums live to the super-block's end to multiply them there, spilled
          // (IQ4_XS: 261 stack accesses per super-block, 25 with this; BM_MatMul 2048x2048,
          // 512 tokens: 15% faster).
          if constexpr (kUnroll && TilePolicy<W>::kWide) asm("" : "+v"(S[h][t].raw));
        }
      }
    };
    UnrolledFor<kUnroll ? 256 / kSub : 1>(256 / kSub, sub_block);
    ScaleSuperBlock<F, K, W, H, T>(gs, tok, s, S, acc);
  }
}

// Tokens [t0, t0 + T) over blocks [b0, b0 + n) of H vectors of W::kPanels panels (vector h: the
// panels from p0 + h * pstride), accumulated into out (starting from 0 when b0 == 0); whole rows
// (n is every block) or a column chunk.
// (F Decoded: its groups are at `decoded`, DecodeChunk's output for these panels and blocks.)
template <class F, DotKind K, class W, int H, int T>
void RunTile(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int64_t pstride, int64_t b0,
             int n, int64_t t0, const uint8_t* decoded) {
  constexpr int kP = W::kPanels;
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
  const uint8_t* g[H * kP];
  OutRows<W, H, T> out{job.out + t0 * rows + 8 * p0, rows, 8 * pstride, {}};
  HWY_UNROLL(8)
  for (int h = 0; h < H; ++h) {
    const int64_t p = p0 + h * pstride;
    HWY_UNROLL(2)
    for (int k = 0; k < kP; ++k) {
      if constexpr (F::kDecoded) {
        g[kP * h + k] = decoded + h * n * F::f.group_bytes + k * F::kHeaderBytes;
      } else {
        g[kP * h + k] = pm.Group(std::min(p + k, (rows - 1) / 8), b0);
      }
    }
    out.mask[h] = W::FirstRows(rows - 8 * p);
  }
  // A panel's stream goes on in the next tile's same stream: H panels on when they are
  // consecutive and whole rows are run, else right after (a column chunk's next chunk). 512-bit
  // tiles only ever run column chunks of whole vectors: there skip is a constant 0 (computed, it
  // cost registers).
  const int64_t skip = kP == 1 && n == pm.blocks && pstride == 1
                           ? (H - 1) * static_cast<int64_t>(pm.panel_bytes)
                           : 0;
  auto blocks = [&](auto&& acc) __attribute__((always_inline)) {
    if constexpr (F::kK) {
      Blocks256<F, K, W, H, T>(g, n, skip, tok, acc);
    } else {
      Blocks32<F, K, W, H, T>(g, n, skip, tok, acc);
    }
  };
  const typename W::DF df;
  if constexpr (F::kK && TilePolicy<W>::kAccInMemory) {
    if (b0 == 0) {
      HWY_UNROLL(8)
      for (int h = 0; h < H; ++h) {
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) hn::BlendedStore(hn::Zero(df), out.mask[h], df, out.P(h, t));
      }
    }
    const MemAcc<W, H, T> acc{out};
    blocks(acc);
  } else {
    typename W::VF acc[H][T];
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        acc[h][t] = b0 == 0 ? hn::Zero(df) : hn::MaskedLoad(out.mask[h], df, out.P(h, t));
      }
    }
    blocks(acc);
    HWY_UNROLL(8)
    for (int h = 0; h < H; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) hn::BlendedStore(acc[h][t], out.mask[h], df, out.P(h, t));
    }
  }
}

// Tokens [t0, t1) in tiles of T, the rest in one smaller tile.
template <class F, DotKind K, class W, int H, int T>
void RunTokens(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int64_t pstride,
               int64_t b0, int n, int64_t t0, int64_t t1, const uint8_t* decoded = nullptr) {
  for (; t0 + T <= t1; t0 += T) {
    RunTile<F, K, W, H, T>(job, pm, p0, pstride, b0, n, t0, decoded);
  }
  if constexpr (T > 1) {
    if (t0 < t1) RunTokens<F, K, W, H, T - 1>(job, pm, p0, pstride, b0, n, t0, t1, decoded);
  }
}

#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
