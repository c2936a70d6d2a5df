// The KV cache: the keys (after RoPE) and values every layer computed for each token a sequence
// has seen, with each token's position.
//
// Storage is a pool of fixed-size blocks (BlockPool), each holding `block_size` token slots for
// all layers, reference-counted as in paged KV caches. A KvSequence is an ordered list of spans,
// each a run of slots inside one block. A span may cover part of a block and blocks may be
// shared: forking a sequence, taking a segment out of another sequence, or gathering cached
// prompt modules only adds references, never copies K/V. Slots a sequence shares are immutable;
// new tokens always go to a block the sequence owns alone.
//
// Sliding-window layers (Gemma, Mistral): a query at position p reads those layers' keys only
// at positions > p - W, so a long sequence need not keep them all. A block's sliding layers live
// in a separately allocated "sliding part" with its own count of holders; its global layers and
// its positions stay with the block. Every reference to a block either holds its sliding part
// too (a full reference) or not (a global reference); the part goes back to the pool when no
// full reference is left, and the block is then "global-only". A sequence that will only be
// queried at positions >= p gives up its hold on the sliding part of every span whose positions
// are all <= p - W (ReleaseSliding), and attention reads such rows as zeros, masked anyway
// (model/attention.cc). Layouts without sliding layers have no sliding parts at all.
//
// Attention reads "whatever the sequence holds", in span order: the cache imposes no rule that
// positions be contiguous or increasing, which the modular prompt cache relies on.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "promptcache/types.h"  // KvType

namespace promptcache {

// KvType (promptcache/types.h): the quantized types store ggml blocks (ops/quant.h).
inline bool KvTypeQuantized(KvType t) { return t == KvType::kQ8_0 || t == KvType::kQ4_0; }
// "f16", "f32", "q8_0" or "q4_0" (as --kv-type spells them); InvalidArgument naming the choices
// otherwise.
Result<KvType> ParseKvType(std::string_view name);
// The same names, as remote keys and reports carry them.
const char* KvTypeName(KvType type);
// Whether K/V rows of kv_dim values (KV heads x head size) can be stored in the type: an
// InvalidArgument saying why not.
Status CheckKvType(KvType type, int kv_dim);

struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  KvType type = KvType::kF16;
  int block_size = 16;
  // Layers whose keys only a sliding window of `sliding_window` positions reads ([n_layers],
  // 1 where the layer slides); empty or a window of 0: none.
  std::vector<uint8_t> layer_sliding;
  int sliding_window = 0;

  int kv_dim() const { return n_kv_heads * head_dim; }
  // All of a token's KV heads of one layer (its K, or its V).
  size_t row_bytes() const;
  // Where KV head h's values start in a row: a byte offset, and for the quantized types the
  // value within the block there (0 when head_dim is a multiple of 32).
  size_t head_offset(int h) const;
  int head_column(int h) const;
  bool Sliding(int layer) const {
    return sliding_window > 0 && !layer_sliding.empty() && layer_sliding[layer] != 0;
  }
  int n_sliding() const;
  bool has_sliding() const { return n_sliding() > 0; }
  // K and V of one token in every layer.
  size_t bytes_per_token() const { return 2 * size_t(n_layers) * row_bytes(); }
  size_t bytes_per_block() const { return bytes_per_token() * block_size; }
  // One layer's K (or V) rows of a block.
  size_t plane_bytes() const { return size_t(block_size) * row_bytes(); }
  // A block's global layers, and its sliding part (0 without sliding layers).
  size_t global_bytes_per_block() const {
    return 2 * size_t(n_layers - n_sliding()) * plane_bytes();
  }
  size_t sliding_bytes_per_block() const { return 2 * size_t(n_sliding()) * plane_bytes(); }
  // What a reference holds: the global part, and the sliding part with `sliding`.
  size_t block_bytes(bool sliding) const {
    return global_bytes_per_block() + (sliding ? sliding_bytes_per_block() : 0);
  }
};

using BlockId = int32_t;

