// Conversion of rows between float and the ggml storage types (F16, BF16, Q8_0, Q4_0): reading
// embedding rows out of a weight matrix, writing synthetic models, and the reference for the
// quantized matmul kernels. Block layouts match ggml's so files interoperate with other engines.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

constexpr int kQ8_0Block = 32;  // struct { f16 d; int8 qs[32]; }: 34 bytes
constexpr int kQ4_0Block = 32;  // struct { f16 d; uint8 qs[16]; }: 18 bytes, low nibbles first

// True for the types below can convert (F32, F16, BF16, Q8_0, Q4_0).
bool RowConversionSupports(GgmlType type);
// n must be a multiple of the type's block size.
void DequantizeRow(GgmlType type, const void* src, int64_t n, float* dst);
void QuantizeRow(GgmlType type, const float* src, int64_t n, void* dst);

}  // namespace promptcache
