// The weight formats against llama.cpp's own definitions, not against this code's: the type ids,
// block sizes and the IQ4 grid are copied here from llama.cpp's source (commit c392e509:
// ggml/include/ggml.h, ggml/src/ggml-common.h, ggml/src/ggml-quants.c; MXFP4's, which that
// commit predates, from ik_llama.cpp 8337e4cd's same files), and the dequantized
// values of every K-quant and 32-element type come from llama.cpp itself (testdata/llama_dequant:
// its quantizer's conversion of the conformance fixtures to F32). The other ops tests compare
// the kernels with this code's reference dequantization, which reads the same tables as the
// kernels: an entry changed in both would pass them all; here it fails.
//
// Mutations tried: kIQ4Values[7] (-10) changed to -9 in quant_blocks.h, and kIQ4Values[15] (113)
// to 114: Iq4Grid* fail at every element with that index (by 1 unit of d, in the decoder and in
// the kernels), and DequantizationMatchesLlamaCpp fails for IQ4_NL and IQ4_XS (its comment has the
// counts); quantize_test, quant_test and matmul_test pass under both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "gguf/gguf.h"
#include "ops/matmul.h"
#include "ops/ops_test_util.h"
#include "ops/packed.h"
#include "ops/quant.h"
#include "ops/targets.h"
#include "ops/weight_types.h"

