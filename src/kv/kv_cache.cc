#include "kv/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace promptcache {
namespace {
void FreeAligned(uint8_t* p) { std::free(p); }
}  // namespace

BlockPool::BlockPool(const KvLayout& layout, int64_t max_blocks, bool preallocate)
    : layout_(layout), max_blocks_(max_blocks) {
  PC_CHECK(layout.n_layers > 0 && layout.kv_dim() > 0 && layout.block_size > 0);
  PC_CHECK(!preallocate || max_blocks > 0);
  if (preallocate) {
    while (blocks_allocated() < max_blocks_) PC_CHECK(Grow().ok());
  }
}

BlockPool::~BlockPool() = default;

Status BlockPool::Grow() {
  const size_t bytes = kChunkBlocks * layout_.bytes_per_block();
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (mem == nullptr) return ResourceExhausted("out of memory growing the KV cache");
  chunks_.emplace_back(mem, &FreeAligned);
  const BlockId first = static_cast<BlockId>(refcount_.size());
  refcount_.resize(refcount_.size() + kChunkBlocks, 0);
  positions_.resize(refcount_.size() * layout_.block_size, 0);
  // Hand out low ids first: pop_back takes from the end.
  for (BlockId id = first + kChunkBlocks - 1; id >= first; --id) free_.push_back(id);
  return Status::Ok();
}

Result<BlockId> BlockPool::Allocate() {
  if (free_.empty()) {
    if (max_blocks_ > 0 && in_use_ >= max_blocks_) {
      return ResourceExhausted("KV cache full (" + std::to_string(max_blocks_) + " blocks of " +
                               std::to_string(layout_.block_size) + " tokens)");
    }
    PC_RETURN_IF_ERROR(Grow());
  }
  const BlockId id = free_.back();
  free_.pop_back();
  refcount_[id] = 1;
  ++in_use_;
  return id;
}

void BlockPool::Ref(BlockId id) {
  PC_CHECK(id >= 0 && id < blocks_allocated() && refcount_[id] > 0);
  ++refcount_[id];
}

void BlockPool::Unref(BlockId id) {
  PC_CHECK(id >= 0 && id < blocks_allocated() && refcount_[id] > 0);
  if (--refcount_[id] == 0) {
    free_.push_back(id);
    --in_use_;
  }
}

int BlockPool::RefCount(BlockId id) const {
  PC_CHECK(id >= 0 && id < blocks_allocated());
  return refcount_[id];
}

uint8_t* BlockPool::BlockBase(BlockId id) const {
  PC_DCHECK(id >= 0 && id < blocks_allocated());
  return chunks_[id / kChunkBlocks].get() + (id % kChunkBlocks) * layout_.bytes_per_block();
}

// Within a block: for each layer, K rows of all slots, then V rows of all slots.
uint8_t* BlockPool::K(BlockId id, int layer) {
  const size_t plane = size_t(layout_.block_size) * layout_.kv_dim() * layout_.elem_bytes();
  return BlockBase(id) + 2 * plane * layer;
}
uint8_t* BlockPool::V(BlockId id, int layer) {
  const size_t plane = size_t(layout_.block_size) * layout_.kv_dim() * layout_.elem_bytes();
  return BlockBase(id) + 2 * plane * layer + plane;
}
const uint8_t* BlockPool::K(BlockId id, int layer) const {
  return const_cast<BlockPool*>(this)->K(id, layer);
}
const uint8_t* BlockPool::V(BlockId id, int layer) const {
  return const_cast<BlockPool*>(this)->V(id, layer);
}
int32_t* BlockPool::Positions(BlockId id) { return &positions_[size_t(id) * layout_.block_size]; }
const int32_t* BlockPool::Positions(BlockId id) const {
  return &positions_[size_t(id) * layout_.block_size];
}

KvSequence::~KvSequence() { Release(); }

KvSequence::KvSequence(KvSequence&& other) noexcept
    : pool_(other.pool_), spans_(std::move(other.spans_)), n_tokens_(other.n_tokens_) {
  other.spans_.clear();
  other.n_tokens_ = 0;
}

KvSequence& KvSequence::operator=(KvSequence&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    spans_ = std::move(other.spans_);
    n_tokens_ = other.n_tokens_;
    other.spans_.clear();
    other.n_tokens_ = 0;
  }
  return *this;
}

void KvSequence::Release() {
  for (const KvSpan& s : spans_) pool_->Unref(s.block);
  spans_.clear();
  n_tokens_ = 0;
}

