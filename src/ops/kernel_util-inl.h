// Per-target helpers shared by the Highway kernel files (matvec_kernels.cc, matmat_kernels.cc):
// lane types, ggml block constants, f16 scale loads and float-like weight row loaders.
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

constexpr int kQ8Bytes = 34;
constexpr int kQ4Bytes = 18;
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

inline float ReduceSum(VF v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

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
