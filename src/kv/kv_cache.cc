#include "kv/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/enum_names.h"

#if defined(__SANITIZE_ADDRESS__)
#define PC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PC_ASAN 1
#endif
#endif
#ifdef PC_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace promptcache {
namespace {

void FreeAligned(uint8_t* p) { std::free(p); }

uint8_t* AllocAligned(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes >= 4 * kHuge) {
    // Chunks of many blocks: on 2 MiB pages where the kernel has them (THP "madvise" mode), so
    // filling a chunk (a long prefix computed, or loaded from a cache tier) takes a few page
    // faults instead of thousands (measured: loading 3,300 tokens of smollm2-135m from Redis).
    const size_t n = (bytes + kHuge - 1) / kHuge * kHuge;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHuge, n));
    if (p != nullptr) ::madvise(p, n, MADV_HUGEPAGE);
    return p;
  }
  return static_cast<uint8_t*>(
      std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64)));
}

// A freed sliding part is poisoned under AddressSanitizer: a read through a pointer taken before
// it was released (which the attention kernel must never do) is reported, not silently served
// another block's data.
void SetPoisoned(const uint8_t* p, size_t n, bool poisoned) {
#ifdef PC_ASAN
  if (poisoned) {
    ASAN_POISON_MEMORY_REGION(p, n);
  } else {
    ASAN_UNPOISON_MEMORY_REGION(p, n);
  }
#else
  (void)p, (void)n, (void)poisoned;
#endif
}

}  // namespace

constexpr EnumName<KvType> kKvTypeNames[] = {
    {KvType::kF16, "f16"}, {KvType::kF32, "f32"}, {KvType::kQ8_0, "q8_0"}, {KvType::kQ4_0, "q4_0"}};
static_assert(NamesEach(kKvTypeNames, KvType::kF16, KvType::kQ4_0));

Result<KvType> ParseKvType(std::string_view name) {
  if (std::optional<KvType> type = ValueOf(kKvTypeNames, name)) return *type;
  return InvalidArgument("--kv-type must be f16, f32, q8_0 or q4_0, not '" + std::string(name) +
                         "'");
}

const char* KvTypeName(KvType type) { return NameOf(kKvTypeNames, type, "?"); }

Status CheckKvType(KvType type, int kv_dim) {
  if (KvTypeQuantized(type) && kv_dim % 32 != 0) {
    return InvalidArgument(std::string("--kv-type ") + KvTypeName(type) +
                           " stores K/V rows in blocks of 32 values; this model's rows (KV heads "
                           "x head size) have " +
                           std::to_string(kv_dim) + " (use f16 or f32)");
  }
  return Status::Ok();
}

namespace {

// Bytes of 32 values in a quantized type.
size_t BlockBytes(KvType t) { return t == KvType::kQ8_0 ? 34 : 18; }

}  // namespace

size_t KvLayout::row_bytes() const {
  switch (type) {
    case KvType::kF16:
      return size_t(kv_dim()) * 2;
    case KvType::kF32:
      return size_t(kv_dim()) * 4;
    case KvType::kQ8_0:
    case KvType::kQ4_0:
      return size_t(kv_dim()) / 32 * BlockBytes(type);
  }
  return 0;
}

size_t KvLayout::head_offset(int h) const {
  const size_t first = size_t(h) * head_dim;  // the head's first value in the row
  if (KvTypeQuantized(type)) return first / 32 * BlockBytes(type);
  return first * (type == KvType::kF16 ? 2 : 4);
}

int KvLayout::head_column(int h) const { return KvTypeQuantized(type) ? (h * head_dim) % 32 : 0; }

int KvLayout::n_sliding() const {
  if (sliding_window <= 0) return 0;
  return static_cast<int>(
      std::count_if(layer_sliding.begin(), layer_sliding.end(), [](uint8_t s) { return s != 0; }));
}

BlockPool::BlockPool(const KvLayout& layout, int64_t max_blocks, bool preallocate)
    : layout_(layout),
      has_sliding_(layout.has_sliding()),
      max_blocks_(max_blocks),
      zero_row_(nullptr, &FreeAligned) {
  PC_CHECK(layout.n_layers > 0 && layout.kv_dim() > 0 && layout.block_size > 0);
  PC_CHECK(layout.layer_sliding.empty() ||
           static_cast<int>(layout.layer_sliding.size()) == layout.n_layers);
  PC_CHECK(!preallocate || max_blocks > 0);
  PC_CHECK(CheckKvType(layout.type, layout.kv_dim()).ok());
  int n_global = 0, n_sliding = 0;
  for (int l = 0; l < layout.n_layers; ++l) {
    layer_index_.push_back(layout.Sliding(l) ? n_sliding++ : n_global++);
  }
  const size_t row = layout.row_bytes();
  zero_row_.reset(AllocAligned(row));
  PC_CHECK(zero_row_ != nullptr);
  std::memset(zero_row_.get(), 0, row);
  if (preallocate) {
    while (blocks_allocated() < max_blocks_) PC_CHECK(Grow().ok());
    while (has_sliding_ && int64_t(sliding_chunks_.size()) * kChunkBlocks < max_blocks_) {
      PC_CHECK(GrowSliding().ok());
    }
  }
}