namespace promptcache {
namespace {

// ggml-quants.c: kvalues_iq4nl, the values IQ4_NL's and IQ4_XS's 4-bit indices stand for.
constexpr int8_t kLlamaIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

// ggml.h's type ids (what a GGUF file stores) and ggml-common.h's block sizes (QK4_0 = 32,
// QK_K = 256, K_SCALE_SIZE = 12; the byte counts are its static_asserts' sums, e.g. block_q2_K:
// 2 halves + QK_K/16 scales + QK_K/4 quants).
struct LlamaType {
  GgmlType type;
  uint32_t id;
  int block_elems, block_bytes;
};
constexpr LlamaType kLlamaTypes[] = {
    {GgmlType::kF32, 0, 1, 4},
    {GgmlType::kF16, 1, 1, 2},
    {GgmlType::kQ4_0, 2, 32, 2 + 16},
    {GgmlType::kQ4_1, 3, 32, 4 + 16},
    {GgmlType::kQ5_0, 6, 32, 2 + 4 + 16},
    {GgmlType::kQ5_1, 7, 32, 4 + 4 + 16},
    {GgmlType::kQ8_0, 8, 32, 2 + 32},
    {GgmlType::kQ2_K, 10, 256, 4 + 16 + 64},
    {GgmlType::kQ3_K, 11, 256, 2 + 64 + 32 + 12},
    {GgmlType::kQ4_K, 12, 256, 4 + 12 + 128},
    {GgmlType::kQ5_K, 13, 256, 4 + 12 + 128 + 32},
    {GgmlType::kQ6_K, 14, 256, 2 + 16 + 192},
    {GgmlType::kIQ4_NL, 20, 32, 2 + 16},
    {GgmlType::kIQ4_XS, 23, 256, 2 + 2 + 4 + 128},
    {GgmlType::kBF16, 30, 1, 2},
    // ik_llama.cpp 8337e4cd (llama.cpp has the same id): GGML_TYPE_MXFP4 = 39; block_mxfp4 is
    // one E8M0 byte and QK_MXFP4 / 2 bytes of nibbles.
    {GgmlType::kMXFP4, 39, 32, 1 + 16},
    // ik_llama.cpp 8337e4cd's ggml.h and ggml-common.h (the same in llama.cpp): the low-bit
    // i-quants, e.g. block_iq3_s: a half, QK_K/4 grid bytes, QK_K/32 high bits, QK_K/8 signs
    // and QK_K/64 scales.
    {GgmlType::kIQ2_XXS, 16, 256, 2 + 64},
    {GgmlType::kIQ2_XS, 17, 256, 2 + 64 + 8},
    {GgmlType::kIQ3_XXS, 18, 256, 2 + 96},
    {GgmlType::kIQ1_S, 19, 256, 2 + 32 + 16},
    {GgmlType::kIQ3_S, 21, 256, 2 + 64 + 8 + 32 + 4},
    {GgmlType::kIQ2_S, 22, 256, 2 + 64 + 8 + 8},
    {GgmlType::kIQ1_M, 29, 256, 32 + 16 + 8},
};

// ggml-common.h (ik_llama.cpp 8337e4cd): kvalues_mxfp4, twice the E2M1 value of each code; and
// its dequantization: the code's value times GGML_E8M0_TO_FP32_HALF(e), 2^(e - 127) / 2.
constexpr int8_t kLlamaMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

TEST(GgmlReference, TypeIdsAndBlockSizes) {
  for (const LlamaType& t : kLlamaTypes) {
    const std::string name = GgmlTypeName(t.type);
    EXPECT_EQ(static_cast<uint32_t>(t.type), t.id) << name;
    const GgmlTypeTraits traits = GetTypeTraits(t.type);
    EXPECT_EQ(traits.block_elems, t.block_elems) << name;
    EXPECT_EQ(traits.block_bytes, t.block_bytes) << name;
    const WeightTypeInfo* info = FindWeightType(t.type);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->block_elems, t.block_elems) << name;
    EXPECT_EQ(info->block_bytes, t.block_bytes) << name;
    EXPECT_EQ(RowBytes(t.type, 1024), size_t(1024 / t.block_elems * t.block_bytes)) << name;
  }
}

// Weights (`rows` x `cols` in `type`, stored in `bytes`) through MatMul's kernels on every
// target this CPU has, packed and not, times one-hot activations: output (t, r) is weight
// (r, t), `want(r, t)`, up to the activations' 8-bit scale (one-hot 1.0 quantizes to 127 with
// scale f16(1/127) or 1/127: within 1e-4 relative).
void ExpectOneHotProducts(const std::string& name, GgmlType type, const std::vector<uint8_t>& bytes,
                          int rows, int cols, const std::function<float(int r, int t)>& want) {
  WeightMatrix w{type, bytes.data(), rows, cols, RowBytes(type, cols), nullptr};
  const PackedMatrix packed = PackMatrix(w, nullptr);
  std::vector<float> x(size_t(cols) * cols, 0.0f);
  for (int t = 0; t < cols; ++t) x[size_t(t) * cols + t] = 1.0f;
  for (const bool use_packed : {false, true}) {
    w.packed = use_packed ? &packed : nullptr;
    for (const int64_t target : OpsTargets()) {
      ScopedOpsTarget scoped(target);
      EXPECT_EQ(std::string(MatMulKernelName(w)).rfind("packed", 0) == 0, use_packed) << name;
      std::vector<float> out(size_t(cols) * rows);
      MatMul(w, x.data(), cols, out.data(), nullptr);
      for (int t = 0; t < cols; ++t) {
        for (int r = 0; r < rows; ++r) {
          const float v = want(r, t);
          ASSERT_NEAR(out[size_t(t) * rows + r], v, 1e-4 * std::fabs(v))
              << name << " column " << t << " row " << r << " on " << OpsTargetName(target)
              << (use_packed ? " (packed)" : "");
        }
      }
    }
  }
}

// `got` and `want` (the reference engine's, named `who`) hold the same floats, bit for bit; the
// first three values that differ are named.
void ExpectSameFloats(const std::string& name, const std::vector<float>& got,
                      const std::vector<float>& want, const char* who) {
  ASSERT_EQ(got.size(), want.size()) << name;
  int differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && ++differ <= 3) {
      ADD_FAILURE() << name << " value " << i << ": " << got[i] << ", " << who << " " << want[i];
    }
  }
  EXPECT_EQ(differ, 0) << name << ": values differing from " << who << "'s";
}

// An IQ4_NL block with d = 1: element j (j < 16) indexes j, element j + 16 indexes 15 - j.
std::vector<uint8_t> Iq4NlBlock() {
  std::vector<uint8_t> b(18);
  const uint16_t one = F32ToF16(1.0f);
  std::memcpy(b.data(), &one, 2);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  return b;
}
float Iq4NlExpected(int e) { return kLlamaIq4nl[e < 16 ? e : 31 - e]; }

