// GGUF reading: the validating parser behind GgufFile (type tables, GgufValue: gguf_types.cc).
//
// The parser treats the file as hostile. Every read goes through Reader, which checks the
// remaining bytes first; counts and lengths are bounded by what is left of the file before
// anything is allocated; tensor extents are checked against the file size with overflow-safe
// arithmetic. Whatever the bytes, the result is a Status or a file whose every tensor lies inside
// the file.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace promptcache {

namespace {

constexpr size_t kDefaultAlignment = 32;
// Keys and tensor names longer than this are corrupt (the spec caps keys at 65535 bytes).
constexpr uint64_t kMaxNameLength = 65535;
// A cap on all metadata array elements together. Each element costs a GgufValue (~80 bytes), so
// without it a file of one-byte elements would need ~80x its size in memory. Real vocabularies
// have well under 1M elements per array.
constexpr uint64_t kMaxTotalArrayElements = uint64_t{1} << 23;
constexpr int kMaxDims = 4;

// Bytes on disk of one scalar of a fixed-size value type; 0 for strings, arrays, unknown types.
size_t ScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool KnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

std::string Quote(const std::string& s) {
  // Names come from the file: keep messages on one line and of a sane length.
  std::string out = "'";
  for (char c : s.substr(0, 200)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  if (s.size() > 200) out += "...";
  return out + "'";
}

// Bounds-checked little-endian cursor over the file image.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  size_t size() const { return size_; }

  // Each Read* returns false (and leaves the cursor unspecified) if the file ends first.
  template <typename T>
  bool Read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));  // x86/ARM little-endian hosts only
    pos_ += sizeof(T);
    return true;
  }
  // Reads a T into a metadata scalar, widened as GgufValue holds numbers: unsigned integers as
  // uint64_t, signed ones as int64_t, floats as double.
  template <typename T>
  bool ReadNumber(GgufValue* out) {
    T v = 0;
    const bool ok = Read(&v);
    if constexpr (std::is_floating_point_v<T>) {
      out->scalar = double{v};
    } else if constexpr (std::is_signed_v<T>) {
      out->scalar = int64_t{v};
    } else {
      out->scalar = uint64_t{v};
    }
    return ok;
  }
  bool ReadBytes(size_t n, std::string* out) {
    if (remaining() < n) return false;
    out->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Parses the header, metadata and tensor table of a file image into plain structures; GgufFile
// owns the result. Errors are returned without the file name, which the caller prefixes.
class Parser {
 public:
  Parser(const uint8_t* data, size_t size) : r_(data, size), data_(data) {}

  Status Run(uint32_t* version, size_t* alignment,
             std::vector<std::pair<std::string, GgufValue>>* metadata,
             std::map<std::string, size_t>* metadata_index, std::vector<GgufTensorInfo>* tensors,
             std::map<std::string, size_t>* tensor_index);

 private:
  Status Truncated(const std::string& what) const {
    return DataLoss("truncated: " + what + " at offset " + std::to_string(r_.pos()) +
                    " runs past the end of the file (" + std::to_string(r_.size()) + " bytes)");
  }
  Status ReadHeader(uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv);
  Status ReadString(const std::string& what, std::string* out);
  Status ReadScalar(GgufValueType type, const std::string& what, GgufValue* out);
  Status ReadValue(const std::string& key, GgufValue* out);
  Status ReadAlignment(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                       const std::map<std::string, size_t>& index, size_t* alignment);
  Status ReadTensorInfo(size_t i, size_t alignment, GgufTensorInfo* t);

  Reader r_;
  const uint8_t* data_;
  uint64_t array_elements_ = 0;
};

Status Parser::ReadHeader(uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv) {
  uint32_t magic = 0;
  if (!r_.Read(&magic)) {
    return DataLoss("not a GGUF file (" + std::to_string(r_.size()) + " bytes, too short)");
  }
  if (magic != kGgufMagic) return DataLoss("not a GGUF file (bad magic)");
  if (!r_.Read(version)) return Truncated("the version");
  if (*version == 1) {
    return Unimplemented(
        "GGUF version 1 is not supported (only versions 2 and 3); "
        "convert the file with a current tool");
  }
  if (*version != 2 && *version != 3) {
    // A byte-swapped small number means a big-endian file.
    const uint32_t swapped = __builtin_bswap32(*version);
    if (swapped >= 1 && swapped <= 3) {
      return Unimplemented("big-endian GGUF files are not supported");
    }
    return Unimplemented("unsupported GGUF version " + std::to_string(*version) +
                         " (only versions 2 and 3)");
  }
  if (!r_.Read(n_tensors)) return Truncated("the tensor count");
  if (!r_.Read(n_kv)) return Truncated("the metadata count");
  // The smallest metadata entry is 13 bytes (8-byte key length, 1-byte key, 4-byte type, ...),
  // the smallest tensor entry 33 (name length, name, n_dims, one dim, type, offset). Bounding
  // the counts by the rest of the file rejects absurd counts before anything is allocated.
  if (*n_kv > r_.remaining() / 13) {
    return DataLoss("corrupt header: " + std::to_string(*n_kv) +
                    " metadata entries cannot fit in the file (" + std::to_string(r_.size()) +
                    " bytes)");
  }
  if (*n_tensors > r_.remaining() / 33) {
    return DataLoss("corrupt header: " + std::to_string(*n_tensors) +
                    " tensors cannot fit in the file (" + std::to_string(r_.size()) + " bytes)");
  }
  return Status::Ok();
}

Status Parser::ReadString(const std::string& what, std::string* out) {
  uint64_t len = 0;
  if (!r_.Read(&len)) return Truncated("the length of " + what);
  if (len > r_.remaining()) {
    return DataLoss("truncated: " + what + " at offset " + std::to_string(r_.pos()) + " claims " +
                    std::to_string(len) + " bytes, past the end of the file (" +
                    std::to_string(r_.size()) + " bytes)");
  }
  r_.ReadBytes(static_cast<size_t>(len), out);
  return Status::Ok();
}

Status Parser::ReadScalar(GgufValueType type, const std::string& what, GgufValue* out) {
  out->type = type;
  bool ok = true;
  switch (type) {
    case GgufValueType::kU8:
      ok = r_.ReadNumber<uint8_t>(out);
      break;
    case GgufValueType::kI8:
      ok = r_.ReadNumber<int8_t>(out);
      break;
    case GgufValueType::kU16:
      ok = r_.ReadNumber<uint16_t>(out);
      break;
    case GgufValueType::kI16:
      ok = r_.ReadNumber<int16_t>(out);
      break;
    case GgufValueType::kU32:
      ok = r_.ReadNumber<uint32_t>(out);
      break;
    case GgufValueType::kI32:
      ok = r_.ReadNumber<int32_t>(out);
      break;
    case GgufValueType::kU64:
      ok = r_.ReadNumber<uint64_t>(out);
      break;
    case GgufValueType::kI64:
      ok = r_.ReadNumber<int64_t>(out);
      break;
    case GgufValueType::kF32:
      ok = r_.ReadNumber<float>(out);
      break;
    case GgufValueType::kF64:
      ok = r_.ReadNumber<double>(out);
      break;
    case GgufValueType::kBool: {
      uint8_t v = 0;
      ok = r_.Read(&v);
      if (ok && v > 1) {
        return DataLoss("corrupt metadata: " + what + " is a bool with value " + std::to_string(v));
      }
      out->scalar = v != 0;
      break;
    }
    case GgufValueType::kString: {
      std::string s;
      PC_RETURN_IF_ERROR(ReadString(what, &s));
      out->scalar = std::move(s);
      break;
    }
    default:
      PC_CHECK(false);  // callers handle arrays and unknown types
  }
  if (!ok) return Truncated(what);
  return Status::Ok();
}

Status Parser::ReadValue(const std::string& key, GgufValue* out) {
  const std::string what = "the value of " + Quote(key);
  uint32_t type = 0;
  if (!r_.Read(&type)) return Truncated("the type of " + Quote(key));
  if (!KnownValueType(type)) {
    return DataLoss("corrupt metadata: key " + Quote(key) + " has unknown value type " +
                    std::to_string(type));
  }
  if (static_cast<GgufValueType>(type) != GgufValueType::kArray) {
    return ReadScalar(static_cast<GgufValueType>(type), what, out);
  }
  out->type = GgufValueType::kArray;
  uint32_t elem_type = 0;
  uint64_t n = 0;
  if (!r_.Read(&elem_type)) return Truncated("the element type of " + Quote(key));
  if (!KnownValueType(elem_type)) {
    return DataLoss("corrupt metadata: array " + Quote(key) + " has unknown element type " +
                    std::to_string(elem_type));
  }
  if (static_cast<GgufValueType>(elem_type) == GgufValueType::kArray) {
    return Unimplemented("metadata key " + Quote(key) + " is a nested array (not supported)");
  }
  if (!r_.Read(&n)) return Truncated("the length of array " + Quote(key));
  out->array_type = static_cast<GgufValueType>(elem_type);
  // Strings take at least their 8-byte length each.
  const size_t min_elem =
      out->array_type == GgufValueType::kString ? 8 : ScalarSize(out->array_type);
  if (n > r_.remaining() / min_elem) {
    return DataLoss("truncated: array " + Quote(key) + " claims " + std::to_string(n) +
                    " elements, more than the rest of the file (" + std::to_string(r_.remaining()) +
                    " bytes) can hold");
  }
  array_elements_ += n;
  if (array_elements_ > kMaxTotalArrayElements) {
    return ResourceExhausted("metadata arrays hold more than " +
                             std::to_string(kMaxTotalArrayElements) + " elements in all (array " +
                             Quote(key) + ")");
  }
  out->array.resize(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    PC_RETURN_IF_ERROR(ReadScalar(
        out->array_type, "element " + std::to_string(i) + " of " + Quote(key), &out->array[i]));
  }
  return Status::Ok();
}

Status Parser::ReadAlignment(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                             const std::map<std::string, size_t>& index, size_t* alignment) {
  *alignment = kDefaultAlignment;
  auto it = index.find("general.alignment");
  if (it == index.end()) return Status::Ok();
  int64_t a = 0;
  if (!metadata[it->second].second.AsInt64(&a)) {
    return DataLoss("corrupt metadata: general.alignment is not an integer");
  }
  if (a <= 0 || (a & (a - 1)) != 0 || a > (int64_t{1} << 30)) {
    return DataLoss("corrupt metadata: general.alignment " + std::to_string(a) +
                    " is not a power of two (up to 2^30)");
  }
  *alignment = static_cast<size_t>(a);
  return Status::Ok();
}

Status Parser::ReadTensorInfo(size_t i, size_t alignment, GgufTensorInfo* t) {
  const std::string which = "tensor " + std::to_string(i);
  PC_RETURN_IF_ERROR(ReadString("the name of " + which, &t->name));
  if (t->name.empty() || t->name.size() > kMaxNameLength) {
    return DataLoss("corrupt tensor table: " + which + " has a name of " +
                    std::to_string(t->name.size()) + " bytes");
  }
  const std::string q = Quote(t->name);
  uint32_t n_dims = 0;
  if (!r_.Read(&n_dims)) return Truncated("the dimension count of " + q);
  if (n_dims < 1 || n_dims > kMaxDims) {
    return DataLoss("corrupt tensor table: tensor " + q + " has " + std::to_string(n_dims) +
                    " dimensions (1 to 4 allowed)");
  }
  t->dims.resize(n_dims);
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t dim = 0;
    if (!r_.Read(&dim)) return Truncated("the dimensions of " + q);
    if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return DataLoss("corrupt tensor table: tensor " + q + " has dimension " + std::to_string(d) +
                      " of size " + std::to_string(dim));
    }
    t->dims[d] = static_cast<int64_t>(dim);
    if (__builtin_mul_overflow(elements, t->dims[d], &elements)) {
      return DataLoss("corrupt tensor table: tensor " + q + " has too many elements");
    }
  }
  uint32_t type = 0;
  if (!r_.Read(&type)) return Truncated("the type of " + q);
  t->type = static_cast<GgmlType>(type);
  const GgmlTypeTraits tr = GetTypeTraits(t->type);
  if (tr.block_elems == 0) {
    return Unimplemented("tensor " + q + " has unknown type id " + std::to_string(type));
  }
  if (t->dims[0] % tr.block_elems != 0) {
    return DataLoss("corrupt tensor table: tensor " + q + " of type " + GgmlTypeName(t->type) +
                    " has rows of " + std::to_string(t->dims[0]) +
                    " elements, not a multiple of its block size " +
                    std::to_string(tr.block_elems));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements / tr.block_elems),
                             static_cast<uint64_t>(tr.block_bytes), &nbytes) ||
      nbytes > std::numeric_limits<size_t>::max()) {
    return DataLoss("corrupt tensor table: tensor " + q + " is too large");
  }
  t->nbytes = static_cast<size_t>(nbytes);
  if (!r_.Read(&t->offset)) return Truncated("the offset of " + q);
  if (t->offset % alignment != 0) {
    return DataLoss("corrupt tensor table: tensor " + q + " has offset " +
                    std::to_string(t->offset) + ", not a multiple of the alignment " +
                    std::to_string(alignment));
  }
  return Status::Ok();
}

