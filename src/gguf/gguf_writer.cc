// GgufWriter: serialises metadata and a tensor table as GGUF v3 and streams tensor data to a
// temporary file, renamed over the destination only once everything is on disk, so that a
// crash or a full disk never leaves a half-written model under the final name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

#include "gguf/gguf.h"

namespace promptcache {

namespace {

// A metadata value of a scalar type, holding `v` as GgufValue holds that type.
GgufValue Scalar(GgufValueType type, decltype(GgufValue::scalar) v) {
  GgufValue value;
  value.type = type;
  value.scalar = std::move(v);
  return value;
}

class ByteSink {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void PadTo(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// The scalar as raw integer bits or a double, whichever alternative the caller filled in.
uint64_t IntegerBits(const GgufValue& v) {
  if (const int64_t* p = std::get_if<int64_t>(&v.scalar)) return static_cast<uint64_t>(*p);
  if (const uint64_t* p = std::get_if<uint64_t>(&v.scalar)) return *p;
  if (const double* p = std::get_if<double>(&v.scalar))
    return static_cast<uint64_t>(static_cast<int64_t>(*p));
  if (const bool* p = std::get_if<bool>(&v.scalar)) return *p ? 1 : 0;
  return 0;
}

double FloatValue(const GgufValue& v) {
  if (const double* p = std::get_if<double>(&v.scalar)) return *p;
  if (const int64_t* p = std::get_if<int64_t>(&v.scalar)) return static_cast<double>(*p);
  if (const uint64_t* p = std::get_if<uint64_t>(&v.scalar)) return static_cast<double>(*p);
  return 0;
}

Status PutScalar(GgufValueType type, const GgufValue& v, const std::string& key, ByteSink* out) {
  const bool is_string = std::holds_alternative<std::string>(v.scalar);
  if (is_string != (type == GgufValueType::kString)) {
    return InvalidArgument("GGUF writer: value of '" + key + "' does not match its type");
  }
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
      out->Put(static_cast<uint8_t>(IntegerBits(v)));
      break;
    case GgufValueType::kBool:
      out->Put(static_cast<uint8_t>(IntegerBits(v) != 0));
      break;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      out->Put(static_cast<uint16_t>(IntegerBits(v)));
      break;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
      out->Put(static_cast<uint32_t>(IntegerBits(v)));
      break;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
      out->Put(IntegerBits(v));
      break;
    case GgufValueType::kF32:
      out->Put(static_cast<float>(FloatValue(v)));
      break;
    case GgufValueType::kF64:
      out->Put(FloatValue(v));
      break;
    case GgufValueType::kString:
      out->PutString(std::get<std::string>(v.scalar));
      break;
    default:
      return InvalidArgument("GGUF writer: '" + key + "' has an invalid value type");
  }
  return Status::Ok();
}

Status PutValue(const std::string& key, const GgufValue& v, ByteSink* out) {
  out->Put(static_cast<uint32_t>(v.type));
  if (!v.is_array()) return PutScalar(v.type, v, key, out);
  if (v.array_type == GgufValueType::kArray) {
    return InvalidArgument("GGUF writer: '" + key + "' is a nested array (not supported)");
  }
  out->Put(static_cast<uint32_t>(v.array_type));
  out->Put<uint64_t>(v.array.size());
  for (const GgufValue& e : v.array) PC_RETURN_IF_ERROR(PutScalar(v.array_type, e, key, out));
  return Status::Ok();
}

Status WriteAll(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError(path + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Owns the temporary file until it is committed (renamed) or abandoned (removed).
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(path), tmp_(path + ".tmp.XXXXXX") {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && created_) ::unlink(tmp_.c_str());
  }
  Status Create() {
    fd_ = ::mkstemp(tmp_.data());
    if (fd_ < 0)
      return IoError(path_ + ": cannot create a temporary file: " + std::strerror(errno));
    created_ = true;
    ::fchmod(fd_, 0644);
    return Status::Ok();
  }
  int fd() const { return fd_; }
  Status Commit() {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      return IoError(path_ + ": write failed: " + std::strerror(errno));
    }
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return IoError(path_ + ": cannot rename the temporary file: " + std::strerror(errno));
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool created_ = false;
  bool committed_ = false;
};

}  // namespace

void GgufWriter::SetValue(const std::string& key, GgufValue value) {
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::SetString(const std::string& key, const std::string& v) {
  SetValue(key, Scalar(GgufValueType::kString, v));
}

void GgufWriter::SetU32(const std::string& key, uint32_t v) {
  SetValue(key, Scalar(GgufValueType::kU32, uint64_t{v}));
}

void GgufWriter::SetI32(const std::string& key, int32_t v) {
  SetValue(key, Scalar(GgufValueType::kI32, int64_t{v}));
}

void GgufWriter::SetF32(const std::string& key, float v) {
  SetValue(key, Scalar(GgufValueType::kF32, double{v}));
}

void GgufWriter::SetBool(const std::string& key, bool v) {
  SetValue(key, Scalar(GgufValueType::kBool, v));
}

void GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                           std::function<void(uint8_t* dst, size_t nbytes)> fill) {
  tensors_.push_back(PendingTensor{name, std::move(dims), type, std::move(fill)});
}

Status GgufWriter::Write(const std::string& path,
                         const std::function<void(size_t done, size_t total)>& progress) const {
  const std::string where = path + ": GGUF writer: ";
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    return InvalidArgument(where + "alignment " + std::to_string(alignment_) +
                           " is not a power of two");
  }
  // A non-default alignment must be recorded in the file, or readers would assume 32.
  std::vector<std::pair<std::string, GgufValue>> metadata = metadata_;
  bool has_alignment_key = false;
  for (const auto& [key, value] : metadata) {
    if (key != "general.alignment") continue;
    int64_t a = 0;
    if (!value.AsInt64(&a) || a != static_cast<int64_t>(alignment_)) {
      return InvalidArgument(where + "general.alignment disagrees with the writer's alignment " +
                             std::to_string(alignment_));
    }
    has_alignment_key = true;
  }
  if (!has_alignment_key && alignment_ != 32) {
    GgufValue a;
    a.type = GgufValueType::kU32;
    a.scalar = uint64_t{alignment_};
    metadata.emplace_back("general.alignment", std::move(a));
  }

