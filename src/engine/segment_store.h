// The K/V side of the segment cache (docs/modules.md "Segments"): runs of prompt tokens reusable
// on their own (a chat message, a retrieved document: CompletionRequest::segments), stored by the
// hash of their own tokens and found wherever they appear in a later prompt.
//
// Keys. A segment's content key hashes its tokens with what must match for its K/V to be usable:
// the encoding (SegmentEncoding, and kAlone's preamble), the KV type and the root key of the
// request's cache namespace, so two namespaces never share a segment; never its position or what
// precedes it. Block i of the segment (its tokens [iB, (i+1)B)) is kept from slot 0 of a block of
// its own under the key chained from block i-1's (from the content key for the first) by
// BlockCache::ChainKey, which mixes in the model's fingerprint. So segments share the block
// cache's RAM budget, LRU eviction (a segment's last blocks go first, as a chain's), disk tier and
// remote tier with prefixes and modules; a segment is a hit only when every block of it is found.
//
// Positions. The blocks keep the positions the segment was encoded at, consecutive (in its first
// request, or after the preamble); a hit is laid in at its place in a prompt by rotating its keys
// by the difference, as modules are (KvSpan::shift, model/kv_shift.h). A copy found with blocks
// of two encodings (one evicted and stored again from another request) is a miss, and is replaced
// whole when stored again.
//
// Not thread-safe: the engine thread drives it (Present only reads, for LookupCache's task).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/block_cache.h"
#include "model/model.h"
#include "promptcache/engine.h"

namespace promptcache {

class SegmentStore {
 public:
  SegmentStore(const Model& model, BlockCache* cache, ThreadPool* pool, SegmentEncoding encoding);

  SegmentEncoding encoding() const { return encoding_; }
  // What kAlone encodes a segment after, at positions 0.. (empty for kInContext): the
  // vocabulary's BOS token, else its EOS, else nothing.
  const std::vector<int32_t>& preamble() const { return preamble_; }

  // The keys of the segment's blocks, in order; `ns`: the namespace's root key (empty: the
  // default namespace).
  std::vector<BlockKey> Keys(std::span<const int32_t> tokens, const BlockKey& ns) const;

  struct Lookup {
    bool found = false;
    // Some blocks were there but not a usable whole (some missing, or of another encoding):
    // Store must replace them.
    bool partial = false;
    int32_t start = 0;  // found: the position its first token was encoded at
  };
  // Appends the cached segment's K/V to `out` (empty) by reference, loading blocks from the disk
  // tier as needed (not the remote tier: the engine reads those beforehand, off its thread, into
  // RAM). Not found: `out` is left empty.
  Lookup Find(std::span<const int32_t> tokens, const BlockKey& ns, KvSequence* out);
  // Whether every block of the segment is in RAM or on disk (nothing is loaded).
  bool Present(std::span<const int32_t> tokens, const BlockKey& ns) const;

  // Stores slots [begin, begin + tokens.size()) of `seq` (which hold `tokens`) as the segment,
  // copied into fresh blocks; with `replace`, what is cached under its keys goes first.
  Status Store(std::span<const int32_t> tokens, const BlockKey& ns, const KvSequence& seq,
               int begin, bool replace);

 private:
  const Model& model_;
  BlockCache* cache_;
  ThreadPool* pool_;
  SegmentEncoding encoding_;
  std::vector<int32_t> preamble_;
};

}  // namespace promptcache