// Fixed-size blocks with reference counts. Static mode preallocates `max_blocks` up front (as a
// StaticCache does); dynamic mode allocates in chunks as sequences grow, up to `max_blocks`
// (0 = no limit). Sliding parts come from chunks of their own (one per block at most), so the
// memory of released ones serves other blocks. Not thread-safe: one engine thread owns it.
class BlockPool {
 public:
  BlockPool(const KvLayout& layout, int64_t max_blocks, bool preallocate);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const KvLayout& layout() const { return layout_; }

  // A fresh, complete block with one full reference, or ResourceExhausted when the pool is full.
  Result<BlockId> Allocate();
  // A full reference (`sliding`: the block must be complete) or a global one. Without sliding
  // layers the two are the same.
  void Ref(BlockId id, bool sliding = true);
  // Drops a reference of the kind taken; frees the block when none is left.
  void Unref(BlockId id, bool sliding = true);
  // Turns a full reference into a global one; the sliding part is freed when it was the last.
  void ReleaseSliding(BlockId id);
  // Turns one of the caller's global references to a complete block into a full one.
  void AcquireSliding(BlockId id);
  // The same for a global-only block, which gets a fresh sliding part (for the caller to fill:
  // its sliding layers reloaded from disk).
  Status RestoreSliding(BlockId id);
  int RefCount(BlockId id) const;
  // Full references to the block (RefCount() without sliding layers).
  int SlidingRefCount(BlockId id) const;
  // Whether the block holds every layer: false once its sliding part is gone.
  bool Complete(BlockId id) const { return !has_sliding_ || sliding_part_[id] >= 0; }

  // Slot-major rows of row_bytes() (every KV head's row, in the layout's type) for one layer of
  // one block. A sliding layer of a global-only block has none (checked).
  uint8_t* K(BlockId id, int layer);
  uint8_t* V(BlockId id, int layer);
  const uint8_t* K(BlockId id, int layer) const;
  const uint8_t* V(BlockId id, int layer) const;
  int32_t* Positions(BlockId id);
  const int32_t* Positions(BlockId id) const;
  // One all-zero row of kv_dim elements: what attention reads for rows a block no longer has,
  // which lie before the window of every query that reads them (their weight is 0).
  const uint8_t* ZeroRow() const { return zero_row_.get(); }

  int64_t blocks_in_use() const { return in_use_; }
  int64_t sliding_parts_in_use() const { return sliding_in_use_; }
  int64_t blocks_allocated() const { return static_cast<int64_t>(refcount_.size()); }
  // K/V bytes held: every block's global part and every sliding part still held.
  size_t bytes_in_use() const {
    return size_t(in_use_) * layout_.global_bytes_per_block() +
           size_t(sliding_in_use_) * layout_.sliding_bytes_per_block();
  }
  // The most bytes_in_use() has been since the pool was made (or the peak was reset).
  size_t peak_bytes_in_use() const { return peak_bytes_; }
  void ResetPeak() { peak_bytes_ = bytes_in_use(); }
  size_t bytes_reserved() const {
    return chunks_.size() * kChunkBlocks * layout_.global_bytes_per_block() +
           sliding_chunks_.size() * kChunkBlocks * layout_.sliding_bytes_per_block();
  }
  int64_t max_blocks() const { return max_blocks_; }
  // Grows the pool to at least `blocks` blocks (within max_blocks) and writes to every page of
  // their memory, so that filling them later (a long prefix loaded from a cache tier) does not
  // wait for the kernel to fault in and zero fresh pages. The memory is held from now on.
  Status Prefault(int64_t blocks);

 private:
  using Chunk = std::unique_ptr<uint8_t[], void (*)(uint8_t*)>;
  static constexpr int64_t kChunkBlocks = 64;
  Status Grow();
  Status GrowSliding();
  Result<int32_t> TakeSlidingPart();
  void FreeSlidingPart(BlockId id);
  uint8_t* Plane(BlockId id, int layer) const;  // the layer's K plane; V follows it
  void NotePeak() { peak_bytes_ = std::max(peak_bytes_, bytes_in_use()); }

