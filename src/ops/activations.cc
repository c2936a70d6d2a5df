// Activations rounded to 8 bits in the forms the quantized weights need (QuantizeActivations,
// vectorized; bit-identical to QuantizeActivationsReference), and quantized matrices without a
// packed form multiplied by a plain loop over their integer form: the same arithmetic as the
// packed kernels (packed_kernels.cc), which every model uses, at a fraction of their speed.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/activations.cc"
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

// ---------------------------------------------------------------- unpacked matrices

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

// The same plain loop on every target.
const char* IntKernelName(GgmlType type) {
  const WeightTypeInfo* t = FindWeightType(type);
  return t != nullptr && t->decode != nullptr ? "unpacked_int8_loop" : "unsupported";
}

void QuantizeActivations(ActFormat format, const float* x, int64_t n, int8_t* q, float* d,
                         int16_t* sums, float* s) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationsImpl)(format, x, n, q, d, sums, s);
}

}  // namespace promptcache::internal
#endif  // HWY_ONCE
