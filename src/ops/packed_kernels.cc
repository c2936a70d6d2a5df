// Matrix products of packed quantized weights (packed.h), for any number of tokens, with the
// integer form's canonical arithmetic (weight_types.h): results equal DotIntForm's bit for bit.
//
// x86 (AVX2, AVX-512): the kernels of packed_tile-inl.h, written once for both vector widths
// (packed_width-inl.h), run by packed_run-inl.h (which width, tile and multiply-add run which
// rows and tokens: few tokens whole rows with 256-bit vectors; many tokens chunks of columns,
// kept in L1, for groups of tokens, with AVX-512 VNNI two panels per 512-bit vector; the weights
// read in the order they are stored). Instantiated here for every type but the low-bit i-quants,
// whose three shapes packed_kernels_iq.cc instantiates: two units, compiled in parallel.
//
// Other targets read the integer form back block by block (UnpackBlock) in plain C++.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/packed_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/enum_names.h"
#include "hwy/highway.h"
#include "ops/matmul_internal.h"
#include "ops/packed.h"
#include "ops/packed_run-inl.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---------------------------------------------------------------- x86

// Calls fn(std::integral_constant<GgmlType, T>()) for the packed type T == type (not the low-bit
// i-quants: packed_kernels_iq.cc runs those).
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
    case T::kMXFP4:
      return fn(std::integral_constant<T, T::kMXFP4>());
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
  if (pm.format->lut_offset >= 0) return PackedMatMulIQuantRows(job, pm, q0, q1);
  VisitPackedType(pm.format->type,
                  [&](auto type) { RunType<decltype(type)::value>(job, pm, q0, q1); });
}

const char* PackedKernelNameImpl(GgmlType type) {
  if (FindPackedFormat(type) == nullptr) return "unsupported";
  static constexpr EnumName<DotKind> kNames[] = {{DotKind::kUnsigned, "packed_int8_maddubs"},
                                                 {DotKind::kSigned, "packed_int8_maddubs_sign"},
                                                 {DotKind::kVnni, "packed_int8_vpdpbusd"}};
  static_assert(NamesEach(kNames, DotKind::kUnsigned, DotKind::kVnni));
  return NameOf(kNames, ChooseDot(*FindPackedFormat(type)), "packed_int8_maddubs");
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
