// Moving cached K/V to other positions. RoPE rotates each pair of a key's dimensions by
// position × θ_i, and rotations compose: a key cached at position p becomes the key at p + Δ by
// one more rotation of Δ × θ_i, exact up to rounding, while values do not depend on the position
// at all. The modular prompt cache uses it to lay modules encoded at one position out at another
// (the contiguous position mode): the cached entries are copied into fresh blocks, keys rotated,
// values as they are.
#pragma once

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/config.h"

namespace promptcache {

// Appends tokens [begin, end) of `src` to `dst` at their positions + delta: keys rotated by
// delta, values copied. The new slots are dst's own (never shared). Layers are spread over
// `pool` when given. ResourceExhausted when the pool is full (dst unchanged).
Status AppendShifted(const ModelConfig& config, const KvSequence& src, int begin, int end,
                     int delta, KvSequence* dst, ThreadPool* pool = nullptr);

}  // namespace promptcache