  // Tensor table, with the size and offset of every tensor.
  ByteSink head;
  head.Put(kGgufMagic);
  head.Put<uint32_t>(3);
  head.Put<uint64_t>(tensors_.size());
  head.Put<uint64_t>(metadata.size());
  for (const auto& [key, value] : metadata) {
    if (key.empty()) return InvalidArgument(where + "empty metadata key");
    head.PutString(key);
    PC_RETURN_IF_ERROR(PutValue(key, value, &head).WithContext(path));
  }
  std::vector<size_t> sizes;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    const GgmlTypeTraits tr = GetTypeTraits(t.type);
    int64_t elements = 1;
    bool dims_ok = !t.dims.empty() && t.dims.size() <= 4;
    for (int64_t d : t.dims)
      dims_ok = dims_ok && d > 0 && !__builtin_mul_overflow(elements, d, &elements);
    if (t.name.empty() || !names.insert(t.name).second || !dims_ok || tr.block_elems == 0 ||
        t.dims[0] % tr.block_elems != 0) {
      return InvalidArgument(where + "invalid tensor '" + t.name +
                             "' (empty or duplicate name, bad dims, or unknown type)");
    }
    sizes.push_back(static_cast<size_t>(elements / tr.block_elems) * tr.block_bytes);
    head.PutString(t.name);
    head.Put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) head.Put<uint64_t>(static_cast<uint64_t>(d));
    head.Put(static_cast<uint32_t>(t.type));
    head.Put<uint64_t>(offset);
    offset += (sizes.back() + alignment_ - 1) / alignment_ * alignment_;
  }
  head.PadTo(alignment_);
  const size_t total = offset;

  TempFile file(path);
  PC_RETURN_IF_ERROR(file.Create());
  PC_RETURN_IF_ERROR(WriteAll(file.fd(), head.bytes().data(), head.bytes().size(), path));
  if (progress) progress(0, total);
  size_t done = 0;
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    {
      // Zeroed so that a fill that writes less still gives deterministic output.
      std::unique_ptr<uint8_t[]> buf(new uint8_t[sizes[i] > 0 ? sizes[i] : 1]());
      if (tensors_[i].fill) tensors_[i].fill(buf.get(), sizes[i]);
      PC_RETURN_IF_ERROR(WriteAll(file.fd(), buf.get(), sizes[i], path));
    }
    const size_t padded = (sizes[i] + alignment_ - 1) / alignment_ * alignment_;
    PC_RETURN_IF_ERROR(WriteAll(file.fd(), zeros.data(), padded - sizes[i], path));
    done += padded;
    if (progress) progress(done, total);
  }
  return file.Commit();
}

}  // namespace promptcache
