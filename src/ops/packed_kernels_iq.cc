// The low-bit i-quants' packed kernels (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S):
// the seven types have three packed shapes (IQ3: 4-bit planes, scales per 32; IQ2 and IQ1: 3-bit
// planes, scales per 32 or per 16), each run by one instantiation of packed_run-inl.h that reads
// its type's LUT from the packed groups
// (packed.h). A unit of its own so that it compiles in parallel with packed_kernels.cc (the
// slowest unit of the build), which calls it for these types on x86.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/packed_kernels_iq.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include "core/check.h"
#include "hwy/highway.h"
#include "ops/matmul_internal.h"
#include "ops/packed.h"
#include "ops/packed_run-inl.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

// The types run with another's kernel lay out their groups as that one does.
constexpr bool SameShape(GgmlType a, GgmlType b) {
  return SamePackedShape(*FindPackedFormat(a), *FindPackedFormat(b));
}
static_assert(SameShape(GgmlType::kIQ3_S, GgmlType::kIQ3_XXS) &&
              SameShape(GgmlType::kIQ1_S, GgmlType::kIQ2_XXS) &&
              SameShape(GgmlType::kIQ2_S, GgmlType::kIQ2_XS) &&
              SameShape(GgmlType::kIQ1_M, GgmlType::kIQ2_XS));

void PackedMatMulIQuantRows(const MatMulJob& job, const PackedMatrix& pm, int64_t q0, int64_t q1) {
  switch (pm.format->type) {
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
      return RunType<GgmlType::kIQ3_XXS>(job, pm, q0, q1);
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ1_S:
      return RunType<GgmlType::kIQ2_XXS>(job, pm, q0, q1);
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ1_M:
      return RunType<GgmlType::kIQ2_XS>(job, pm, q0, q1);
    default:
      PC_CHECK(false && "not a low-bit i-quant");
  }
}

#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();
