// Conversion between float rows and the KV cache's row types (kv/kv_cache.h's KvType): writing a
// token's K and V into the cache, and reading them back where something other than attention
// needs the values (moving keys to new positions, comparing values when blending modules). F16
// goes through the SIMD row conversion, Q8_0 and Q4_0 through ggml's reference quantizers
// (ops/quantize.h) block by block; the attention kernels read every type as it is stored.
#pragma once

#include <cstdint>

#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "ops/attention.h"

namespace promptcache {

// A KV row type as the row conversions (ggml's types) and the attention kernels name it.
GgmlType KvRowGgmlType(KvType type);
AttnRowType KvRowAttnType(KvType type);

// n values (a whole row: for the quantized types a multiple of 32) into dst, in `type`.
void StoreKvRow(KvType type, const float* x, int n, uint8_t* dst);
// A stored row of n values back to floats.
void LoadKvRow(KvType type, const uint8_t* src, int n, float* x);

}  // namespace promptcache