  KvLayout layout_;
  bool has_sliding_;
  std::vector<int> layer_index_;  // each layer's index among the layers of its kind
  int64_t max_blocks_;
  std::vector<Chunk> chunks_;          // global parts
  std::vector<Chunk> sliding_chunks_;  // sliding parts
  std::vector<int32_t> refcount_;
  std::vector<int32_t> sliding_refs_;  // full references of each block
  std::vector<int32_t> sliding_part_;  // each block's sliding part; -1: none
  std::vector<int32_t> positions_;
  std::vector<BlockId> free_;
  std::vector<int32_t> sliding_free_;
  Chunk zero_row_;
  int64_t in_use_ = 0;
  int64_t sliding_in_use_ = 0;
  size_t peak_bytes_ = 0;
};

// One run of consecutive slots [begin, begin + count) inside one block, whether the sequence
// holds the block's sliding part (a full reference) or not, and how far the sequence has moved
// them: it reads their positions as the block's + shift. Their keys stay as computed, rotated
// for the block's positions; attention rotates the queries that read them by -shift instead
// (RoPE: R(p)q · R(s)k = R(p - s)q · k), so cached keys move without being copied.
struct KvSpan {
  BlockId block;
  int begin;
  int count;
  bool sliding = true;
  int32_t shift = 0;
};

struct KvShape {
  int n_layers, n_tokens, n_kv_heads, head_dim;
};

class KvSequence {
 public:
  explicit KvSequence(BlockPool* pool) : pool_(pool) {}
  ~KvSequence();
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;
  KvSequence(KvSequence&& other) noexcept;
  KvSequence& operator=(KvSequence&& other) noexcept;

  BlockPool* pool() const { return pool_; }
  int size() const { return n_tokens_; }
  const std::vector<KvSpan>& spans() const { return spans_; }
  KvShape shape() const;
  // Logical bytes: what this sequence's tokens would take unshared.
  size_t bytes() const { return size_t(n_tokens_) * pool_->layout().bytes_per_token(); }

  // Reserves slots for new tokens at the end, recording their positions. Their K/V are written
  // afterwards through SlotK/SlotV. Fails only when the pool is exhausted (nothing is changed).
  Status Append(std::span<const int32_t> positions);
  // Keeps the first n tokens.
  void Truncate(int n);
  void Clear() { Truncate(0); }
  // A new sequence sharing every slot of this one, holding the same kinds of references.
  KvSequence Fork() const;
  // Appends tokens [begin, end) of `src` (same pool) by reference, at their positions + shift
  // (keys not rotated: see KvSpan).
  void AppendSegment(const KvSequence& src, int begin, int end, int32_t shift = 0);
  // Whether some span is shifted (its keys are read through rotated queries).
  bool HasShifts() const;
  // Appends slots [begin, begin + count) of a block by reference (a cached block): a full
  // reference with `sliding` (the block must be complete), else a global one.
  void AppendBlock(BlockId block, int begin, int count, bool sliding = true);

  // Sliding windows. With no query below position `next` ever to come (the caller's promise:
  // the sequence only moves forward), the leading tokens whose spans no such query sees on a
  // sliding layer: spans all of whose positions are <= next - W, up to the first that is not,
  // never the last span (new tokens may still go there). 0 without sliding layers.
  int SlidingDeadTokens(int32_t next) const;
  // Gives up the sliding parts of the spans within the first n tokens (whole spans; n from
  // SlidingDeadTokens).
  void ReleaseSliding(int n);

  // Where token i lives. O(number of spans); use spans() to walk the whole sequence.
  KvSpan Locate(int i) const;
  int32_t Position(int i) const;
  uint8_t* SlotK(int i, int layer);
  uint8_t* SlotV(int i, int layer);
  const uint8_t* SlotK(int i, int layer) const;
  const uint8_t* SlotV(int i, int layer) const;

 private:
  void Release();

  BlockPool* pool_;
  std::vector<KvSpan> spans_;
  int n_tokens_ = 0;
  // The spans known dead on sliding layers (SlidingDeadTokens resumes after them) and their
  // tokens.
  mutable int dead_spans_ = 0;
  mutable int dead_tokens_ = 0;
  int released_spans_ = 0;  // ReleaseSliding resumes after them
  int released_tokens_ = 0;
};

}  // namespace promptcache