BlockPool::~BlockPool() = default;

Status BlockPool::Grow() {
  const size_t bytes = kChunkBlocks * layout_.global_bytes_per_block();
  // Every layer may slide (Mistral): the blocks then have no global part, only positions.
  if (bytes > 0) {
    uint8_t* mem = AllocAligned(bytes);
    if (mem == nullptr) return ResourceExhausted("out of memory growing the KV cache");
    chunks_.emplace_back(mem, &FreeAligned);
  } else {
    chunks_.emplace_back(nullptr, &FreeAligned);
  }
  const BlockId first = static_cast<BlockId>(refcount_.size());
  refcount_.resize(refcount_.size() + kChunkBlocks, 0);
  sliding_refs_.resize(refcount_.size(), 0);
  sliding_part_.resize(refcount_.size(), -1);
  positions_.resize(refcount_.size() * layout_.block_size, 0);
  // Hand out low ids first: pop_back takes from the end.
  for (BlockId id = first + kChunkBlocks - 1; id >= first; --id) free_.push_back(id);
  return Status::Ok();
}

Status BlockPool::Prefault(int64_t blocks) {
  if (max_blocks_ > 0) blocks = std::min(blocks, max_blocks_);
  const size_t first_chunk = chunks_.size(), first_sliding = sliding_chunks_.size();
  while (blocks_allocated() < blocks) PC_RETURN_IF_ERROR(Grow());
  while (has_sliding_ && int64_t(sliding_chunks_.size()) * kChunkBlocks < blocks) {
    PC_RETURN_IF_ERROR(GrowSliding());
  }
  constexpr size_t kPage = 4096;
  auto touch = [](uint8_t* p, size_t n) {
    SetPoisoned(p, n, /*poisoned=*/false);
    for (size_t i = 0; i < n; i += kPage) p[i] = 0;
  };
  for (size_t c = first_chunk; c < chunks_.size(); ++c) {
    if (chunks_[c]) touch(chunks_[c].get(), kChunkBlocks * layout_.global_bytes_per_block());
  }
  for (size_t c = first_sliding; c < sliding_chunks_.size(); ++c) {
    const size_t n = kChunkBlocks * layout_.sliding_bytes_per_block();
    touch(sliding_chunks_[c].get(), n);
    SetPoisoned(sliding_chunks_[c].get(), n, /*poisoned=*/true);
  }
  return Status::Ok();
}

Status BlockPool::GrowSliding() {
  const size_t part = layout_.sliding_bytes_per_block();
  uint8_t* mem = AllocAligned(kChunkBlocks * part);
  if (mem == nullptr) return ResourceExhausted("out of memory growing the KV cache");
  SetPoisoned(mem, kChunkBlocks * part, /*poisoned=*/true);
  const int32_t first = static_cast<int32_t>(sliding_chunks_.size() * kChunkBlocks);
  sliding_chunks_.emplace_back(mem, &FreeAligned);
  for (int32_t p = first + kChunkBlocks - 1; p >= first; --p) sliding_free_.push_back(p);
  return Status::Ok();
}

Result<int32_t> BlockPool::TakeSlidingPart() {
  if (sliding_free_.empty()) PC_RETURN_IF_ERROR(GrowSliding());
  const int32_t part = sliding_free_.back();
  sliding_free_.pop_back();
  const size_t bytes = layout_.sliding_bytes_per_block();
  SetPoisoned(sliding_chunks_[part / kChunkBlocks].get() + (part % kChunkBlocks) * bytes, bytes,
              /*poisoned=*/false);
  ++sliding_in_use_;
  return part;
}

void BlockPool::FreeSlidingPart(BlockId id) {
  const int32_t part = sliding_part_[id];
  const size_t bytes = layout_.sliding_bytes_per_block();
  SetPoisoned(sliding_chunks_[part / kChunkBlocks].get() + (part % kChunkBlocks) * bytes, bytes,
              /*poisoned=*/true);
  sliding_free_.push_back(part);
  sliding_part_[id] = -1;
  --sliding_in_use_;
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
  if (has_sliding_) {
    PC_ASSIGN_OR_RETURN(sliding_part_[id], TakeSlidingPart());
    sliding_refs_[id] = 1;
  }
  free_.pop_back();
  refcount_[id] = 1;
  ++in_use_;
  NotePeak();
  return id;
}