// An IQ4_XS super-block with d = 1 and group g's 6-bit scale 33 + g (stored minus 32: 1 + g;
// low 4 bits in scales_l, nibble g % 2 of byte g / 2; top 2 bits in scales_h, bits 2g..2g+1);
// element j of group g indexes (j + g) % 16, element 16 + j indexes 15 - j.
std::vector<uint8_t> Iq4XsBlock() {
  std::vector<uint8_t> b(136, 0);
  const uint16_t one = F32ToF16(1.0f);
  std::memcpy(b.data(), &one, 2);
  uint16_t scales_h = 0;
  for (int g = 0; g < 8; ++g) {
    const int ls = 33 + g;
    b[4 + g / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (g % 2)));
    scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * g));
    for (int j = 0; j < 16; ++j)
      b[8 + 16 * g + j] = static_cast<uint8_t>((j + g) % 16 | (15 - j) << 4);
  }
  std::memcpy(b.data() + 2, &scales_h, 2);
  return b;
}
float Iq4XsExpected(int e) {
  const int g = e / 32, j = e % 32;
  return static_cast<float>(1 + g) * kLlamaIq4nl[j < 16 ? (j + g) % 16 : 31 - j];
}

TEST(GgmlReference, Iq4GridInTheDecoders) {
  std::vector<float> got(256);
  const std::vector<uint8_t> nl = Iq4NlBlock();
  DequantizeRow(GgmlType::kIQ4_NL, nl.data(), 32, got.data());
  for (int e = 0; e < 32; ++e) EXPECT_EQ(got[e], Iq4NlExpected(e)) << "IQ4_NL element " << e;
  const std::vector<uint8_t> xs = Iq4XsBlock();
  DequantizeRow(GgmlType::kIQ4_XS, xs.data(), 256, got.data());
  for (int e = 0; e < 256; ++e) EXPECT_EQ(got[e], Iq4XsExpected(e)) << "IQ4_XS element " << e;
}

// The same blocks through MatMul's kernels on every target this CPU has: 8 rows of 8 (IQ4_NL)
// or 1 (IQ4_XS) blocks times one-hot activations, so output (t, r) is weight (r, t) up to the
// activations' 8-bit scale (one-hot 1.0 quantizes to 127 with scale f16(1/127) or 1/127: within
// 1e-4 relative), while a grid value off by one unit is off by at least 1 / 113.
TEST(GgmlReference, Iq4GridInTheKernels) {
  for (const GgmlType type : {GgmlType::kIQ4_NL, GgmlType::kIQ4_XS}) {
    const bool nl = type == GgmlType::kIQ4_NL;
    const std::vector<uint8_t> block = nl ? Iq4NlBlock() : Iq4XsBlock();
    constexpr int kRows = 8, kCols = 256;
    std::vector<uint8_t> bytes;
    for (int r = 0; r < kRows; ++r) {
      for (int b = 0; b < kCols / (nl ? 32 : 256); ++b) {
        bytes.insert(bytes.end(), block.begin(), block.end());
      }
    }
    ExpectOneHotProducts(GgmlTypeName(type), type, bytes, kRows, kCols, [nl](int, int t) {
      return nl ? Iq4NlExpected(t % 32) : Iq4XsExpected(t);
    });
  }
}

// MXFP4: 8 blocks with exponents from the subnormal end to the top of f32's range (0, 1, 2,
// 100, 127, 128, 150, 254), element j (j < 16) code j, element j + 16 code 15 - j: in the
// decoder, every value exactly ggml's; through the kernels, 8 rows of such rows times one-hot
// activations (every row's block b: exponent 120 + b, within the activations' range), packed and
// not.
TEST(GgmlReference, Mxfp4BlocksAsGgmlDefinesThem) {
  constexpr int kCols = 256, kRows = 8;
  const auto block = [](uint8_t e) {
    std::vector<uint8_t> b(17);
    b[0] = e;
    for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
    return b;
  };
  const auto want = [](uint8_t e, int j) {
    return static_cast<float>(std::ldexp(kLlamaMxfp4[j < 16 ? j : 31 - j], e - 128));
  };
  const uint8_t exps[8] = {0, 1, 2, 100, 127, 128, 150, 254};
  std::vector<float> got(32);
  for (const uint8_t e : exps) {
    const std::vector<uint8_t> b = block(e);
    DequantizeRow(GgmlType::kMXFP4, b.data(), 32, got.data());
    for (int j = 0; j < 32; ++j)
      EXPECT_EQ(got[j], want(e, j)) << "e " << int{e} << " element " << j;
  }
  std::vector<uint8_t> bytes;
  for (int r = 0; r < kRows; ++r) {
    for (int b = 0; b < kCols / 32; ++b) {
      const std::vector<uint8_t> blk = block(static_cast<uint8_t>(120 + b));
      bytes.insert(bytes.end(), blk.begin(), blk.end());
    }
  }
  ExpectOneHotProducts("MXFP4", GgmlType::kMXFP4, bytes, kRows, kCols, [&want](int, int t) {
    return want(static_cast<uint8_t>(120 + t / 32), t % 32);
  });
}

