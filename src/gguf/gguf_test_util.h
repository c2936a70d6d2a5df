// Helpers shared by the GGUF tests (gguf_test.cc, gguf_corrupt_test.cc): a temporary directory,
// file reads and writes, metadata value builders, a small valid file, and the consistency check a
// parsed file of any bytes must pass.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "core/check.h"
#include "gguf/gguf.h"

namespace promptcache {

inline const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "gguf_test_XXXXXX").string();
    PC_CHECK(::mkdtemp(t.data()) != nullptr);
    path_ = t;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void WriteAll(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
}

inline GgufValue Scalar(GgufValueType t,
                        std::variant<int64_t, uint64_t, double, bool, std::string> v) {
  GgufValue g;
  g.type = t;
  g.scalar = std::move(v);
  return g;
}

inline GgufValue Array(GgufValueType elem, std::vector<GgufValue> items) {
  GgufValue g;
  g.type = GgufValueType::kArray;
  g.array_type = elem;
  g.array = std::move(items);
  return g;
}

// Reads everything a consumer could read from a parsed file and checks that every tensor lies
// inside the image: what a corrupt file must never break.
inline void ExpectConsistent(const GgufFile& f, const uint8_t* base, size_t size) {
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
inline std::vector<uint8_t> SmallFile(const TempDir& dir, size_t alignment = 32) {
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

}  // namespace promptcache