KvShape KvSequence::shape() const {
  const KvLayout& l = pool_->layout();
  return {l.n_layers, n_tokens_, l.n_kv_heads, l.head_dim};
}

Status KvSequence::Append(std::span<const int32_t> positions) {
  const int bs = pool_->layout().block_size;
  size_t done = 0;
  std::vector<BlockId> fresh;  // allocated here, released again if the pool runs out
  const size_t spans_before = spans_.size();
  const int last_count_before = spans_.empty() ? 0 : spans_.back().count;
  while (done < positions.size()) {
    // Write in place only into a block this sequence owns alone, right after its own slots.
    bool extend = false;
    if (!spans_.empty()) {
      const KvSpan& last = spans_.back();
      extend = last.begin + last.count < bs && pool_->RefCount(last.block) == 1;
    }
    if (!extend) {
      Result<BlockId> id = pool_->Allocate();
      if (!id.ok()) {
        for (BlockId b : fresh) pool_->Unref(b);
        spans_.resize(spans_before);
        if (!spans_.empty()) spans_.back().count = last_count_before;
        return id.status();
      }
      fresh.push_back(*id);
      spans_.push_back({*id, 0, 0});
    }
    KvSpan& last = spans_.back();
    const int n = std::min<int>(bs - (last.begin + last.count), positions.size() - done);
    std::memcpy(pool_->Positions(last.block) + last.begin + last.count, positions.data() + done,
                n * sizeof(int32_t));
    last.count += n;
    done += n;
  }
  n_tokens_ += static_cast<int>(positions.size());
  return Status::Ok();
}

void KvSequence::Truncate(int n) {
  PC_CHECK(n >= 0);
  if (n >= n_tokens_) return;
  int kept = 0;
  size_t i = 0;
  for (; i < spans_.size() && kept + spans_[i].count <= n; ++i) kept += spans_[i].count;
  if (i < spans_.size() && kept < n) {
    spans_[i].count = n - kept;
    ++i;
  }
  for (size_t j = i; j < spans_.size(); ++j) pool_->Unref(spans_[j].block);
  spans_.resize(i);
  n_tokens_ = n;
}

KvSequence KvSequence::Fork() const {
  KvSequence copy(pool_);
  copy.AppendSegment(*this, 0, n_tokens_);
  return copy;
}

void KvSequence::AppendSegment(const KvSequence& src, int begin, int end) {
  PC_CHECK(src.pool_ == pool_);
  PC_CHECK(0 <= begin && begin <= end && end <= src.n_tokens_);
  PC_CHECK(&src != this);
  int offset = 0;
  for (const KvSpan& s : src.spans_) {
    const int lo = std::max(begin, offset), hi = std::min(end, offset + s.count);
    if (lo < hi) {
      pool_->Ref(s.block);
      spans_.push_back({s.block, s.begin + (lo - offset), hi - lo});
      n_tokens_ += hi - lo;
    }
    offset += s.count;
    if (offset >= end) break;
  }
}

void KvSequence::AppendBlock(BlockId block, int begin, int count) {
  PC_CHECK(begin >= 0 && count > 0 && begin + count <= pool_->layout().block_size);
  pool_->Ref(block);
  spans_.push_back({block, begin, count});
  n_tokens_ += count;
}

KvSpan KvSequence::Locate(int i) const {
  PC_CHECK(i >= 0 && i < n_tokens_);
  for (const KvSpan& s : spans_) {
    if (i < s.count) return {s.block, s.begin + i, 1};
    i -= s.count;
  }
  PC_CHECK(false);
  return {};
}

int32_t KvSequence::Position(int i) const {
  const KvSpan s = Locate(i);
  return pool_->Positions(s.block)[s.begin];
}

const uint8_t* KvSequence::SlotK(int i, int layer) const {
  return const_cast<KvSequence*>(this)->SlotK(i, layer);
}

const uint8_t* KvSequence::SlotV(int i, int layer) const {
  return const_cast<KvSequence*>(this)->SlotV(i, layer);
}

uint8_t* KvSequence::SlotK(int i, int layer) {
  const KvSpan s = Locate(i);
  const KvLayout& l = pool_->layout();
  return pool_->K(s.block, layer) + size_t(s.begin) * l.kv_dim() * l.elem_bytes();
}

uint8_t* KvSequence::SlotV(int i, int layer) {
  const KvSpan s = Locate(i);
  const KvLayout& l = pool_->layout();
  return pool_->V(s.block, layer) + size_t(s.begin) * l.kv_dim() * l.elem_bytes();
}

}  // namespace promptcache