// Q8_0 (block_q8_0 in ggml-common.h: an f16 scale, then 32 int8 quants; the value is quant
// times scale): no conformance fixture holds it, so the test makes the blocks. 8 blocks with
// d = 0.5 hold every int8 once, in the decoder and through the kernels (one-hot activations).
// A quant decoded one unit off (5 read as 6) moves conformance_test's q8_0 distance to max
// 0.0206, mean 0.0038 (just over its mean bound, 0.00362); here it fails at the 5.
TEST(GgmlReference, Q8_0IsInt8TimesScale) {
  constexpr int kCols = 256;
  std::vector<uint8_t> row(kCols / 32 * 34);
  const uint16_t half = F32ToF16(0.5f);
  for (int b = 0; b < kCols / 32; ++b) {
    std::memcpy(&row[34 * b], &half, 2);
    for (int j = 0; j < 32; ++j)
      row[34 * b + 2 + j] = static_cast<uint8_t>(32 * b + j);  // 0..127, -128..-1
  }
  const auto want = [](int e) { return 0.5f * static_cast<int8_t>(static_cast<uint8_t>(e)); };
  std::vector<float> got(kCols);
  DequantizeRow(GgmlType::kQ8_0, row.data(), kCols, got.data());
  for (int e = 0; e < kCols; ++e) EXPECT_EQ(got[e], want(e)) << "Q8_0 element " << e;

  constexpr int kRows = 8;
  std::vector<uint8_t> bytes;
  for (int r = 0; r < kRows; ++r) bytes.insert(bytes.end(), row.begin(), row.end());
  WeightMatrix w{GgmlType::kQ8_0, bytes.data(), kRows, kCols, row.size(), nullptr};
  const PackedMatrix packed = PackMatrix(w, nullptr);
  w.packed = &packed;
  std::vector<float> x(kCols * kCols, 0.0f);
  for (int t = 0; t < kCols; ++t) x[t * kCols + t] = 1.0f;
  for (const int64_t target : OpsTargets()) {
    ScopedOpsTarget scoped(target);
    EXPECT_EQ(std::string(MatMulKernelName(w)).rfind("packed", 0), 0u);
    std::vector<float> out(kCols * kRows);
    MatMul(w, x.data(), kCols, out.data(), nullptr);
    for (int t = 0; t < kCols; ++t) {
      ASSERT_NEAR(out[t * kRows], want(t), 1e-4 * std::fabs(want(t)))
          << "Q8_0 column " << t << " on " << OpsTargetName(target);
    }
  }
}

