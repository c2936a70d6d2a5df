// Writes seed inputs for gguf_fuzz into a folder: small valid GGUF files from GgufWriter (among
// them, for every type of weight_types.h's table, a file with one matrix of it, quantized from
// smooth values, and one file with all of them) and, given a model file, its first 64 KiB (a real
// header and metadata, truncated data).
//   gguf_seed_gen SEED_DIR [MODEL.gguf]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "ops/quant.h"
#include "ops/weight_types.h"

using namespace promptcache;

namespace {

GgufValue Str(const std::string& s) {
  GgufValue v;
  v.type = GgufValueType::kString;
  v.scalar = s;
  return v;
}

bool WriteSmall(const std::string& path, size_t alignment, bool with_tensors) {
  GgufWriter w(alignment);
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 1);
  w.SetI32("i32", -5);
  w.SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetBool("b", true);
  GgufValue tokens;
  tokens.type = GgufValueType::kArray;
  tokens.array_type = GgufValueType::kString;
  tokens.array = {Str("<s>"), Str("a"), Str("bc")};
  w.SetValue("tokenizer.ggml.tokens", tokens);
  GgufValue scores;
  scores.type = GgufValueType::kArray;
  scores.array_type = GgufValueType::kF32;
  for (int i = 0; i < 3; ++i) {
    GgufValue s;
    s.type = GgufValueType::kF32;
    s.scalar = -1.0 * i;
    scores.array.push_back(s);
  }
  w.SetValue("tokenizer.ggml.scores", scores);
  if (with_tensors) {
    auto fill = [](uint8_t* dst, size_t n) {
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(i * 31 + 7);
    };
    w.AddTensor("token_embd.weight", {8, 3}, GgmlType::kF32, fill);
    w.AddTensor("blk.0.attn_q.weight", {32, 2}, GgmlType::kQ8_0, fill);
    w.AddTensor("blk.0.ffn_up.weight", {4, 1, 2}, GgmlType::kF16, fill);
  }
  Status s = w.Write(path);
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return s.ok();
}

// Every weight type the kernels know (ids 0..63 cover ggml's).
std::vector<GgmlType> WeightTypes() {
  std::vector<GgmlType> types;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = static_cast<GgmlType>(id);
    if (FindWeightType(t) != nullptr && QuantizeSupports(t)) types.push_back(t);
  }
  return types;
}

// A [3 x 256] matrix (a panel of 8 rows padded when packed; 256 columns fit every block size)
// of `type` named after it, quantized from a smooth, varied signal.
void AddMatrix(GgufWriter* w, GgmlType type) {
  constexpr int64_t kRows = 3, kCols = 256;
  w->AddTensor("blk.0." + GgmlTypeName(type) + ".weight", {kCols, kRows}, type,
               [type](uint8_t* dst, size_t n) {
                 std::vector<float> row(kCols);
                 const size_t row_bytes = RowBytes(type, kCols);
                 for (int64_t r = 0; r < kRows; ++r) {
                   for (int64_t c = 0; c < kCols; ++c) {
                     row[c] = std::sin(0.1f * c * (r + 1)) * (1.0f + 0.5f * r) - 0.1f * r;
                   }
                   QuantizeRow(type, row.data(), kCols, dst + r * row_bytes);
                 }
               });
}

bool WriteTypes(const std::string& dir) {
  GgufWriter all;
  all.SetString("general.architecture", "llama");
  for (GgmlType type : WeightTypes()) {
    AddMatrix(&all, type);
    GgufWriter one;
    AddMatrix(&one, type);
    if (Status s = one.Write(dir + "/type_" + GgmlTypeName(type) + ".gguf"); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return false;
    }
  }
  Status s = all.Write(dir + "/every_type.gguf");
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return s.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gguf_seed_gen SEED_DIR [MODEL.gguf]\n");
    return 2;
  }
  const std::string dir = argv[1];
  if (!WriteSmall(dir + "/small.gguf", 32, true) ||
      !WriteSmall(dir + "/aligned64.gguf", 64, true) ||
      !WriteSmall(dir + "/metadata_only.gguf", 32, false) || !WriteTypes(dir)) {
    return 1;
  }
  if (argc >= 3) {
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[2]);
      return 1;
    }
    std::vector<char> head(64 * 1024);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream out(dir + "/model_head.gguf", std::ios::binary);
    out.write(head.data(), in.gcount());
    if (!out) return 1;
  }
  return 0;
}
