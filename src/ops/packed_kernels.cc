// Matrix products of packed quantized weights (packed.h), for any number of tokens, with the
// integer form's canonical arithmetic (weight_types.h): results equal DotIntForm's bit for bit.
//
// x86 (AVX2, AVX-512): the kernels of packed_tile-inl.h, written once for both vector widths
// (packed_width-inl.h); here, which width, tile and multiply-add run which rows and tokens. Few
// tokens run whole rows with 256-bit vectors; many tokens run chunks of columns (kept in L1) for
// groups of tokens, with AVX-512 VNNI two panels per 512-bit vector. The weights are read in the
// order they are stored.
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
#include "ops/packed_tile-inl.h"
#include "ops/packed_width-inl.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---------------------------------------------------------------- x86

using Width256 = PanelWidth<1>;
#if HWY_TARGET <= HWY_AVX3
using Width512 = PanelWidth<2>;
#endif

constexpr int kMaxRowTokens = 4;           // up to this many tokens, whole rows at a time
constexpr int64_t kChunkBytes = 16 << 10;  // else: column chunks of about this many packed bytes

#if HWY_TARGET <= HWY_AVX3
constexpr int kVectors256 = 2;  // 32 registers: two 256-bit vectors of panels per pass
#else
constexpr int kVectors256 = 1;
#endif

// Panels [p0, p0 + H * W::kPanels), all tokens, in column chunks of `chunk` blocks.
template <class F, DotKind K, class W, int H, int T>
void RunChunks(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int chunk) {
  const int blocks = static_cast<int>(pm.blocks);
  for (int b0 = 0; b0 < blocks; b0 += chunk) {
    RunTokens<F, K, W, H, T>(job, pm, p0, W::kPanels, b0, std::min(chunk, blocks - b0), 0,
                             job.n_tokens);
  }
}

// Panels [q0, q1) (of 8 rows), all tokens. Few tokens run whole rows, 256-bit, the H vectors of
// a tile a 1/H of the range apart, so that each is one long sequential stream through the
// weights (the pattern memory prefetchers serve best); many tokens run column chunks of
// consecutive panels, with AVX-512 VNNI two panels per 512-bit vector (on CPUs that run 512-bit
// vectors at full width, twice the products per instruction issued).
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
#if HWY_TARGET <= HWY_AVX3
  if constexpr (K == DotKind::kVnni) {
    // Two vectors of two panels per pass, in tiles of 6 tokens (measured faster than 4); a pair
    // left over below with 4; a panel left over after them, 256-bit.
    constexpr int kPairs = 2;
    const int chunk =
        std::max<int>(1, static_cast<int>(kChunkBytes / (2 * kPairs * F::f.group_bytes)));
    for (; q0 + 2 * kPairs <= q1; q0 += 2 * kPairs) {
      RunChunks<F, K, Width512, kPairs, 6>(job, pm, q0, chunk);
    }
    for (; q0 + 2 <= q1; q0 += 2) RunChunks<F, K, Width512, 1, 4>(job, pm, q0, chunk);
  }
#endif
  const int chunk = std::max<int>(1, static_cast<int>(kChunkBytes / (H * F::f.group_bytes)));
  for (int64_t p0 = q0; p0 < q1; p0 += H) {
    if (p0 + H <= q1) {
      RunChunks<F, K, Width256, H, 4>(job, pm, p0, chunk);
    } else {  // an odd panel left: alone
      RunChunks<F, K, Width256, 1, 4>(job, pm, p0, chunk);
    }
  }
}

// Whether kType's packed quants are signed values (Q8_0, IQ4 types) rather than unsigned u, and
// so the multiply-add its panels take without VNNI.
template <GgmlType kType>
constexpr bool kSignedQuants = FindPackedFormat(kType)->p8 ||
                               FindPackedFormat(kType)->lut != nullptr;
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
    return RunPanels<Fmt<kType, kSignedQuants<kType>>, DotKind::kVnni>(job, pm, q0, q1);
  }
#endif
  return RunPanels<Fmt<kType, false>, kPlainDot<kType>>(job, pm, q0, q1);
}

// The types VisitPackedType runs with another's kernel lay out their groups as that one does.
constexpr bool SameShape(GgmlType a, GgmlType b) {
  return SamePackedShape(*FindPackedFormat(a), *FindPackedFormat(b));
}
static_assert(SameShape(GgmlType::kIQ3_S, GgmlType::kIQ3_XXS) &&
              SameShape(GgmlType::kIQ2_XXS, GgmlType::kIQ3_XXS) &&
              SameShape(GgmlType::kIQ1_S, GgmlType::kIQ3_XXS) &&
              SameShape(GgmlType::kIQ2_S, GgmlType::kIQ2_XS) &&
              SameShape(GgmlType::kIQ1_M, GgmlType::kIQ2_XS));

// Calls fn(std::integral_constant<GgmlType, T>()) for the packed type T == type, or for the type
// whose kernel runs type's shape.
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
    // The low-bit i-quants: one kernel per shape, the LUT read from the packed groups.
    case T::kIQ3_XXS:
    case T::kIQ3_S:
    case T::kIQ2_XXS:
    case T::kIQ1_S:
      return fn(std::integral_constant<T, T::kIQ3_XXS>());
    case T::kIQ2_XS:
    case T::kIQ2_S:
    case T::kIQ1_M:
      return fn(std::integral_constant<T, T::kIQ2_XS>());
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
  static constexpr EnumName<DotKind> kNames[] = {{DotKind::kUnsigned, "packed_int8_maddubs"},
                                                 {DotKind::kSigned, "packed_int8_maddubs_sign"},
                                                 {DotKind::kVnni, "packed_int8_vpdpbusd"}};
  static_assert(NamesEach(kNames, DotKind::kUnsigned, DotKind::kVnni));
  return VisitPackedType(type, [](auto t) {
    return NameOf(kNames, ChooseDot<decltype(t)::value>(), "packed_int8_maddubs");
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
