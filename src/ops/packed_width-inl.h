// The vector widths of the packed int8 kernels (packed_tile-inl.h), x86 with AVX2 or AVX-512: a
// width is how many panels of 8 rows sit side by side in one vector (one in 256 bits; two in 512
// bits, AVX-512 only) and says how the panels' bytes load into it. The kernels are written once
// over a width, with Highway's ops on its descriptors. Also here: the integer multiply-adds, the
// only operations Highway 1.0 has no op for (vpdpbusd, vpdpwssd; maddubs without VNNI).
//
// Included once per Highway target after hwy/highway.h, as Highway's -inl.h convention requires.

// Per-target include guard (toggled by foreach_target).
#if defined(PC_OPS_PACKED_WIDTH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PC_OPS_PACKED_WIDTH_INL_H_
#undef PC_OPS_PACKED_WIDTH_INL_H_
#else
#define PC_OPS_PACKED_WIDTH_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

// How a kernel multiplies the quants into the int32 sums: maddubs + madd, with the signed quants'
// signs moved onto the activations (kSigned) or without (kUnsigned), or AVX-512 VNNI's vpdpbusd.
enum class DotKind { kUnsigned, kSigned, kVnni };

// kP panels of 8 rows per vector: lane 8k + r is row r of panel k (the panel at g[k]).
template <int kP>
struct PanelWidth {
  static_assert(kP == 1 || (kP == 2 && HWY_TARGET <= HWY_AVX3));
  static constexpr int kPanels = kP;
  static constexpr int kRows = 8 * kP;

  using DI = hn::Simd<int32_t, 8 * kP, 0>;  // the rows' int32 sums
  using DF = hn::Repartition<float, DI>;    // ... and float accumulators
  using D8 = hn::Repartition<uint8_t, DI>;  // 4 quants of each row
  using D16 = hn::Repartition<int16_t, DI>;
  using VI = hn::Vec<DI>;
  using VF = hn::Vec<DF>;
  using V8 = hn::Vec<D8>;
  using V16 = hn::Vec<D16>;
  using Mask = hn::Mask<DF>;

  // The plane vector at byte `at` of each panel's group (32 bytes each).
  static HWY_INLINE V8 Load(const uint8_t* const* g, int at) {
    return Join<D8>([&](auto d, int k) { return hn::LoadU(d, g[k] + at); });
  }
  // The rows' f16 values at `at` (8 per panel), as floats.
  static HWY_INLINE VF Halves(const uint8_t* const* g, int at) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), Join<decltype(dh)>([&](auto d, int k) {
                           return hn::LoadU(d, reinterpret_cast<const hwy::float16_t*>(g[k] + at));
                         }));
  }
  // The rows' f32 values at `at` (8 per panel).
  static HWY_INLINE VF Floats(const uint8_t* const* g, int at) {
    return Join<DF>(
        [&](auto d, int k) { return hn::LoadU(d, reinterpret_cast<const float*>(g[k] + at)); });
  }
  // The rows' int8 values at `at` (8 per panel), as int32.
  static HWY_INLINE VI Int8s(const uint8_t* const* g, int at) {
    const hn::Rebind<int8_t, DI> d8;
    const auto v = Join<decltype(d8)>(
        [&](auto d, int k) { return hn::LoadU(d, reinterpret_cast<const int8_t*>(g[k] + at)); });
    return hn::PromoteTo(DI(), v);
  }
  // Two consecutive rows of int8 values at `at` (8 bytes each, per panel), as int16 pairs: lane
  // 2i, 2i + 1 of row i's dword are (first[i], second[i]).
  static HWY_INLINE V16 Int8Pairs(const uint8_t* const* g, int at) {
    const hn::Rebind<int8_t, D16> d8;
    alignas(16) static constexpr int8_t kZip[16] = {0, 8,  1, 9,  2, 10, 3, 11,
                                                    4, 12, 5, 13, 6, 14, 7, 15};
    const auto v = Join<decltype(d8)>(
        [&](auto d, int k) { return hn::LoadU(d, reinterpret_cast<const int8_t*>(g[k] + at)); });
    return hn::PromoteTo(D16(), hn::TableLookupBytes(v, hn::LoadDup128(d8, kZip)));
  }
  // The lanes of the first `valid` rows (fewer than kRows where the matrix ends).
  static HWY_INLINE Mask FirstRows(int64_t valid) {
    return hn::FirstN(DF(), static_cast<size_t>(std::clamp<int64_t>(valid, 0, kRows)));
  }

 private:
  // The vector of D whose k-th part (of kP) is part(d_part, k).
  template <class D, class Part>
  static HWY_INLINE hn::Vec<D> Join(Part part) {
    if constexpr (kP == 1) {
      return part(D(), 0);
    } else {
      const hn::Half<D> dh;
      return hn::Combine(D(), part(dh, 1), part(dh, 0));
    }
  }
};

