// The disk tier of the KV block cache: blocks evicted from RAM (or saved explicitly) are written
// to files under DIR/<model fingerprint>/, so a restarted process finds them again.
//
// Every file is written atomically (temp file + rename) and carries a header with a format
// version, the model fingerprint, its key, the KV layout and a checksum over everything; a file
// that fails any check (another model, another layout, truncated, corrupt, another version) is
// skipped with a warning and deleted, never used. The tier is bounded in bytes, oldest first.
//
// A block whose sliding part is gone (kv/kv_cache.h) is written global-only, marked so: it loads
// as a global-only block, and its sliding layers can never be read from it. Files of format 1
// (before sliding parts) are read as complete blocks; format 3 adds the KV type to the flags
// (format 2 implies it from the element size), so a quantized type can never be read as another.
//
// The same self-checking record (EncodeBlock/DecodeBlock) is the value of the remote tier
// (kv/remote_tier.h): any replica may have written it, so every read checks it all again.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"

namespace promptcache {

// 128-bit block key, printed as 32 hex digits.
struct BlockKey {
  uint64_t hi = 0, lo = 0;
  bool operator==(const BlockKey& o) const { return hi == o.hi && lo == o.lo; }
  bool operator<(const BlockKey& o) const { return hi != o.hi ? hi < o.hi : lo < o.lo; }
  bool empty() const { return hi == 0 && lo == 0; }
  std::string Hex() const;
  static bool FromHex(const std::string& s, BlockKey* out);
};

// What a block file holds besides the K/V data.
struct BlockRecord {
  BlockKey key;
  BlockKey parent;              // previous block of a prefix chain; empty for the first
  std::vector<int32_t> tokens;  // the tokens whose K/V the block holds
  std::vector<int32_t> positions;
  bool complete = true;  // false: the file holds the global layers only
};

// One block as a self-checking record: header (format version, model fingerprint, key, parent
// key, KV layout and type, checksum) then flags, token ids, positions and every layer's K/V
// (the global ones only where the block is global-only). `count` = record.tokens.size() slots
// of `block` from slot `begin`.
std::string EncodeBlock(const BlockRecord& record, const std::string& fingerprint,
                        const BlockPool& pool, BlockId block, int begin);
// Checks a record against `key`, the fingerprint and the pool's layout and reads it into slots
// [0, count) of `block` (see DiskTier::Read for `sliding_only`). DataLoss names what is wrong;
// NotFound: `sliding_only` and the record is global-only.
Result<BlockRecord> DecodeBlock(std::string_view data, const BlockKey& key,
                                const std::string& fingerprint, BlockPool* pool, BlockId block,
                                bool sliding_only = false);

class DiskTier {
 public:
  // Creates DIR/<fingerprint>/ (DIR/<fingerprint>-<type>/ for a KV type other than f16) if needed
  // and indexes the files already there. One process at a time: the folder is locked (flock)
  // while the tier is open, and a second Open of it fails with an IoError naming it, since two
  // tiers would each apply their own budget and miss each other's deletes.
  ~DiskTier();
  static Result<std::unique_ptr<DiskTier>> Open(const std::string& dir,
                                                const std::string& fingerprint,
                                                const KvLayout& layout, size_t max_bytes);

  bool Contains(const BlockKey& key) const { return index_.count(key) != 0; }
  size_t bytes() const { return bytes_; }
  size_t files() const { return index_.size(); }
  std::vector<BlockKey> Keys() const;

  // Writes `count` slots of `block` (starting at slot `begin`) with their record: every layer,
  // or the global ones where the block is global-only. Evicts the oldest files beyond the byte
  // budget.
  Status Write(const BlockRecord& record, const BlockPool& pool, BlockId block, int begin);
  // Reads a block file into slots [0, count) of `block` (freshly allocated, complete, by the
  // caller; record.complete says whether its sliding layers were there to read). With
  // `sliding_only`, fills only the sliding layers of a block that has the rest (positions
  // checked), from a complete file; a global-only one is NotFound. On any other mismatch the
  // file is removed and a DataLoss status names the problem.
  Result<BlockRecord> Read(const BlockKey& key, BlockPool* pool, BlockId block,
                           bool sliding_only = false);
  // A block file's key, parent and tokens without its K/V, for listing what is on disk. Only the
  // header is checked (the checksum covers the whole file): Read verifies before any use.
  Result<BlockRecord> Peek(const BlockKey& key) const;
  // Known to hold a global-only block (written or read as one by this process).
  bool Partial(const BlockKey& key) const {
    auto it = index_.find(key);
    return it != index_.end() && it->second.partial;
  }
  void Remove(const BlockKey& key);
  uint64_t evictions() const { return evictions_; }
  // Entries named like block files that are not regular files (directories, FIFOs, symlinks),
  // skipped when the folder was read.
  uint64_t skipped() const { return skipped_; }

 private:
  DiskTier() = default;
  std::string PathOf(const BlockKey& key) const;
  void EvictToBudget();

  std::string dir_;
  int lock_fd_ = -1;
  int dir_fd_ = -1;  // the folder, fsynced after each rename so that the new name survives a crash
  std::string fingerprint_;
  KvLayout layout_;
  size_t max_bytes_ = 0;
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  uint64_t evictions_ = 0;
  uint64_t skipped_ = 0;
  struct FileInfo {
    size_t bytes;
    uint64_t stamp;        // last write or read, for LRU
    bool partial = false;  // global-only, where known
  };
  std::map<BlockKey, FileInfo> index_;
};

}  // namespace promptcache
