// Conversion of rows between float and the ggml storage types: reading embedding rows out of a
// weight matrix, writing synthetic and quantized models, and the reference for the matmul
// kernels. Every type in weight_types.h's table dequantizes (F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K..Q6_K, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M,
// IQ1_S); those with a quantizer (not the low-bit i-quants) also quantize.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

constexpr int kQ8_0Block = 32;  // struct { f16 d; int8 qs[32]; }: 34 bytes
constexpr int kQ4_0Block = 32;  // struct { f16 d; uint8 qs[16]; }: 18 bytes, low nibbles first

// True for the types rows can be read from (DequantizeRow).
bool RowConversionSupports(GgmlType type);
// True for the types rows can be written in (QuantizeRow).
bool QuantizeSupports(GgmlType type);
// n must be a multiple of the type's block size.
void DequantizeRow(GgmlType type, const void* src, int64_t n, float* dst);
void QuantizeRow(GgmlType type, const float* src, int64_t n, void* dst);

}  // namespace promptcache
