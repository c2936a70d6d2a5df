// Small value types the public API shares between headers: today, how the engine stores the
// attention keys and values it caches (EngineOptions::kv_type in promptcache/engine_options.h).
#pragma once

namespace promptcache {

// How cached keys and values are stored: F16 halves the memory of F32 (the default, as
// llama.cpp's); F32 keeps the values exactly as computed. The quantized types are ggml's block
// formats: a token's row of kv_dim values (every KV head's, one after the other) is kv_dim / 32
// blocks of 32 values with an f16 scale each, Q8_0 in 34 bytes per block, Q4_0 (4-bit, offset
// 8) in 18. They need kv_dim to be a multiple of 32; a head may start inside a block when
// head_dim is not (8 for stories260K: its four heads share one block).
enum class KvType { kF16, kF32, kQ8_0, kQ4_0 };

}  // namespace promptcache