Status Parser::Run(uint32_t* version, size_t* alignment,
                   std::vector<std::pair<std::string, GgufValue>>* metadata,
                   std::map<std::string, size_t>* metadata_index,
                   std::vector<GgufTensorInfo>* tensors,
                   std::map<std::string, size_t>* tensor_index) {
  uint64_t n_tensors = 0, n_kv = 0;
  PC_RETURN_IF_ERROR(ReadHeader(version, &n_tensors, &n_kv));
  metadata->reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    PC_RETURN_IF_ERROR(ReadString("metadata key " + std::to_string(i), &key));
    if (key.empty() || key.size() > kMaxNameLength) {
      return DataLoss("corrupt metadata: key " + std::to_string(i) + " has a length of " +
                      std::to_string(key.size()));
    }
    GgufValue value;
    PC_RETURN_IF_ERROR(ReadValue(key, &value));
    if (!metadata_index->emplace(key, metadata->size()).second) {
      return DataLoss("corrupt metadata: duplicate key " + Quote(key));
    }
    metadata->emplace_back(std::move(key), std::move(value));
  }
  PC_RETURN_IF_ERROR(ReadAlignment(*metadata, *metadata_index, alignment));

  tensors->resize(static_cast<size_t>(n_tensors));
  for (size_t i = 0; i < tensors->size(); ++i) {
    GgufTensorInfo& t = (*tensors)[i];
    PC_RETURN_IF_ERROR(ReadTensorInfo(i, *alignment, &t));
    if (!tensor_index->emplace(t.name, i).second) {
      return DataLoss("corrupt tensor table: duplicate tensor name " + Quote(t.name));
    }
  }

  // The data section starts at the next multiple of the alignment after the tensor table.
  const uint64_t size = r_.size();
  const uint64_t data_start = (uint64_t{r_.pos()} + *alignment - 1) / *alignment * *alignment;
  for (GgufTensorInfo& t : *tensors) {
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_start, t.offset, &begin) ||
        __builtin_add_overflow(begin, uint64_t{t.nbytes}, &end)) {
      return DataLoss("truncated: tensor " + Quote(t.name) + " data at offset " +
                      std::to_string(t.offset) + " (" + std::to_string(t.nbytes) +
                      " bytes) lies past the end of the file (" + std::to_string(size) + " bytes)");
    }
    if (end > size) {
      return DataLoss("truncated: tensor " + Quote(t.name) + " data ends at " +
                      std::to_string(end) + ", past the end of the file (" + std::to_string(size) +
                      " bytes)");
    }
    t.data = data_ + begin;
  }
  // The file stores offsets, not sizes: a tensor whose bytes (from its type and shape) run into
  // the next tensor's has a type or shape other than the one its data was written with.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : *tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.nbytes > b.offset) {
      std::string dims;
      for (int64_t d : a.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      return DataLoss("corrupt tensor table: tensor " + Quote(a.name) + " of type " +
                      GgmlTypeName(a.type) + " and shape [" + dims + "] needs " +
                      std::to_string(a.nbytes) + " bytes, but tensor " + Quote(b.name) +
                      " begins " + std::to_string(b.offset - a.offset) +
                      " bytes after it: its size does not match its type and shape");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = path + ": cannot open: " + std::strerror(err);
    return err == ENOENT ? NotFound(msg) : IoError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string msg = path + ": cannot stat: " + std::strerror(errno);
    ::close(fd);
    return IoError(msg);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const std::string msg = path + ": cannot map: " + std::strerror(errno);
      ::close(fd);
      return IoError(msg);
    }
    file->base_ = static_cast<const uint8_t*>(p);
    file->mapped_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive
  PC_RETURN_IF_ERROR(file->Parse());
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromMemory(const uint8_t* data, size_t size,
                                                       const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  file->base_ = data;
  file->size_ = data == nullptr ? 0 : size;
  PC_RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

Status GgufFile::Parse() {
  static const uint8_t kEmpty = 0;
  Parser parser(base_ ? base_ : &kEmpty, size_);
  return parser.Run(&version_, &alignment_, &metadata_, &metadata_index_, &tensors_, &tensor_index_)
      .WithContext(path_);
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

Result<int64_t> GgufFile::GetInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_ + ": missing key '" + key + "'");
  int64_t out = 0;
  if (!v->AsInt64(&out)) {
    return InvalidArgument(path_ + ": key '" + key + "' is not an integer (or does not fit int64)");
  }
  return out;
}

