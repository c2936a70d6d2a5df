// Quantizers: one block of floats into a ggml block (layouts in quant_blocks.h), for `synth` and
// `quantize`. Each is tested by dequantizing its output with the reference (weight_types.cc):
// the error must stay within what the format's resolution allows. They favour clarity over the
// last bit of accuracy; files for production come from llama.cpp's quantizer or ours alike,
// since the format is the same.
#pragma once

#include <cstdint>

namespace promptcache {

void QuantizeBlockQ8_0(const float* x, uint8_t* block);  // 32 elements
void QuantizeBlockQ4_0(const float* x, uint8_t* block);  // 32 elements

}  // namespace promptcache