// acc + per int32 lane j, a[2j] b[2j] + a[2j + 1] b[2j + 1] (int16 products, exact).
template <class DI, class V16 = hn::Vec<hn::Repartition<int16_t, DI>>>
HWY_INLINE hn::Vec<DI> MulPairsAdd(DI di, V16 a, V16 b, hn::Vec<DI> acc) {
  hn::Vec<DI> odd = hn::Zero(di);
  const hn::Vec<DI> even = hn::ReorderWidenMulAccumulate(di, a, b, hn::Zero(di), odd);
  return hn::Add(acc, hn::RearrangeToOddPlusEven(even, odd));
}

// acc + per int32 lane, the 4 products of w's unsigned bytes and x's signed bytes (kSigned: of
// w's signed bytes, their signs moved onto x so that maddubs cannot saturate).
template <DotKind K, class VI, class V8>
HWY_INLINE VI Dot(VI acc, V8 w, VI x) {
  if constexpr (K == DotKind::kVnni) {
#if HWY_TARGET <= HWY_AVX3
    // EVEX encoding by hand: Highway's AVX3_DL flags would let the compiler pick the VEX form
    // (AVX-VNNI), which AVX-512 VNNI CPUs such as Ice Lake do not have.
    asm("vpdpbusd %2, %1, %0" : "+v"(acc.raw) : "v"(w.raw), "v"(x.raw));
#endif
    return acc;
  } else {
    using DI = hn::DFromV<VI>;
    static_assert(hn::MaxLanes(DI()) == 8, "maddubs kernels are 256-bit");
    const hn::Repartition<int16_t, DI> d16;
    __m256i wr = w.raw, xr = x.raw;
    if constexpr (K == DotKind::kSigned) {
      xr = _mm256_sign_epi8(xr, wr);
      wr = _mm256_sign_epi8(wr, wr);
    }
    const hn::Vec<decltype(d16)> pairs{_mm256_maddubs_epi16(wr, xr)};
    acc = MulPairsAdd(DI(), pairs, hn::Set(d16, 1), acc);
    // Each sum one chain, as the kernels split them (vpdpbusd's are, inside its asm): GCC would
    // regroup the exact integer additions of a branchless sub-block into a tree, every product
    // live at once (spilled: AVX2 Q4_K with 4 tokens, three times the stack traffic).
    asm("" : "+v"(acc.raw));
    return acc;
  }
}

// acc + MulPairsAdd(a, b): with VNNI one vpdpwssd.
template <DotKind K, class VI, class V16>
HWY_INLINE VI DotPairs(VI acc, V16 a, V16 b) {
  if constexpr (K == DotKind::kVnni) {
#if HWY_TARGET <= HWY_AVX3
    asm("vpdpwssd %2, %1, %0" : "+v"(acc.raw) : "v"(a.raw), "v"(b.raw));
#endif
    return acc;
  } else {
    return MulPairsAdd(hn::DFromV<VI>(), a, b, acc);
  }
}

#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