Result<double> GgufFile::GetFloat(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_ + ": missing key '" + key + "'");
  double out = 0;
  if (!v->AsDouble(&out)) return InvalidArgument(path_ + ": key '" + key + "' is not a number");
  return out;
}

Result<std::string> GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_ + ": missing key '" + key + "'");
  std::string out;
  if (!v->AsString(&out)) return InvalidArgument(path_ + ": key '" + key + "' is not a string");
  return out;
}

Result<bool> GgufFile::GetBool(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(path_ + ": missing key '" + key + "'");
  bool out = false;
  if (!v->AsBool(&out)) return InvalidArgument(path_ + ": key '" + key + "' is not a bool");
  return out;
}

Result<int64_t> GgufFile::GetIntOr(const std::string& key, int64_t def) const {
  if (Find(key) == nullptr) return def;
  return GetInt(key);
}

Result<double> GgufFile::GetFloatOr(const std::string& key, double def) const {
  if (Find(key) == nullptr) return def;
  return GetFloat(key);
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::ReleasePages(const GgufTensorInfo& t) const {
  if (!mapped_ || t.nbytes == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(t.data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(t.data) + t.nbytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void GgufFile::Prefetch() const {
  if (mapped_ && size_ > 0) {
    ::madvise(const_cast<uint8_t*>(base_), size_, MADV_WILLNEED);
  }
}

}  // namespace promptcache
