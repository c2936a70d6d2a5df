// GGUF files: reading (memory-mapped, validated) and writing.
//
// GgufFile::Open maps a file, parses its header, metadata and tensor table, and validates every
// offset and size against the file before anything uses them, so a truncated or corrupt file
// yields a Status naming the problem, never an out-of-bounds read. Tensor data stays in the
// mapping: weights are never copied. GgufWriter produces v3 files (used by `synth`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"

namespace promptcache {

// The first four bytes of every GGUF file: "GGUF" read as a little-endian u32.
inline constexpr uint32_t kGgufMagic = 0x46554747;

// ggml tensor types by their on-disk ids.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Name ("F32", "Q8_0", ...) or "type N" for unknown ids.
std::string GgmlTypeName(GgmlType t);
// Elements per block and bytes per block; {0, 0} for types this engine does not know.
struct GgmlTypeTraits {
  int block_elems;
  int block_bytes;
};
GgmlTypeTraits GetTypeTraits(GgmlType t);
// Bytes for n elements (n a multiple of the block size), or 0 if the type is unknown.
size_t RowBytes(GgmlType t, int64_t n);

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One metadata value. Integers of every width are held as int64 or uint64, floats as double;
// `type` keeps the on-disk type so a writer can round-trip a file.
struct GgufValue {
  GgufValueType type = GgufValueType::kU32;
  std::variant<int64_t, uint64_t, double, bool, std::string> scalar;
  // For arrays: the element type and the elements (nested arrays are rejected as unsupported).
  GgufValueType array_type = GgufValueType::kU32;
  std::vector<GgufValue> array;

  bool is_array() const { return type == GgufValueType::kArray; }
  bool is_string() const { return type == GgufValueType::kString; }
  bool is_integer() const;
  bool is_float() const;
  // Converting accessors; they return false when the value has another kind (or does not fit).
  bool AsInt64(int64_t* out) const;
  bool AsDouble(double* out) const;
  bool AsBool(bool* out) const;
  bool AsString(std::string* out) const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;            // relative to the data section
  const uint8_t* data = nullptr;  // inside the mapping
  size_t nbytes = 0;
  int64_t elements() const;
};

class GgufFile {
 public:
  // Maps and validates `path`. Errors name the file and the problem, e.g.
  // "model.gguf: truncated: tensor 'blk.0.attn_q.weight' ends at 1234 past the file size 1000".
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (the fuzz target and tests use this); `data` must outlive the file.
  static Result<std::unique_ptr<GgufFile>> FromMemory(const uint8_t* data, size_t size,
                                                      const std::string& name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t file_size() const { return size_; }
  size_t alignment() const { return alignment_; }

  // Metadata in file order (a vector, since some tools care about order) and by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(const std::string& key) const;
  // Typed lookups: NotFound if missing, InvalidArgument naming the key if it has another type.
  Result<int64_t> GetInt(const std::string& key) const;
  Result<double> GetFloat(const std::string& key) const;  // accepts integers too
  Result<std::string> GetString(const std::string& key) const;
  Result<bool> GetBool(const std::string& key) const;
  // Convenience with defaults for optional keys (still an error if present with a wrong type).
  Result<int64_t> GetIntOr(const std::string& key, int64_t def) const;
  Result<double> GetFloatOr(const std::string& key, double def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(const std::string& name) const;

  // Asks the kernel to read the whole mapping ahead (MADV_WILLNEED); optional.
  void Prefetch() const;
  // Drops a tensor's pages from this process's resident set (MADV_DONTNEED on the whole pages
  // inside its data): for data copied elsewhere. Reading it again pages it back in from the file.
  void ReleasePages(const GgufTensorInfo& t) const;

 private:
  GgufFile() = default;
  Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Writes a GGUF v3 file: metadata, then tensors aligned to `alignment` (default 32). Data is
// streamed to disk tensor by tensor so that writing a 1B-parameter file needs no 1B buffer.
class GgufWriter {
 public:
  explicit GgufWriter(size_t alignment = 32) : alignment_(alignment) {}
  void SetValue(const std::string& key, GgufValue value);  // replaces an existing key
  void SetString(const std::string& key, const std::string& v);
  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetF32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  // Declares a tensor; `fill(dst)` is called while writing to produce exactly nbytes of data.
  void AddTensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                 std::function<void(uint8_t* dst, size_t nbytes)> fill);
  // Writes to `path` atomically (temp file in the same folder, then rename).
  Status Write(const std::string& path,
               const std::function<void(size_t done, size_t total)>& progress = nullptr) const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::function<void(uint8_t*, size_t)> fill;
  };
  size_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace promptcache
