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

#include "gguf/gguf_test_util.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

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

}  // namespace
}  // namespace promptcache
