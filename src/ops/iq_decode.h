// The low-bit i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) in the integer
// form of weight_types.h: each is a super-block of 256 with Q8_K activations in ggml too, and
// each element is d * (2s + 1) * (a codebook magnitude times a sign, or IQ1's 8 * {-1, 0, 1} +- 1)
// with d the file's f16 scale times 1 (IQ3_S), 1/4 (IQ3_XXS) or 1/8 (the others): powers of two,
// so the integer form's (d * sc) * q is ggml's dequantization to the bit. Decode* give the whole
// integer form, Scales* only d and sc (what the kernels take from the scalar code). Not for use
// outside ops/.
#pragma once

#include <cstdint>

#include "ops/weight_types.h"

namespace promptcache::quant {

void DecodeIQ2_XXS(const uint8_t* block, IntBlock* out);
void ScalesIQ2_XXS(const uint8_t* block, IntBlock* out);
void DecodeIQ2_XS(const uint8_t* block, IntBlock* out);
void ScalesIQ2_XS(const uint8_t* block, IntBlock* out);
void DecodeIQ2_S(const uint8_t* block, IntBlock* out);
void ScalesIQ2_S(const uint8_t* block, IntBlock* out);
void DecodeIQ3_XXS(const uint8_t* block, IntBlock* out);
void ScalesIQ3_XXS(const uint8_t* block, IntBlock* out);
void DecodeIQ3_S(const uint8_t* block, IntBlock* out);
void ScalesIQ3_S(const uint8_t* block, IntBlock* out);
void DecodeIQ1_S(const uint8_t* block, IntBlock* out);
void ScalesIQ1_S(const uint8_t* block, IntBlock* out);
void DecodeIQ1_M(const uint8_t* block, IntBlock* out);
void ScalesIQ1_M(const uint8_t* block, IntBlock* out);

}  // namespace promptcache::quant
