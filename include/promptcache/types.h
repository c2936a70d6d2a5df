// Small value types the public API shares between headers: today, how the engine stores the
// attention keys and values it caches (EngineOptions::kv_type in promptcache/engine.h).
#pragma once

namespace promptcache {

// The element type of cached keys and values: F16 halves the memory of F32 (the default, as
// llama.cpp's); F32 keeps the values exactly as computed.
enum class KvType { kF16, kF32 };

}  // namespace promptcache
