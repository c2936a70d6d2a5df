// Per-target helpers shared by the Highway kernel files (packed_kernels.cc, float_kernels.cc,
// attention.cc): lane types, ggml block constants, f16 scale loads, float-like weight row
// loaders, and lane sums.
// Included once per target after hwy/highway.h, as Highway's -inl.h convention requires.

// Per-target include guard (toggled by foreach_target).
#if defined(PC_OPS_KERNEL_UTIL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PC_OPS_KERNEL_UTIL_INL_H_
#undef PC_OPS_KERNEL_UTIL_INL_H_
#else
#define PC_OPS_KERNEL_UTIL_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI32 = hn::RebindToSigned<DF>;
using DI16 = hn::Repartition<int16_t, DI32>;
using DI8H = hn::Rebind<int8_t, DI16>;  // as many int8 lanes as DI16 has int16 lanes
using DU16 = hn::RebindToUnsigned<DI16>;
using DU8H = hn::Rebind<uint8_t, DU16>;
using DI8Q = hn::Rebind<int8_t, DI32>;  // as many int8 lanes as DI32 has int32 lanes
using DU8Q = hn::Rebind<uint8_t, DI32>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using DB = hn::Rebind<hwy::bfloat16_t, DF>;
using VF = hn::Vec<DF>;

constexpr int kBlock = 32;

// The f16 scale at p (unaligned).
inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
  return _cvtsh_ss(h);
#else
  return F16ToF32(h);
#endif
}

template <class D = DF>
HWY_INLINE float ReduceSum(hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(D(), v));
}

// out[i] = the sum of a_i's lanes, i < 4, for about a third of four ReduceSums' shuffles: sums
// of lane pairs, then of pairs of pairs within each 128-bit block (the four vectors interleaved,
// so every step serves all of them), then the halves while wider than a block.
template <class D = DF>
HWY_INLINE void SumLanes4(hn::Vec<D> a0, hn::Vec<D> a1, hn::Vec<D> a2, hn::Vec<D> a3, float* out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a0);
  out[1] = hn::GetLane(a1);
  out[2] = hn::GetLane(a2);
  out[3] = hn::GetLane(a3);
#else
  using V = hn::Vec<D>;
  const D d;
  const hn::Repartition<uint64_t, D> d64;
  const V t0 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const V t1 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const auto w0 = hn::BitCast(d64, t0), w1 = hn::BitCast(d64, t1);
  // Block b, lane i: the sum over a_i's lanes in block b.
  const V u = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w0, w1)),
                      hn::BitCast(d, hn::InterleaveUpper(d64, w0, w1)));
  const int L = static_cast<int>(hn::Lanes(d));
  const hn::Half<D> dh;
  const hn::Half<decltype(dh)> dq;
  if (L == 4) {
    hn::StoreU(u, d, out);
  } else if (L == 8) {
    hn::StoreU(hn::Add(hn::LowerHalf(dh, u), hn::UpperHalf(dh, u)), dh, out);
  } else if (L == 16) {
    const auto h = hn::Add(hn::LowerHalf(dh, u), hn::UpperHalf(dh, u));
    hn::StoreU(hn::Add(hn::LowerHalf(dq, h), hn::UpperHalf(dq, h)), dq, out);
  } else {
    HWY_ALIGN float lanes[hn::MaxLanes(D())];
    hn::Store(u, d, lanes);
    for (int i = 0; i < 4; ++i) {
      float sum = lanes[i];
      for (int b = 4; b < L; b += 4) sum += lanes[b + i];
      out[i] = sum;
    }
  }
#endif
}

// Float-like weight rows (F32, F16, BF16): Load(d, row, i) gives lanes i.. of a row as f32,
// At(row, i) one element.
struct F32Rows {
  static constexpr int kBytes = 4;
  static VF Load(DF d, const uint8_t* row, int64_t i) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + i);
  }
  static float At(const uint8_t* row, int64_t i) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
};
struct F16Rows {
  static constexpr int kBytes = 2;
  static VF Load(DF d, const uint8_t* row, int64_t i) {
    return hn::PromoteTo(d, hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(row) + i));
  }
  static float At(const uint8_t* row, int64_t i) { return HalfAt(row + 2 * i); }
};
struct BF16Rows {
  static constexpr int kBytes = 2;
  static VF Load(DF d, const uint8_t* row, int64_t i) {
    return hn::PromoteTo(d, hn::LoadU(DB(), reinterpret_cast<const hwy::bfloat16_t*>(row) + i));
  }
  static float At(const uint8_t* row, int64_t i) {
    uint16_t v;
    std::memcpy(&v, row + 2 * i, 2);
    return BF16ToF32(v);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
