// Internal interface between matmul.cc (API, activation preparation, threading, references) and
// the per-target Highway kernels: packed_kernels.cc (quantized weights, packed), activations.cc
// (activations rounded to 8 bits; quantized weights without a packed form) and float_kernels.cc
// (F32, F16, BF16). Not for use outside ops/.
//
// One kernel serves every batch size: a token's result is computed by the same operations
// whether it is decoded alone or prefilled among hundreds, so results never depend on the batch.
#pragma once

#include <cstdint>

#include "ops/matmul.h"
#include "ops/weight_types.h"

namespace promptcache::internal {

// Rows per work unit of the thread split (a multiple of every kernel's row panel).
constexpr int kRowTile = 16;

// Activations prepared once per call for the quantized weights that need them (null otherwise).
struct QuantizedActs {
  const int8_t* q = nullptr;      // [n_tokens x cols]
  const float* d = nullptr;       // [n_tokens x cols / block]
  const int16_t* sums = nullptr;  // [n_tokens x cols / 32] (Q8_0 form), [... / 16] (Q8_K form)
  const float* s = nullptr;       // [n_tokens x cols / 32] (Q8_0 form)

  // Elements per scale (block) and per sum (group) of a form: 32 and 32 (Q8_0), 256 and 16 (Q8_K).
  static int64_t Block(ActFormat f) { return f == ActFormat::kQ8_0 ? 32 : 256; }
  static int64_t Group(ActFormat f) { return f == ActFormat::kQ8_0 ? 32 : 16; }
  // The same arrays from token `t` on (rows of `cols`, in `form`); null arrays stay null, and so
  // does `s` but in the Q8_0 form.
  QuantizedActs From(ActFormat form, int64_t t, int64_t cols) const {
    const int64_t e = t * cols;
    return {q ? q + e : nullptr, d ? d + e / Block(form) : nullptr,
            sums ? sums + e / Group(form) : nullptr,
            s && form == ActFormat::kQ8_0 ? s + e / Block(form) : nullptr};
  }
};

struct MatMulJob {
  const WeightMatrix* w = nullptr;
  const WeightTypeInfo* info = nullptr;
  const float* x = nullptr;  // [n_tokens x cols], float weights
  QuantizedActs xq;          // quantized weights, in the form info->act names
  int64_t n_tokens = 0;
  float* out = nullptr;  // [n_tokens x rows]
};

// Rows [r0, r1) of job.out, all tokens; dispatched to the best Highway target.
void IntMatMulRows(const MatMulJob& job, int64_t r0, int64_t r1);
void PackedMatMulRows(const MatMulJob& job, int64_t r0, int64_t r1);  // job.w->packed set
void FloatMatMulRows(const MatMulJob& job, int64_t r0, int64_t r1);

// Which of the three above runs a matrix: MatMul's choice, and MatMulKernelName's.
enum class KernelPath { kFloat, kPacked, kUnpacked };
inline KernelPath ChooseKernelPath(const WeightTypeInfo& t, const WeightMatrix& w) {
  if (t.act == ActFormat::kFloat) return KernelPath::kFloat;
  return w.packed != nullptr ? KernelPath::kPacked : KernelPath::kUnpacked;
}

// The name of what each of them runs for `type` on the Highway target the dispatch chooses now
// (each kernel file answers from its own per-target code, next to the choices it names).
const char* IntKernelName(GgmlType type);
const char* PackedKernelName(GgmlType type);
const char* FloatKernelName(GgmlType type);

// Whether the AVX-512 kernels use VNNI (vpdpbusd): the CPU has it and no test turned it off.
// Results are the same either way; tests run both.
bool VnniEnabled();
void SetVnniDisabledForTest(bool disabled);

// QuantizeActivationsReference, vectorized: bit-identical results.
void QuantizeActivations(ActFormat format, const float* x, int64_t n, int8_t* q, float* d,
                         int16_t* sums, float* s);

}  // namespace promptcache::internal