void BlockPool::Ref(BlockId id, bool sliding) {
  PC_CHECK(id >= 0 && id < blocks_allocated() && refcount_[id] > 0);
  ++refcount_[id];
  if (sliding && has_sliding_) {
    PC_CHECK(sliding_refs_[id] > 0);  // a global-only block has no sliding part to share
    ++sliding_refs_[id];
  }
}

void BlockPool::Unref(BlockId id, bool sliding) {
  PC_CHECK(id >= 0 && id < blocks_allocated() && refcount_[id] > 0);
  if (sliding) ReleaseSliding(id);
  if (--refcount_[id] == 0) {
    PC_CHECK(sliding_refs_[id] == 0);  // every full reference is also a reference
    free_.push_back(id);
    --in_use_;
  }
}

void BlockPool::ReleaseSliding(BlockId id) {
  if (!has_sliding_) return;
  PC_CHECK(id >= 0 && id < blocks_allocated() && sliding_refs_[id] > 0);
  if (--sliding_refs_[id] == 0) FreeSlidingPart(id);
}

void BlockPool::AcquireSliding(BlockId id) {
  PC_CHECK(id >= 0 && id < blocks_allocated() && refcount_[id] > sliding_refs_[id]);
  if (!has_sliding_) return;
  PC_CHECK(sliding_refs_[id] > 0);
  ++sliding_refs_[id];
}

Status BlockPool::RestoreSliding(BlockId id) {
  PC_CHECK(id >= 0 && id < blocks_allocated() && refcount_[id] > 0);
  PC_CHECK(has_sliding_ && sliding_part_[id] < 0);
  PC_ASSIGN_OR_RETURN(sliding_part_[id], TakeSlidingPart());
  sliding_refs_[id] = 1;
  NotePeak();
  return Status::Ok();
}

int BlockPool::RefCount(BlockId id) const {
  PC_CHECK(id >= 0 && id < blocks_allocated());
  return refcount_[id];
}

int BlockPool::SlidingRefCount(BlockId id) const {
  PC_CHECK(id >= 0 && id < blocks_allocated());
  return has_sliding_ ? sliding_refs_[id] : refcount_[id];
}

// Within a part: for each of its layers, K rows of all slots, then V rows of all slots.
uint8_t* BlockPool::Plane(BlockId id, int layer) const {
  PC_DCHECK(id >= 0 && id < blocks_allocated() && layer >= 0 && layer < layout_.n_layers);
  const size_t plane = layout_.plane_bytes();
  const size_t at = 2 * plane * layer_index_[layer];
  if (layout_.Sliding(layer)) {
    const int32_t part = sliding_part_[id];
    PC_CHECK(part >= 0);  // a sliding layer of a global-only block: nothing to read or write
    return sliding_chunks_[part / kChunkBlocks].get() +
           (part % kChunkBlocks) * layout_.sliding_bytes_per_block() + at;
  }
  return chunks_[id / kChunkBlocks].get() + (id % kChunkBlocks) * layout_.global_bytes_per_block() +
         at;
}

uint8_t* BlockPool::K(BlockId id, int layer) { return Plane(id, layer); }
uint8_t* BlockPool::V(BlockId id, int layer) { return Plane(id, layer) + layout_.plane_bytes(); }
const uint8_t* BlockPool::K(BlockId id, int layer) const { return Plane(id, layer); }
const uint8_t* BlockPool::V(BlockId id, int layer) const {
  return Plane(id, layer) + layout_.plane_bytes();
}
int32_t* BlockPool::Positions(BlockId id) { return &positions_[size_t(id) * layout_.block_size]; }
const int32_t* BlockPool::Positions(BlockId id) const {
  return &positions_[size_t(id) * layout_.block_size];
}

KvSequence::~KvSequence() { Release(); }

KvSequence::KvSequence(KvSequence&& other) noexcept
    : pool_(other.pool_),
      spans_(std::move(other.spans_)),
      n_tokens_(other.n_tokens_),
      dead_spans_(other.dead_spans_),
      dead_tokens_(other.dead_tokens_),
      released_spans_(other.released_spans_),
      released_tokens_(other.released_tokens_) {
  other.spans_.clear();
  other.n_tokens_ = other.dead_spans_ = other.dead_tokens_ = 0;
  other.released_spans_ = other.released_tokens_ = 0;
}

KvSequence& KvSequence::operator=(KvSequence&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    spans_ = std::move(other.spans_);
    n_tokens_ = other.n_tokens_;
    dead_spans_ = other.dead_spans_;
    dead_tokens_ = other.dead_tokens_;
    released_spans_ = other.released_spans_;
    released_tokens_ = other.released_tokens_;
    other.spans_.clear();
    other.n_tokens_ = other.dead_spans_ = other.dead_tokens_ = 0;
    other.released_spans_ = other.released_tokens_ = 0;
  }
  return *this;
}

