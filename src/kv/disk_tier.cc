#include "kv/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/hash.h"
#include "core/log.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'P', 'C', 'K', 'V', 'B', 'L', 'K', '1'};
// 3: flags bits 8-15 hold the KV type (KvTypeCode); 2: the payload starts with flags
// (kGlobalOnly), the type follows from the element size; 1 has no flags and holds every layer.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kGlobalOnly = 1;
constexpr uint32_t kTypeShift = 8, kTypeMask = 0xff00;
constexpr const char* kPositionsDiffer = "positions differ from the block's";
constexpr const char* kSuffix = ".kvb";

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  uint32_t version;
  char fingerprint[32];
  uint64_t key_hi, key_lo, parent_hi, parent_lo;
  uint32_t n_layers, n_kv_heads, head_dim, elem_bytes, block_size;
  uint32_t count;          // slots stored
  uint64_t payload_bytes;  // everything after the header
  uint64_t checksum;       // XXH3-64 of the payload
};
#pragma pack(pop)

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

size_t PayloadBytes(const KvLayout& l, int count, uint32_t version, bool complete) {
  const size_t layers = complete ? l.bytes_per_block() : l.global_bytes_per_block();
  return (version >= 2 ? sizeof(uint32_t) : 0) + size_t(count) * 2 * sizeof(int32_t) +
         layers / l.block_size * count;
}

// Each KV type's code in format 3 flags (stable numbers, never reused) and its header elem_bytes
// field: the element size of f16 and f32, the bytes of one 32-value block of a quantized type.
// Readers from before the quantized types compare elem_bytes with 2 or 4, so they refuse a
// quantized record as "KV layout differs" without knowing its type code.
struct KvTypeOnDisk {
  KvType type;
  uint32_t code, elem_field;
};
constexpr KvTypeOnDisk kKvTypesOnDisk[] = {
    {KvType::kF16, 0, 2}, {KvType::kF32, 1, 4}, {KvType::kQ8_0, 2, 34}, {KvType::kQ4_0, 3, 18}};

const KvTypeOnDisk* TypeOnDisk(KvType t) {
  for (const KvTypeOnDisk& d : kKvTypesOnDisk) {
    if (d.type == t) return &d;
  }
  return nullptr;
}

uint32_t KvTypeCode(KvType t) { return TypeOnDisk(t) ? TypeOnDisk(t)->code : 0xff; }
uint32_t ElemField(KvType t) { return TypeOnDisk(t) ? TypeOnDisk(t)->elem_field : 0; }

// What a record of `version` says its KV type is.
uint32_t RecordTypeCode(uint32_t version, uint32_t flags, uint32_t elem_bytes) {
  if (version >= 3) return (flags & kTypeMask) >> kTypeShift;
  return elem_bytes == 2 ? KvTypeCode(KvType::kF16) : KvTypeCode(KvType::kF32);
}

}  // namespace

namespace {

// Reads up to `max_bytes` of a block file. O_NONBLOCK and the type check: something else put
// where a block file was (a FIFO, a directory) is a miss, not a hang.
Status ReadRegularFile(const std::string& path, size_t max_bytes, std::string* data) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError("not a regular file");
  }
  data->assign(std::min(static_cast<size_t>(st.st_size), max_bytes), '\0');
  size_t got = 0;
  while (got < data->size()) {
    const ssize_t n = ::read(fd, data->data() + got, data->size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  data->resize(got);
  return Status::Ok();
}

}  // namespace

