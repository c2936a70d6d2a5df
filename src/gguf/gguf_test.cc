#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

namespace promptcache {
namespace {

namespace fs = std::filesystem;

const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "gguf_test_XXXXXX").string();
    PC_CHECK(::mkdtemp(t.data()) != nullptr);
    path_ = t;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
}

GgufValue Scalar(GgufValueType t, std::variant<int64_t, uint64_t, double, bool, std::string> v) {
  GgufValue g;
  g.type = t;
  g.scalar = std::move(v);
  return g;
}

GgufValue Array(GgufValueType elem, std::vector<GgufValue> items) {
  GgufValue g;
  g.type = GgufValueType::kArray;
  g.array_type = elem;
  g.array = std::move(items);
  return g;
}

// Reads everything a consumer could read from a parsed file and checks that every tensor lies
// inside the image: what a corrupt file must never break.
void ExpectConsistent(const GgufFile& f, const uint8_t* base, size_t size) {
  size_t touched = 0;
  for (const auto& [key, v] : f.metadata()) {
    touched += key.size();
    int64_t i;
    double d;
    bool b;
    std::string s;
    v.AsInt64(&i);
    v.AsDouble(&d);
    v.AsBool(&b);
    if (v.AsString(&s)) touched += s.size();
    for (const GgufValue& e : v.array) {
      if (e.AsString(&s)) touched += s.size();
      e.AsInt64(&i);
    }
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    ASSERT_GE(t.data, base);
    ASSERT_LE(t.data + t.nbytes, base + size);
    ASSERT_LE(t.nbytes, size);
    ASSERT_GE(t.dims.size(), 1u);
    ASSERT_LE(t.dims.size(), 4u);
    ASSERT_EQ(t.nbytes, RowBytes(t.type, t.elements()));
    ASSERT_EQ(t.offset % f.alignment(), 0u);
    if (t.nbytes > 0) touched += t.data[0] + t.data[t.nbytes - 1];
  }
  (void)touched;
}

// A small valid file exercising several types and two tensors.
std::vector<uint8_t> SmallFile(const TempDir& dir, size_t alignment = 32) {
  GgufWriter w(alignment);
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 2);
  w.SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetValue("tokenizer.ggml.tokens",
             Array(GgufValueType::kString, {Scalar(GgufValueType::kString, std::string("a")),
                                            Scalar(GgufValueType::kString, std::string("bc"))}));
  w.SetValue("tokenizer.ggml.scores",
             Array(GgufValueType::kF32,
                   {Scalar(GgufValueType::kF32, 0.5), Scalar(GgufValueType::kF32, -1.0)}));
  w.AddTensor("a", {4, 2}, GgmlType::kF32, [](uint8_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(i);
  });
  w.AddTensor("b", {32}, GgmlType::kQ8_0, [](uint8_t* dst, size_t n) { std::memset(dst, 7, n); });
  const std::string path = dir.File("small.gguf");
  EXPECT_TRUE(w.Write(path).ok());
  return ReadAll(path);
}

TEST(GgufTypes, Traits) {
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ8_0).block_elems, 32);
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ8_0).block_bytes, 34);
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ6_K).block_bytes, 210);
  EXPECT_EQ(GetTypeTraits(GgmlType::kBF16).block_bytes, 2);
  EXPECT_EQ(GetTypeTraits(static_cast<GgmlType>(99)).block_elems, 0);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_0, 64), 36u);
  EXPECT_EQ(RowBytes(GgmlType::kF16, 10), 20u);
  EXPECT_EQ(RowBytes(static_cast<GgmlType>(99), 10), 0u);
  EXPECT_EQ(GgmlTypeName(GgmlType::kQ4_K), "Q4_K");
  EXPECT_EQ(GgmlTypeName(static_cast<GgmlType>(99)), "type 99");
}

