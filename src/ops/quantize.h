// Quantizers: one block of floats into a ggml block (layouts in quant_blocks.h), for `synth` and
// `quantize`. Each is tested by dequantizing its output with the reference (weight_types.cc):
// the error must stay within what the format's resolution allows. Q8_0 and Q4_0 round as ggml's
// reference does; the others search for their scales (quantize_fit.h) and store, for the scales
// as rounded, the nearest level of every value. Their bytes need not match llama.cpp's: the
// format is the same, and any reader dequantizes them alike.
#pragma once

#include <cstdint>

namespace promptcache {

// 32 elements.
void QuantizeBlockQ8_0(const float* x, uint8_t* block);
void QuantizeBlockQ4_0(const float* x, uint8_t* block);
void QuantizeBlockQ4_1(const float* x, uint8_t* block);
void QuantizeBlockQ5_0(const float* x, uint8_t* block);
void QuantizeBlockQ5_1(const float* x, uint8_t* block);
void QuantizeBlockIQ4_NL(const float* x, uint8_t* block);
void QuantizeBlockMXFP4(const float* x, uint8_t* block);

// 256 elements (quantize_k.cc).
void QuantizeBlockQ2_K(const float* x, uint8_t* block);
void QuantizeBlockQ3_K(const float* x, uint8_t* block);
void QuantizeBlockQ4_K(const float* x, uint8_t* block);
void QuantizeBlockQ5_K(const float* x, uint8_t* block);
void QuantizeBlockQ6_K(const float* x, uint8_t* block);
void QuantizeBlockIQ4_XS(const float* x, uint8_t* block);

}  // namespace promptcache