// The first 512 values of blk.0.attn_k.weight of a conformance fixture (written by llama.cpp's
// quantizer), dequantized by this code and by llama.cpp (testdata/llama_dequant/README.md): the
// same floats, bit for bit.
//
// With kIQ4Values[7] changed to -9 (mutation above) IQ4_NL and IQ4_XS each differ at 36 of the
// 512 values, by one unit of the block's scale (conformance_test's logits: IQ4_NL max 0.0293,
// mean 0.00522; IQ4_XS 0.0314, 0.00586). With kIQ4Values[15] changed from 113 to 114 the logits
// stay within conformance_test's bounds, old and new (IQ4_NL 0.0211 / 0.00389, IQ4_XS 0.0272 /
// 0.00477); here 14 of the 512 values of each differ.
TEST(GgmlReference, DequantizationMatchesLlamaCpp) {
  const std::pair<GgmlType, const char*> cases[] = {
      {GgmlType::kQ4_0, "tiny-q4_0"},     {GgmlType::kQ4_1, "tiny-q4_1"},
      {GgmlType::kQ5_0, "tiny-q5_0"},     {GgmlType::kQ5_1, "tiny-q5_1"},
      {GgmlType::kIQ4_NL, "tiny-iq4_nl"}, {GgmlType::kIQ4_XS, "tiny-iq4_xs"},
      {GgmlType::kQ2_K, "tiny-q2_k"},     {GgmlType::kQ3_K, "tiny-q3_k_m"},
      {GgmlType::kQ4_K, "tiny-q4_k_m"},   {GgmlType::kQ5_K, "tiny-q5_k_m"},
      {GgmlType::kQ6_K, "tiny-q6_k"}};
  for (const auto& [type, file] : cases) {
    const std::string name = GgmlTypeName(type);
    Result<std::unique_ptr<GgufFile>> f =
        GgufFile::Open(std::string(PC_SHARED_DIR) + "/models/conformance/" + file + ".gguf");
    ASSERT_TRUE(f.ok()) << f.status().message();
    const GgufTensorInfo* t = (*f)->FindTensor("blk.0.attn_k.weight");
    ASSERT_NE(t, nullptr) << file;
    ASSERT_EQ(t->type, type) << file;
    const std::vector<float> want =
        ReadFloats(std::string(PC_SOURCE_DIR) + "/src/ops/testdata/llama_dequant/" + name + ".f32");
    ASSERT_EQ(want.size(), 512u) << name;
    std::vector<float> got(512);
    DequantizeRow(type, t->data, 512, got.data());
    ExpectSameFloats(name, got, want, "llama.cpp");
  }
}

// The low-bit i-quants (no conformance fixture holds them, and this engine has no quantizer for
// them): the stored bytes of the first 1024 values of blk.0.attn_k.weight (4 rows of one
// super-block) in synth's tiny-256 model quantized by ik_llama.cpp's llama-quantize, and
// ik_llama.cpp's own dequantization of them (testdata/llama_dequant/README.md). Decoded here:
// the same floats, bit for bit; through MatMul's kernels on every target, packed and not, with
// one-hot activations: each weight up to the activations' 8-bit scale (1e-4 relative), while a
// codebook entry, sign or scale read wrong moves a value by far more.
//
// Mutations tried, each failing here (matmul_test, which compares the kernels with the same
// decoders, passes all but the last two): the sign parity bit at bit 6 (IQ3_XXS first),
// IQ2_XS's signs read from bit 10, an IQ2_XXS or IQ3_XXS grid row off by one, scales 2s for
// 2s + 1, IQ1's +-1/8 shift flipped, IQ3_S's 9th index bit from its neighbour's, IQ1_M's d
// nibbles 1 and 2 swapped, IQ2_S's signs from the next 8; the packed header holding IQ3_S's LUT
// for every type of the shared kernels, and the K kernels reading the f32 d as f16 (the packed
// one-hot products fail).
TEST(GgmlReference, LowBitIQuantsMatchIkLlamaCpp) {
  for (const GgmlType type :
       {GgmlType::kIQ3_S, GgmlType::kIQ3_XXS, GgmlType::kIQ2_S, GgmlType::kIQ2_XS,
        GgmlType::kIQ2_XXS, GgmlType::kIQ1_M, GgmlType::kIQ1_S}) {
    const std::string name = GgmlTypeName(type);
    const std::string dir = std::string(PC_SOURCE_DIR) + "/src/ops/testdata/llama_dequant/";
    std::ifstream in(dir + name + ".bin", std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    const std::vector<float> want = ReadFloats(dir + name + ".f32");
    constexpr int kRows = 4, kCols = 256;
    ASSERT_EQ(want.size(), size_t{kRows * kCols}) << name;
    ASSERT_EQ(bytes.size(), kRows * RowBytes(type, kCols)) << name;
    std::vector<float> got(kRows * kCols);
    DequantizeRow(type, bytes.data(), kRows * kCols, got.data());
    ExpectSameFloats(name, got, want, "ik_llama.cpp");
    ExpectOneHotProducts(name, type, bytes, kRows, kCols,
                         [&want](int r, int t) { return want[r * kCols + t]; });
  }
}

}  // namespace
}  // namespace promptcache