TEST(GgufFile, OpensStories260K) {
  auto r = GgufFile::Open(kStories);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.file_size(), 1185376u);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_NEAR(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_TRUE(tokens->is_array());
  EXPECT_EQ(tokens->array_type, GgufValueType::kString);
  ASSERT_EQ(tokens->array.size(), 512u);
  std::string s;
  ASSERT_TRUE(tokens->array[1].AsString(&s));
  EXPECT_EQ(s, "<s>");
  const GgufTensorInfo* t = f.FindTensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(t->type, GgmlType::kF32);
  EXPECT_EQ(t->nbytes, 64u * 512 * 4);
  EXPECT_EQ(t->elements(), 64 * 512);
  const GgufTensorInfo* q = f.FindTensor("blk.0.attn_k.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dims, (std::vector<int64_t>{64, 32}));  // 4 KV heads x head_dim 8
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
  // Data points into the mapping; values of a trained embedding are finite and not all zero.
  float v[64];
  std::memcpy(v, t->data, sizeof(v));
  float sum = 0;
  for (float x : v) {
    EXPECT_TRUE(std::isfinite(x));
    sum += std::fabs(x);
  }
  EXPECT_GT(sum, 0.0f);
  f.Prefetch();
}

TEST(GgufFile, TypedLookups) {
  auto r = GgufFile::Open(kStories);
  ASSERT_TRUE(r.ok());
  const GgufFile& f = **r;
  EXPECT_EQ(f.GetInt("missing.key").status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.GetInt("missing.key").status().message().find("missing.key"), std::string::npos);
  EXPECT_EQ(f.GetInt("general.architecture").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetString("llama.block_count").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*f.GetIntOr("llama.rope.freq_base_missing", 7), 7);
  EXPECT_EQ(*f.GetFloatOr("llama.rope.freq_base", 10000.0), 10000.0);
  EXPECT_FALSE(f.GetIntOr("general.architecture", 1).ok());
  EXPECT_EQ(*f.GetFloat("llama.block_count"), 5.0);  // integers convert to float
  EXPECT_FALSE(f.GetBool("llama.block_count").ok());
}

TEST(GgufFile, MissingFile) {
  auto r = GgufFile::Open("/nonexistent/x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "/nonexistent/x.gguf: cannot open: No such file or directory");
}

TEST(GgufFile, DirectoryAndEmptyFile) {
  TempDir dir;
  EXPECT_FALSE(GgufFile::Open(dir.File("")).ok());
  WriteAll(dir.File("empty.gguf"), nullptr, 0);
  auto r = GgufFile::Open(dir.File("empty.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message().rfind(dir.File("empty.gguf") + ": not a GGUF file", 0), 0u)
      << r.status().message();
}

TEST(GgufFile, BadMagicAndVersions) {
  const uint8_t text[] = "hello world, this is not a model file at all";
  auto r = GgufFile::FromMemory(text, sizeof(text), "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "x.gguf: not a GGUF file (bad magic)");

  uint8_t v1[24] = {'G', 'G', 'U', 'F', 1};
  r = GgufFile::FromMemory(v1, sizeof(v1), "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("version 1 is not supported"), std::string::npos);

  uint8_t v9[24] = {'G', 'G', 'U', 'F', 9};
  r = GgufFile::FromMemory(v9, sizeof(v9), "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unsupported GGUF version 9"), std::string::npos);

  uint8_t be[24] = {'G', 'G', 'U', 'F', 0, 0, 0, 3};
  r = GgufFile::FromMemory(be, sizeof(be), "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("big-endian"), std::string::npos);

  // v2 with nothing in it is valid.
  uint8_t v2[24] = {'G', 'G', 'U', 'F', 2};
  r = GgufFile::FromMemory(v2, sizeof(v2), "x.gguf");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->version(), 2u);
  EXPECT_TRUE((*r)->tensors().empty());
}

TEST(GgufWriter, RoundTripsEveryValueType) {
  TempDir dir;
  GgufWriter w;
  using T = GgufValueType;
  w.SetValue("u8", Scalar(T::kU8, uint64_t{200}));
  w.SetValue("i8", Scalar(T::kI8, int64_t{-100}));
  w.SetValue("u16", Scalar(T::kU16, uint64_t{60000}));
  w.SetValue("i16", Scalar(T::kI16, int64_t{-30000}));
  w.SetU32("u32", 4000000000u);
  w.SetI32("i32", -2000000000);
  w.SetValue("u64", Scalar(T::kU64, uint64_t{18000000000000000000ull}));
  w.SetValue("i64", Scalar(T::kI64, int64_t{-9000000000000000000ll}));
  w.SetF32("f32", 0.25f);
  w.SetValue("f64", Scalar(T::kF64, 1.0 / 3.0));
  w.SetBool("bool", true);
  w.SetString("str", std::string("h\xc3\xa9llo\0x", 8));
  w.SetValue("arr_i32",
             Array(T::kI32, {Scalar(T::kI32, int64_t{-1}), Scalar(T::kI32, int64_t{7})}));
  w.SetValue("arr_u8", Array(T::kU8, {Scalar(T::kU8, uint64_t{255})}));
  w.SetValue("arr_f64", Array(T::kF64, {Scalar(T::kF64, 2.5)}));
  w.SetValue("arr_bool", Array(T::kBool, {Scalar(T::kBool, false), Scalar(T::kBool, true)}));
  w.SetValue("arr_str", Array(T::kString, {Scalar(T::kString, std::string("")),
                                           Scalar(T::kString, std::string("xyz"))}));
  w.SetValue("arr_empty", Array(T::kU64, {}));
  w.SetU32("replaced", 1);
  w.SetU32("replaced", 2);  // replaces in place, keeps position
  w.AddTensor("f32", {3, 2}, GgmlType::kF32, [](uint8_t* dst, size_t n) {
    ASSERT_EQ(n, 24u);
    const float v[6] = {1, 2, 3, 4, 5, 6};
    std::memcpy(dst, v, n);
  });
  w.AddTensor("q8", {64, 3}, GgmlType::kQ8_0, [](uint8_t* dst, size_t n) {
    ASSERT_EQ(n, 2u * 3 * 34);
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(i * 7);
  });
  w.AddTensor("f16.4d", {2, 1, 3, 1}, GgmlType::kF16, nullptr);  // zero-filled
  std::vector<std::pair<size_t, size_t>> calls;
  const std::string path = dir.File("rt.gguf");
  ASSERT_TRUE(w.Write(path, [&](size_t d, size_t t) { calls.emplace_back(d, t); }).ok());
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().first, calls.back().second);
  EXPECT_EQ(calls.front().first, 0u);

  auto r = GgufFile::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  const std::vector<std::string> order = {"u8",       "i8",      "u16",       "i16",     "u32",
                                          "i32",      "u64",     "i64",       "f32",     "f64",
                                          "bool",     "str",     "arr_i32",   "arr_u8",  "arr_f64",
                                          "arr_bool", "arr_str", "arr_empty", "replaced"};
  ASSERT_EQ(f.metadata().size(), order.size());
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(f.metadata()[i].first, order[i]);
  EXPECT_EQ(f.Find("u8")->type, T::kU8);
  EXPECT_EQ(*f.GetInt("u8"), 200);
  EXPECT_EQ(*f.GetInt("i8"), -100);
  EXPECT_EQ(*f.GetInt("u16"), 60000);
  EXPECT_EQ(*f.GetInt("i16"), -30000);
  EXPECT_EQ(*f.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*f.GetInt("i32"), -2000000000);
  EXPECT_FALSE(f.GetInt("u64").ok());  // does not fit int64
  EXPECT_EQ(std::get<uint64_t>(f.Find("u64")->scalar), 18000000000000000000ull);
  EXPECT_EQ(*f.GetInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(*f.GetFloat("f32"), 0.25);
  EXPECT_EQ(f.Find("f32")->type, T::kF32);
  EXPECT_EQ(*f.GetFloat("f64"), 1.0 / 3.0);
  EXPECT_EQ(*f.GetBool("bool"), true);
  EXPECT_EQ(*f.GetString("str"), std::string("h\xc3\xa9llo\0x", 8));
  EXPECT_EQ(*f.GetInt("replaced"), 2);
  const GgufValue* a = f.Find("arr_i32");
  ASSERT_EQ(a->array.size(), 2u);
  EXPECT_EQ(a->array_type, T::kI32);
  int64_t iv;
  ASSERT_TRUE(a->array[0].AsInt64(&iv));
  EXPECT_EQ(iv, -1);
  uint64_t u8v = std::get<uint64_t>(f.Find("arr_u8")->array[0].scalar);
  EXPECT_EQ(u8v, 255u);
  double dv;
  ASSERT_TRUE(f.Find("arr_f64")->array[0].AsDouble(&dv));
  EXPECT_EQ(dv, 2.5);
  bool bv = true;
  ASSERT_TRUE(f.Find("arr_bool")->array[0].AsBool(&bv));
  EXPECT_FALSE(bv);
  std::string sv;
  ASSERT_TRUE(f.Find("arr_str")->array[1].AsString(&sv));
  EXPECT_EQ(sv, "xyz");
  EXPECT_TRUE(f.Find("arr_empty")->is_array());
  EXPECT_TRUE(f.Find("arr_empty")->array.empty());

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensorInfo* t = f.FindTensor("f32");
  EXPECT_EQ(t->dims, (std::vector<int64_t>{3, 2}));
  float v[6];
  std::memcpy(v, t->data, 24);
  EXPECT_EQ(v[5], 6.0f);
  t = f.FindTensor("q8");
  EXPECT_EQ(t->type, GgmlType::kQ8_0);
  ASSERT_EQ(t->nbytes, 204u);
  for (size_t i = 0; i < t->nbytes; ++i) ASSERT_EQ(t->data[i], static_cast<uint8_t>(i * 7));
  t = f.FindTensor("f16.4d");
  EXPECT_EQ(t->dims.size(), 4u);
  EXPECT_EQ(t->nbytes, 12u);
  for (const GgufTensorInfo& ti : f.tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ti.data) % 32, 0u) << ti.name;
  }
  // No temporary files are left behind.
  const auto files =
      std::distance(fs::directory_iterator(fs::path(path).parent_path()), fs::directory_iterator());
  EXPECT_EQ(files, 1);
}

TEST(GgufWriter, CustomAlignmentAndErrors) {
  TempDir dir;
  std::vector<uint8_t> img = SmallFile(dir, 64);
  auto r = GgufFile::FromMemory(img.data(), img.size());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ(*(*r)->GetInt("general.alignment"), 64);
  for (const GgufTensorInfo& t : (*r)->tensors()) EXPECT_EQ((t.data - img.data()) % 64, 0);

  GgufWriter bad(48);
  EXPECT_FALSE(bad.Write(dir.File("bad.gguf")).ok());
  GgufWriter dup;
  dup.AddTensor("x", {4}, GgmlType::kF32, nullptr);
  dup.AddTensor("x", {4}, GgmlType::kF32, nullptr);
  EXPECT_FALSE(dup.Write(dir.File("dup.gguf")).ok());
  GgufWriter blk;
  blk.AddTensor("x", {33}, GgmlType::kQ8_0, nullptr);
  EXPECT_FALSE(blk.Write(dir.File("blk.gguf")).ok());
  GgufWriter nested;
  nested.SetValue("n", Array(GgufValueType::kArray, {}));
  EXPECT_FALSE(nested.Write(dir.File("nested.gguf")).ok());
  GgufWriter unwritable;
  EXPECT_EQ(unwritable.Write("/nonexistent/dir/x.gguf").code(), StatusCode::kIoError);
  EXPECT_FALSE(fs::exists(dir.File("bad.gguf")));
  EXPECT_FALSE(fs::exists(dir.File("dup.gguf")));
}

// Hand-built images for the specific corruptions the parser must name.
class Image {
 public:
  Image(uint64_t n_tensors, uint64_t n_kv) {
    Bytes("GGUF", 4);
    U32(3);
    U64(n_tensors);
    U64(n_kv);
  }
  Image& U32(uint32_t v) { return Bytes(&v, 4); }
  Image& U64(uint64_t v) { return Bytes(&v, 8); }
  Image& Str(const std::string& s) {
    U64(s.size());
    return Bytes(s.data(), s.size());
  }
  Image& Bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    data_.insert(data_.end(), b, b + n);
    return *this;
  }
  Image& Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                uint64_t offset) {
    Str(name);
    U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    U32(type);
    return U64(offset);
  }
  Image& Pad(size_t total) {
    data_.resize(std::max(total, data_.size()), 0);
    return *this;
  }
  void Write(const std::string& path) const { WriteAll(path, data_.data(), data_.size()); }
  Status Parse() const {
    auto r = GgufFile::FromMemory(data_.data(), data_.size(), "x.gguf");
    if (r.ok()) {
      ExpectConsistent(**r, data_.data(), data_.size());
      return Status::Ok();
    }
    EXPECT_EQ(r.status().message().rfind("x.gguf: ", 0), 0u);
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
    return r.status();
  }

 private:
  std::vector<uint8_t> data_;
};

void ExpectError(const Image& img, StatusCode code, const std::string& needle) {
  Status s = img.Parse();
  ASSERT_FALSE(s.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(GgufCorrupt, HandBuiltCases) {
  const uint32_t kStr = 8, kArr = 9, kU32 = 4;
  ExpectError(Image(0, uint64_t{1} << 62), StatusCode::kDataLoss, "metadata entries cannot fit");
  ExpectError(Image(uint64_t{1} << 62, 0), StatusCode::kDataLoss, "tensors cannot fit");
  ExpectError(Image(0, 1).U64(uint64_t{1} << 60).Pad(100), StatusCode::kDataLoss,
              "truncated: metadata key 0");
  ExpectError(Image(0, 1).Str("k").U32(kStr).U64(~uint64_t{0}).Pad(100), StatusCode::kDataLoss,
              "truncated: the value of 'k'");
  ExpectError(Image(0, 1).Str("k").U32(kArr).U32(kU32).U64(uint64_t{1} << 61).Pad(100),
              StatusCode::kDataLoss, "array 'k' claims");
  ExpectError(Image(0, 1).Str("k").U32(kArr).U32(kStr).U64(uint64_t{1} << 40).Pad(100),
              StatusCode::kDataLoss, "array 'k' claims");
  ExpectError(Image(0, 1).Str("k").U32(kArr).U32(kArr).U64(0).Pad(100), StatusCode::kUnimplemented,
              "nested array");
  ExpectError(Image(0, 1).Str("k").U32(13).Pad(100), StatusCode::kDataLoss,
              "unknown value type 13");
  ExpectError(Image(0, 1).Str("k").U32(kArr).U32(77).U64(1).Pad(100), StatusCode::kDataLoss,
              "unknown element type 77");
  ExpectError(Image(0, 1).Str("").U32(kU32).U32(1).Pad(100), StatusCode::kDataLoss, "key 0");
  ExpectError(Image(0, 2).Str("k").U32(kU32).U32(1).Str("k").U32(kU32).U32(2).Pad(100),
              StatusCode::kDataLoss, "duplicate key 'k'");
  ExpectError(Image(0, 1).Str("b").U32(7).Bytes("\x05", 1).Pad(100), StatusCode::kDataLoss,
              "bool with value 5");
  ExpectError(Image(0, 1).Str("general.alignment").U32(kU32).U32(48).Pad(100),
              StatusCode::kDataLoss, "not a power of two");
  ExpectError(Image(0, 1).Str("general.alignment").U32(kU32).U32(0).Pad(100), StatusCode::kDataLoss,
              "not a power of two");
  ExpectError(Image(0, 1).Str("general.alignment").U32(kStr).Str("x").Pad(100),
              StatusCode::kDataLoss, "not an integer");

  ExpectError(Image(1, 0).Tensor("t", {}, 0, 0).Pad(200), StatusCode::kDataLoss, "0 dimensions");
  ExpectError(Image(1, 0).Tensor("t", {1, 1, 1, 1, 1}, 0, 0).Pad(200), StatusCode::kDataLoss,
              "5 dimensions");
  ExpectError(Image(1, 0).Tensor("t", {4, 0}, 0, 0).Pad(200), StatusCode::kDataLoss,
              "dimension 1 of size 0");
  ExpectError(Image(1, 0).Tensor("t", {~uint64_t{0}}, 0, 0).Pad(200), StatusCode::kDataLoss,
              "dimension 0");
  ExpectError(Image(1, 0).Tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0).Pad(200),
              StatusCode::kDataLoss, "too many elements");
  ExpectError(Image(1, 0).Tensor("t", {uint64_t{1} << 62}, 0, 0).Pad(200), StatusCode::kDataLoss,
              "too large");
  ExpectError(Image(1, 0).Tensor("t", {4}, 99, 0).Pad(200), StatusCode::kUnimplemented,
              "tensor 't' has unknown type id 99");
  ExpectError(Image(1, 0).Tensor("t", {48}, 8, 0).Pad(200), StatusCode::kDataLoss,
              "not a multiple of its block size 32");
  ExpectError(Image(1, 0).Tensor("t", {4}, 0, 16).Pad(200), StatusCode::kDataLoss,
              "not a multiple of the alignment 32");
  ExpectError(Image(1, 0).Tensor("", {4}, 0, 0).Pad(200), StatusCode::kDataLoss, "tensor 0");
  ExpectError(Image(2, 0).Tensor("t", {4}, 0, 0).Tensor("t", {4}, 0, 32).Pad(300),
              StatusCode::kDataLoss, "duplicate tensor name 't'");
  // Header 24 + tensor entry 8+1+4+8+4+8 = 57 bytes: data starts at 64; 16 bytes end at 80.
  ExpectError(Image(1, 0).Tensor("t", {4}, 0, 0).Pad(79), StatusCode::kDataLoss,
              "truncated: tensor 't' data ends at 80, past the end of the file (79 bytes)");
  EXPECT_TRUE(Image(1, 0).Tensor("t", {4}, 0, 0).Pad(80).Parse().ok());
  ExpectError(Image(1, 0).Tensor("t", {4}, 0, ~uint64_t{31}).Pad(200), StatusCode::kDataLoss,
              "truncated: tensor 't'");
}

// The bad files people meet, written to disk and opened as a model is: one line naming the
// tensor and the problem.
TEST(GgufCorrupt, BadTensorsOnDiskNameTheTensor) {
  TempDir dir;
  const std::string q = "blk.0.attn_q.weight", k = "blk.0.attn_k.weight";
  const uint32_t kQ4_0 = 2, kQ4_K = 12, kQ6_K = 14;
  auto expect = [&](const Image& img, StatusCode code, const std::string& needle) {
    const std::string path = dir.File("bad.gguf");
    img.Write(path);
    auto r = GgufFile::Open(path);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), code) << r.status().message();
    EXPECT_EQ(r.status().message().rfind(path + ": ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  };
  // Header 24 + two tensor entries of 8+19+4+16+4+8 = 59 bytes: data starts at 160.
  auto two = [&](uint32_t q_type, uint64_t k_offset) {
    return Image(2, 0).Tensor(q, {256, 2}, q_type, 0).Tensor(k, {256, 2}, kQ4_K, k_offset);
  };
  Image good = two(kQ4_K, 288);
  good.Pad(160 + 2 * 288);
  good.Write(dir.File("good.gguf"));
  ASSERT_TRUE(GgufFile::Open(dir.File("good.gguf")).ok());

  // (a) Truncated: the last tensor's data runs past the end.
  expect(two(kQ4_K, 288).Pad(160 + 2 * 288 - 1), StatusCode::kDataLoss,
         "truncated: tensor '" + k + "' data ends at 736, past the end of the file (735 bytes)");
  // (b) Sizes that do not match the type and shape: rows a K-quant's 256-element super-blocks
  // or a 32-element block do not divide; a type whose blocks are larger than the data written
  // (Q6_K where Q4_K's 288 bytes were stored: it runs into the next tensor).
  const std::string tq = "tensor '" + q + "'";
  expect(Image(1, 0).Tensor(q, {100, 4}, kQ4_K, 0).Pad(1000), StatusCode::kDataLoss,
         tq + " of type Q4_K has rows of 100 elements, not a multiple of its block size 256");
  expect(Image(1, 0).Tensor(q, {48, 4}, kQ4_0, 0).Pad(1000), StatusCode::kDataLoss,
         tq + " of type Q4_0 has rows of 48 elements, not a multiple of its block size 32");
  expect(two(kQ6_K, 288).Pad(160 + 2 * 420), StatusCode::kDataLoss,
         "tensor '" + q + "' of type Q6_K and shape [256, 2] needs 420 bytes, but tensor '" + k +
             "' begins 288 bytes after it: its size does not match its type and shape");
  // Listed out of order, the same: extents are compared in file order.
  expect(Image(2, 0).Tensor(k, {256, 2}, kQ4_K, 416).Tensor(q, {256, 2}, kQ6_K, 0).Pad(2000),
         StatusCode::kDataLoss, "tensor '" + q + "' of type Q6_K and shape [256, 2] needs 420");
  // (c) A type id no ggml version this engine knows has.
  expect(two(99, 288).Pad(1000), StatusCode::kUnimplemented,
         "tensor '" + q + "' has unknown type id 99");
}

// Every prefix of a small valid file is an error: the data of the last tensor ends the file.
TEST(GgufCorrupt, EveryTruncationOfASmallFile) {
  TempDir dir;
  const std::vector<uint8_t> img = SmallFile(dir);
  ASSERT_TRUE(GgufFile::FromMemory(img.data(), img.size()).ok());
  for (size_t n = 0; n < img.size(); ++n) {
    // A fresh heap copy of exactly n bytes, so that a read past the end is a real overflow.
    std::vector<uint8_t> cut(img.begin(), img.begin() + static_cast<ptrdiff_t>(n));
    auto r = GgufFile::FromMemory(cut.data(), cut.size(), "cut.gguf");
    if (r.ok()) {
      ExpectConsistent(**r, cut.data(), cut.size());
      // Only the zero padding after the last tensor may be cut.
      EXPECT_GE(n, img.size() - 31) << n;
    } else {
      EXPECT_EQ(r.status().message().rfind("cut.gguf: ", 0), 0u);
    }
  }
}

TEST(GgufCorrupt, ByteFlipsOfASmallFile) {
  TempDir dir;
  const std::vector<uint8_t> img = SmallFile(dir);
  auto ok = GgufFile::FromMemory(img.data(), img.size());
  ASSERT_TRUE(ok.ok());
  const size_t header_end = static_cast<size_t>((*ok)->tensors()[0].data - img.data());
  int errors = 0, parsed = 0;
  for (size_t pos = 0; pos < header_end; ++pos) {
    for (int mode = 0; mode < 8; ++mode) {
      std::vector<uint8_t> m = img;
      const uint8_t vals[] = {0x00, 0xff, 0x80, 0x01, 0x7f, 0x20};
      m[pos] = mode < 6 ? vals[mode] : static_cast<uint8_t>(m[pos] ^ (mode == 6 ? 0x01 : 0x40));
      auto r = GgufFile::FromMemory(m.data(), m.size(), "flip.gguf");
      if (r.ok()) {
        ++parsed;
        ExpectConsistent(**r, m.data(), m.size());
      } else {
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(parsed, 0);
}

TEST(GgufCorrupt, TruncatedAndFlippedStories260K) {
  TempDir dir;
  const std::vector<uint8_t> img = ReadAll(kStories);
  ASSERT_EQ(img.size(), 1185376u);
  auto full = GgufFile::FromMemory(img.data(), img.size());
  ASSERT_TRUE(full.ok());
  const size_t header_end = static_cast<size_t>((*full)->tensors()[0].data - img.data());
  std::mt19937_64 rng(12345);
  // Truncations through Open (the mmap path): half inside the metadata, half in the data.
  const std::string path = dir.File("cut.gguf");
  for (int i = 0; i < 200; ++i) {
    const size_t n = i < 100 ? rng() % header_end : rng() % img.size();
    WriteAll(path, img.data(), n);
    auto r = GgufFile::Open(path);
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().message().rfind(path + ": ", 0), 0u) << r.status().message();
    if (n > header_end) {
      EXPECT_NE(r.status().message().find("truncated: tensor"), std::string::npos);
    }
  }
  // Byte flips in the header, metadata and tensor table.
  std::vector<uint8_t> m = img;
  for (int i = 0; i < 600; ++i) {
    const size_t pos = i < 64 ? static_cast<size_t>(i) : rng() % header_end;
    const uint8_t old = m[pos];
    m[pos] = static_cast<uint8_t>(i % 3 == 0   ? 0xff
                                  : i % 3 == 1 ? old ^ (1u << (rng() % 8))
                                               : rng());
    auto r = GgufFile::FromMemory(m.data(), m.size(), "flip.gguf");
    if (r.ok()) ExpectConsistent(**r, m.data(), m.size());
    m[pos] = old;
  }
}

}  // namespace
}  // namespace promptcache