std::string EncodeBlock(const BlockRecord& r, const std::string& fingerprint, const BlockPool& pool,
                        BlockId block, int begin) {
  const KvLayout& l = pool.layout();
  const int count = static_cast<int>(r.tokens.size());
  PC_CHECK(count > 0 && count <= l.block_size && r.positions.size() == r.tokens.size());
  const bool complete = pool.Complete(block);
  const uint32_t flags = (complete ? 0 : kGlobalOnly) | KvTypeCode(l.type) << kTypeShift;
  std::string out(sizeof(FileHeader), '\0');
  out.reserve(sizeof(FileHeader) + PayloadBytes(l, count, kVersion, complete));
  out.append(reinterpret_cast<const char*>(&flags), sizeof(flags));
  out.append(reinterpret_cast<const char*>(r.tokens.data()), count * sizeof(int32_t));
  out.append(reinterpret_cast<const char*>(r.positions.data()), count * sizeof(int32_t));
  const size_t row = l.row_bytes();
  for (int layer = 0; layer < l.n_layers; ++layer) {
    if (!complete && l.Sliding(layer)) continue;
    out.append(reinterpret_cast<const char*>(pool.K(block, layer) + begin * row), count * row);
    out.append(reinterpret_cast<const char*>(pool.V(block, layer) + begin * row), count * row);
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  std::memcpy(h.fingerprint, fingerprint.data(), std::min<size_t>(32, fingerprint.size()));
  h.key_hi = r.key.hi;
  h.key_lo = r.key.lo;
  h.parent_hi = r.parent.hi;
  h.parent_lo = r.parent.lo;
  h.n_layers = l.n_layers;
  h.n_kv_heads = l.n_kv_heads;
  h.head_dim = l.head_dim;
  h.elem_bytes = ElemField(l.type);
  h.block_size = l.block_size;
  h.count = count;
  h.payload_bytes = out.size() - sizeof(h);
  h.checksum = Hash64(out.data() + sizeof(h), h.payload_bytes);
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

Result<BlockRecord> DecodeBlock(std::string_view data, const BlockKey& key,
                                const std::string& fingerprint, BlockPool* pool, BlockId block,
                                bool sliding_only) {
  FileHeader h{};
  if (data.size() < sizeof(h)) return DataLoss("truncated header");
  std::memcpy(&h, data.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, 8) != 0) return DataLoss("not a promptcache block record");
  if (h.version < 1 || h.version > kVersion) {
    return DataLoss("format version " + std::to_string(h.version));
  }
  std::string expect_fp = fingerprint.substr(0, 32);
  expect_fp.resize(32, '\0');
  if (std::string(h.fingerprint, 32) != expect_fp) return DataLoss("written for another model");
  if (h.key_hi != key.hi || h.key_lo != key.lo) return DataLoss("key does not match its name");
  const KvLayout& l = pool->layout();
  if (h.n_layers != uint32_t(l.n_layers) || h.n_kv_heads != uint32_t(l.n_kv_heads) ||
      h.head_dim != uint32_t(l.head_dim) || h.elem_bytes != ElemField(l.type) ||
      h.block_size != uint32_t(l.block_size)) {
    return DataLoss("KV layout differs");
  }
  if (h.count == 0 || h.count > uint32_t(l.block_size) ||
      (h.payload_bytes != PayloadBytes(l, h.count, h.version, true) &&
       h.payload_bytes != PayloadBytes(l, h.count, h.version, false))) {
    return DataLoss("inconsistent size");
  }
  if (data.size() - sizeof(h) != h.payload_bytes) return DataLoss("truncated or too long");
  const char* p = data.data() + sizeof(h);
  if (Hash64(p, h.payload_bytes) != h.checksum) return DataLoss("checksum mismatch");

  BlockRecord r;
  r.key = key;
  r.parent = {h.parent_hi, h.parent_lo};
  const int count = static_cast<int>(h.count);
  uint32_t flags = 0;
  if (h.version >= 2) {
    std::memcpy(&flags, p, sizeof(flags));
    p += sizeof(flags);
  }
  r.complete = (flags & kGlobalOnly) == 0;
  const uint32_t known = kGlobalOnly | (h.version >= 3 ? kTypeMask : 0);
  if ((flags & ~known) != 0 || (!r.complete && !l.has_sliding()) ||
      h.payload_bytes != PayloadBytes(l, count, h.version, r.complete)) {
    return DataLoss("inconsistent flags");
  }
  if (RecordTypeCode(h.version, flags, h.elem_bytes) != KvTypeCode(l.type)) {
    return DataLoss("KV type differs");
  }
  if (sliding_only && !r.complete) return NotFound("no sliding layers");
  r.tokens.resize(count);
  r.positions.resize(count);
  std::memcpy(r.tokens.data(), p, count * sizeof(int32_t));
  p += count * sizeof(int32_t);
  std::memcpy(r.positions.data(), p, count * sizeof(int32_t));
  p += count * sizeof(int32_t);
  if (sliding_only) {
    // The rest of the block is in RAM, maybe in use: only its missing layers are written.
    if (!std::equal(r.positions.begin(), r.positions.end(), pool->Positions(block))) {
      return DataLoss(kPositionsDiffer);
    }
  } else {
    std::memcpy(pool->Positions(block), r.positions.data(), count * sizeof(int32_t));
  }
  const size_t row = l.row_bytes();
  for (int layer = 0; layer < l.n_layers; ++layer) {
    const bool sliding = l.Sliding(layer);
    if (!r.complete && sliding) continue;
    if (!sliding_only || sliding) {
      std::memcpy(pool->K(block, layer), p, count * row);
      std::memcpy(pool->V(block, layer), p + count * row, count * row);
    }
    p += 2 * count * row;
  }
  return r;
}

std::string BlockKey::Hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

bool BlockKey::FromHex(const std::string& s, BlockKey* out) {
  if (s.size() != 32 || s.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  out->hi = std::stoull(s.substr(0, 16), nullptr, 16);
  out->lo = std::stoull(s.substr(16), nullptr, 16);
  return true;
}

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir,
                                                 const std::string& fingerprint,
                                                 const KvLayout& layout, size_t max_bytes) {
  std::unique_ptr<DiskTier> t(new DiskTier());
  // A folder per model and, beyond f16 (whose folder keeps the plain name it always had), per KV
  // type: blocks of one type are named by the same token chain as another's, and must neither be
  // read as nor overwrite them.
  const std::string folder =
      layout.type == KvType::kF16 ? fingerprint : fingerprint + "-" + KvTypeName(layout.type);
  t->dir_ = (fs::path(dir) / folder).string();
  t->fingerprint_ = fingerprint;
  t->layout_ = layout;
  t->max_bytes_ = max_bytes;
  std::error_code ec;
  fs::create_directories(t->dir_, ec);
  if (ec) return IoError("cache dir " + t->dir_ + ": " + ec.message());
  const std::string lock = t->dir_ + "/lock";
  t->lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (t->lock_fd_ < 0) return IoError("cache dir " + t->dir_ + ": cannot open " + lock);
  t->dir_fd_ = ::open(t->dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (::flock(t->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return IoError("cache dir " + t->dir_ + " is in use by another process (one server or tool " +
                   "per --cache-dir and model)");
  }
  for (const auto& entry : fs::directory_iterator(t->dir_, ec)) {
    const std::string name = entry.path().filename().string();
    BlockKey key;
    if (name.size() == 32 + 4 && name.ends_with(kSuffix) &&
        BlockKey::FromHex(name.substr(0, 32), &key)) {
      std::error_code type_ec;
      // Only regular files: a directory or a FIFO named like a block file is left alone (reading
      // a FIFO would block forever).
      if (!entry.is_regular_file(type_ec) || entry.is_symlink(type_ec)) {
        PC_LOG_WARN("cache dir %s: %s is not a regular file; ignored", t->dir_.c_str(),
                    name.c_str());
        ++t->skipped_;
        continue;
      }
      std::error_code file_ec;
      const auto mtime = entry.last_write_time(file_ec).time_since_epoch().count();
      const uintmax_t size = file_ec ? 0 : entry.file_size(file_ec);
      if (file_ec) {  // vanished or unreadable since the listing: not counted as size_t(-1)
        PC_LOG_WARN("cache dir %s: %s: %s; ignored", t->dir_.c_str(), name.c_str(),
                    file_ec.message().c_str());
        continue;
      }
      t->index_[key] = {static_cast<size_t>(size), static_cast<uint64_t>(mtime)};
      t->bytes_ += t->index_[key].bytes;
    } else if (name.find(".tmp") != std::string::npos) {
      fs::remove(entry.path(), ec);  // left by a crash mid-write
    }
  }
  if (ec) return IoError("cache dir " + t->dir_ + ": " + ec.message());
  // Continue the LRU clock after the newest file seen.
  for (const auto& [k, info] : t->index_) t->clock_ = std::max(t->clock_, info.stamp);
  t->EvictToBudget();
  return t;
}

DiskTier::~DiskTier() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

std::vector<BlockKey> DiskTier::Keys() const {
  std::vector<BlockKey> keys;
  for (const auto& [k, info] : index_) keys.push_back(k);
  return keys;
}

std::string DiskTier::PathOf(const BlockKey& key) const { return dir_ + "/" + key.Hex() + kSuffix; }

Status DiskTier::Write(const BlockRecord& r, const BlockPool& pool, BlockId block, int begin) {
  const std::string data = EncodeBlock(r, fingerprint_, pool, block, begin);
  const bool complete = pool.Complete(block);
  const std::string path = PathOf(r.key), tmp = path + ".tmp";
  {
    // Written, flushed to the device, then renamed: a crash leaves the old file or the new one,
    // never a torn one under the final name.
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && WriteAll(fd, data.data(), data.size()) && ::fdatasync(fd) == 0;
    if (fd >= 0) ok = ::close(fd) == 0 && ok;
    if (!ok) {
      const std::string why = std::strerror(errno);
      std::error_code ec;
      fs::remove(tmp, ec);
      return IoError("cannot write " + tmp + ": " + why);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return IoError("cannot rename " + tmp + ": " + ec.message());
  // The rename lives in the folder: until the folder is flushed too, a crash may forget it.
  if (dir_fd_ >= 0 && ::fsync(dir_fd_) != 0) {
    return IoError("cannot flush the folder " + dir_ + ": " + std::strerror(errno));
  }
  auto it = index_.find(r.key);
  if (it != index_.end()) bytes_ -= it->second.bytes;
  index_[r.key] = {data.size(), ++clock_, !complete};
  bytes_ += data.size();
  EvictToBudget();
  return Status::Ok();
}

Result<BlockRecord> DiskTier::Peek(const BlockKey& key) const {
  const size_t most =
      sizeof(FileHeader) + sizeof(uint32_t) + 2 * sizeof(int32_t) * layout_.block_size;
  std::string data;
  PC_RETURN_IF_ERROR(ReadRegularFile(PathOf(key), most, &data));
  FileHeader h{};
  if (data.size() < sizeof(h)) return DataLoss("truncated header");
  std::memcpy(&h, data.data(), sizeof(h));
  std::string expect_fp = fingerprint_.substr(0, 32);
  expect_fp.resize(32, '\0');
  if (std::memcmp(h.magic, kMagic, 8) != 0 || h.version < 2 || h.version > kVersion ||
      std::string(h.fingerprint, 32) != expect_fp || h.key_hi != key.hi || h.key_lo != key.lo) {
    return DataLoss("not a block record of this model and key");
  }
  const size_t count = h.count;
  if (count == 0 || count > size_t(layout_.block_size) ||
      data.size() < sizeof(h) + sizeof(uint32_t) + 2 * sizeof(int32_t) * count) {
    return DataLoss("inconsistent size");
  }
  BlockRecord r;
  r.key = key;
  r.parent = {h.parent_hi, h.parent_lo};
  const char* p = data.data() + sizeof(h) + sizeof(uint32_t);
  r.tokens.resize(count);
  r.positions.resize(count);
  std::memcpy(r.tokens.data(), p, count * sizeof(int32_t));
  std::memcpy(r.positions.data(), p + count * sizeof(int32_t), count * sizeof(int32_t));
  return r;
}

Result<BlockRecord> DiskTier::Read(const BlockKey& key, BlockPool* pool, BlockId block,
                                   bool sliding_only) {
  const std::string path = PathOf(key);
  auto fail = [&](const std::string& why) -> Status {
    PC_LOG_WARN("cache file %s skipped: %s", path.c_str(), why.c_str());
    Remove(key);
    return DataLoss(path + ": " + why);
  };
  std::string data;
  if (Status st = ReadRegularFile(path, SIZE_MAX, &data); !st.ok()) return fail(st.message());
  Result<BlockRecord> r = DecodeBlock(data, key, fingerprint_, pool, block, sliding_only);
  if (r.status().code() == StatusCode::kNotFound) {
    index_[key].partial = true;
    return NotFound(path + " holds no sliding layers");
  }
  if (!r.ok()) {
    // A block of the same key read into a block in use: positions differ, the file is fine.
    if (sliding_only && r.status().message() == kPositionsDiffer) {
      return DataLoss(path + ": " + kPositionsDiffer);
    }
    return fail(r.status().message());
  }
  index_[key].partial = !r->complete;
  index_[key].stamp = ++clock_;
  return r;
}

void DiskTier::Remove(const BlockKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  // The path first: `key` may be the erased node's own (EvictToBudget passes it).
  const std::string path = PathOf(key);
  bytes_ -= it->second.bytes;
  index_.erase(it);
  std::error_code ec;
  fs::remove(path, ec);
}

void DiskTier::EvictToBudget() {
  while (bytes_ > max_bytes_ && !index_.empty()) {
    auto oldest = std::min_element(index_.begin(), index_.end(), [](const auto& a, const auto& b) {
      return a.second.stamp < b.second.stamp;
    });
    Remove(oldest->first);
    ++evictions_;
  }
}

}  // namespace promptcache
