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
// Attention reads "whatever the sequence holds", in span order: the cache imposes no rule that
// positions be contiguous or increasing, which the modular prompt cache relies on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace promptcache {

enum class KvType { kF16, kF32 };

struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  KvType type = KvType::kF16;
  int block_size = 16;

  int kv_dim() const { return n_kv_heads * head_dim; }
  size_t elem_bytes() const { return type == KvType::kF16 ? 2 : 4; }
  // K and V of one token in every layer.
  size_t bytes_per_token() const { return 2 * size_t(n_layers) * kv_dim() * elem_bytes(); }
  size_t bytes_per_block() const { return bytes_per_token() * block_size; }
};

using BlockId = int32_t;

// Fixed-size blocks with reference counts. Static mode preallocates `max_blocks` up front (as a
// StaticCache does); dynamic mode allocates in chunks as sequences grow, up to `max_blocks`
// (0 = no limit). Not thread-safe: one engine thread owns it.
class BlockPool {
 public:
  BlockPool(const KvLayout& layout, int64_t max_blocks, bool preallocate);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const KvLayout& layout() const { return layout_; }

  // A fresh block with reference count 1, or ResourceExhausted when the pool is full.
  Result<BlockId> Allocate();
  void Ref(BlockId id);
  void Unref(BlockId id);  // frees the block when the count reaches zero
  int RefCount(BlockId id) const;

  // Slot-major rows of kv_dim elements (F16 or F32) for one layer of one block.
  uint8_t* K(BlockId id, int layer);
  uint8_t* V(BlockId id, int layer);
  const uint8_t* K(BlockId id, int layer) const;
  const uint8_t* V(BlockId id, int layer) const;
  int32_t* Positions(BlockId id);
  const int32_t* Positions(BlockId id) const;

  int64_t blocks_in_use() const { return in_use_; }
  int64_t blocks_allocated() const { return static_cast<int64_t>(refcount_.size()); }
  size_t bytes_in_use() const { return size_t(in_use_) * layout_.bytes_per_block(); }
  size_t bytes_reserved() const { return chunks_.size() * kChunkBlocks * layout_.bytes_per_block(); }
  int64_t max_blocks() const { return max_blocks_; }

 private:
  static constexpr int64_t kChunkBlocks = 64;
  Status Grow();
  uint8_t* BlockBase(BlockId id) const;

  KvLayout layout_;
  int64_t max_blocks_;
  std::vector<std::unique_ptr<uint8_t[], void (*)(uint8_t*)>> chunks_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> positions_;
  std::vector<BlockId> free_;
  int64_t in_use_ = 0;
};

// One run of consecutive slots [begin, begin + count) inside one block.
struct KvSpan {
  BlockId block;
  int begin;
  int count;
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
  // A new sequence sharing every slot of this one.
  KvSequence Fork() const;
  // Appends tokens [begin, end) of `src` (same pool) by reference, with their positions.
  void AppendSegment(const KvSequence& src, int begin, int end);
  // Appends slots [begin, begin + count) of a block by reference (a cached block).
  void AppendBlock(BlockId block, int begin, int count);

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
};

}  // namespace promptcache
