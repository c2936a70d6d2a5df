// GGUF parser against corrupt input: hand-built bad images, every truncation and byte flips of a
// small file and of stories260K. Whatever the bytes, the parser returns an error or a file whose
// every tensor lies inside the image.
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