void KvSequence::Release() {
  for (const KvSpan& s : spans_) pool_->Unref(s.block, s.sliding);
  spans_.clear();
  n_tokens_ = dead_spans_ = dead_tokens_ = released_spans_ = released_tokens_ = 0;
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
    // Write in place only into a block this sequence owns alone (sliding part included), right
    // after its own slots.
    bool extend = false;
    if (!spans_.empty()) {
      const KvSpan& last = spans_.back();
      extend = last.begin + last.count < bs && pool_->RefCount(last.block) == 1 && last.sliding &&
               pool_->Complete(last.block) && last.shift == 0;
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
      spans_.push_back({*id, 0, 0, true});
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
  for (size_t j = i; j < spans_.size(); ++j) pool_->Unref(spans_[j].block, spans_[j].sliding);
  spans_.resize(i);
  n_tokens_ = n;
  // The cursors past the cut go back to the spans kept (a span cut short counts its rest).
  auto clamp = [&](int* spans, int* tokens) {
    if (*tokens <= n_tokens_ && *spans <= static_cast<int>(spans_.size())) return;
    *spans = std::min(*spans, static_cast<int>(spans_.size()));
    *tokens = 0;
    for (int j = 0; j < *spans; ++j) *tokens += spans_[j].count;
  };
  clamp(&dead_spans_, &dead_tokens_);
  clamp(&released_spans_, &released_tokens_);
}

KvSequence KvSequence::Fork() const {
  KvSequence copy(pool_);
  copy.AppendSegment(*this, 0, n_tokens_);
  return copy;
}

void KvSequence::AppendSegment(const KvSequence& src, int begin, int end, int32_t shift) {
  PC_CHECK(src.pool_ == pool_);
  PC_CHECK(0 <= begin && begin <= end && end <= src.n_tokens_);
  PC_CHECK(&src != this);
  int offset = 0;
  for (const KvSpan& s : src.spans_) {
    const int lo = std::max(begin, offset), hi = std::min(end, offset + s.count);
    if (lo < hi) {
      pool_->Ref(s.block, s.sliding);
      spans_.push_back({s.block, s.begin + (lo - offset), hi - lo, s.sliding, s.shift + shift});
      n_tokens_ += hi - lo;
    }
    offset += s.count;
    if (offset >= end) break;
  }
}

bool KvSequence::HasShifts() const {
  return std::any_of(spans_.begin(), spans_.end(), [](const KvSpan& s) { return s.shift != 0; });
}

void KvSequence::AppendBlock(BlockId block, int begin, int count, bool sliding) {
  PC_CHECK(begin >= 0 && count > 0 && begin + count <= pool_->layout().block_size);
  pool_->Ref(block, sliding);
  spans_.push_back({block, begin, count, sliding});
  n_tokens_ += count;
}

int KvSequence::SlidingDeadTokens(int32_t next) const {
  const KvLayout& l = pool_->layout();
  if (!l.has_sliding()) return 0;
  const int64_t last_dead = int64_t(next) - l.sliding_window;  // keys at or below it: unseen
  while (dead_spans_ + 1 < static_cast<int>(spans_.size())) {
    const KvSpan& s = spans_[dead_spans_];
    const int32_t* p = pool_->Positions(s.block) + s.begin;
    if (int64_t(*std::max_element(p, p + s.count)) + s.shift > last_dead) break;
    dead_tokens_ += s.count;
    ++dead_spans_;
  }
  return dead_tokens_;
}

void KvSequence::ReleaseSliding(int n) {
  if (!pool_->layout().has_sliding()) return;
  while (released_spans_ < static_cast<int>(spans_.size()) &&
         released_tokens_ + spans_[released_spans_].count <= n) {
    KvSpan& s = spans_[released_spans_++];
    released_tokens_ += s.count;
    if (s.sliding) {
      pool_->ReleaseSliding(s.block);
      s.sliding = false;
    }
  }
}

KvSpan KvSequence::Locate(int i) const {
  PC_CHECK(i >= 0 && i < n_tokens_);
  for (const KvSpan& s : spans_) {
    if (i < s.count) return {s.block, s.begin + i, 1, s.sliding, s.shift};
    i -= s.count;
  }
  PC_CHECK(false);
  return {};
}

int32_t KvSequence::Position(int i) const {
  const KvSpan s = Locate(i);
  return pool_->Positions(s.block)[s.begin] + s.shift;
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
  return pool_->K(s.block, layer) + size_t(s.begin) * l.row_bytes();
}

uint8_t* KvSequence::SlotV(int i, int layer) {
  const KvSpan s = Locate(i);
  const KvLayout& l = pool_->layout();
  return pool_->V(s.block, layer) + size_t(s.begin) * l.row_bytes();
}

}  // namespace promptcache
