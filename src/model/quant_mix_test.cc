// The file types and tensor-type rules of quant_mix.h: names and ids, the mixes of the K-quant
// file types layer by layer, the fallbacks for row widths, and agreement with the types that
// llama.cpp's own quantizer chose in the conformance fixtures.
#include "model/quant_mix.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

namespace promptcache {
namespace {

std::vector<int64_t> Dims(std::initializer_list<int64_t> d) { return d; }

QuantFileType Type(const std::string& name) {
  Result<QuantFileType> f = ParseQuantFileType(name);
  PC_CHECK(f.ok());
  return *f;
}

// A Llama-3.2-1B-like model: 16 layers, 32 query heads on 8 KV heads, tied embeddings.
QuantMixModel Llama1B() {
  QuantMixModel m;
  m.n_layer = 16;
  m.n_gqa = 4;
  m.n_attn_v = 16;
  m.has_output = false;
  return m;
}

std::string Blk(int layer, const char* tensor) {
  return "blk." + std::to_string(layer) + "." + tensor + ".weight";
}

TEST(QuantMix, FileTypeNamesAndIds) {
  // llama.h's LLAMA_FTYPE_* ids.
  const std::map<std::string, uint32_t> ids = {
      {"F32", 0},     {"F16", 1},     {"Q4_0", 2},    {"Q4_1", 3},    {"Q8_0", 7},
      {"Q5_0", 8},    {"Q5_1", 9},    {"Q2_K", 10},   {"Q3_K_S", 11}, {"Q3_K_M", 12},
      {"Q3_K_L", 13}, {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16}, {"Q5_K_M", 17},
      {"Q6_K", 18},   {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"BF16", 32},   {"MXFP4", 38}};
  EXPECT_EQ(QuantFileTypeNames().size(), ids.size());
  for (const auto& [name, id] : ids) {
    Result<QuantFileType> f = ParseQuantFileType(name);
    ASSERT_TRUE(f.ok()) << name;
    EXPECT_EQ(f->id, id) << name;
  }
  EXPECT_EQ(Type("q4_k_m").id, 15u);
  EXPECT_EQ(Type("Q4_K").id, 15u);  // llama-quantize's aliases for the _M mixes
  EXPECT_EQ(Type("q3_k").id, 12u);
  EXPECT_EQ(Type("Q5_K").base, GgmlType::kQ5_K);
  Result<QuantFileType> bad = ParseQuantFileType("Q7_K");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown quantization type 'Q7_K'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("Q4_K_M"), std::string::npos);

  EXPECT_EQ(FileTypeIdFor(GgmlType::kQ4_K), 15u);
  EXPECT_EQ(FileTypeIdFor(GgmlType::kQ3_K), 12u);
  EXPECT_EQ(FileTypeIdFor(GgmlType::kQ6_K), 18u);
  EXPECT_EQ(FileTypeIdFor(GgmlType::kIQ4_XS), 30u);
  EXPECT_EQ(FileTypeIdFor(GgmlType::kBF16), 32u);
}

TEST(QuantMix, WhichTensorsAreQuantized) {
  EXPECT_TRUE(IsQuantizableTensor("blk.0.attn_q.weight", Dims({64, 32})));
  EXPECT_TRUE(IsQuantizableTensor("token_embd.weight", Dims({64, 32})));
  EXPECT_TRUE(IsQuantizableTensor("output.weight", Dims({64, 32})));
  EXPECT_FALSE(IsQuantizableTensor("blk.0.attn_norm.weight", Dims({64})));
  EXPECT_FALSE(IsQuantizableTensor("blk.0.attn_norm.weight", Dims({64, 32})));  // norms never
  EXPECT_FALSE(IsQuantizableTensor("rope_freqs.weight", Dims({64})));
  EXPECT_FALSE(IsQuantizableTensor("blk.0.ffn_gate_inp.weight", Dims({64, 32})));
  EXPECT_FALSE(IsQuantizableTensor("blk.0.attn_q.bias", Dims({64, 32})));
  // Trailing 1s are no dimension (ggml_n_dims): a [n_embd, 1] gate is a vector.
  EXPECT_FALSE(IsQuantizableTensor("blk.0.ffn_gate_inp_shexp.weight", Dims({64, 1})));
  EXPECT_FALSE(IsQuantizableTensor("blk.0.ffn_gate_inp_shexp.weight", Dims({64, 1, 1})));
  EXPECT_TRUE(IsQuantizableTensor("blk.0.ffn_gate_inp_shexp.weight", Dims({64, 2})));
  EXPECT_TRUE(IsQuantizableTensor("blk.0.ffn_gate_exps.weight", Dims({64, 32, 1, 8})));
}

// Q4_K_M: the output (here the tied embedding) Q6_K; attn_v and ffn_down Q6_K in the first and
// last eighth of the layers and every third layer between; everything else Q4_K.
TEST(QuantMix, Q4_K_M) {
  const QuantFileType f = Type("Q4_K_M");
  const QuantMixModel m = Llama1B();
  EXPECT_EQ(MixTensorType(f, m, "token_embd.weight", 2048), GgmlType::kQ6_K);
  const std::set<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int l = 0; l < 16; ++l) {
    const GgmlType up = more.count(l) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    EXPECT_EQ(MixTensorType(f, m, Blk(l, "attn_v"), 2048), up) << l;
    EXPECT_EQ(MixTensorType(f, m, Blk(l, "ffn_down"), 8192), up) << l;
    for (const char* t : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
      EXPECT_EQ(MixTensorType(f, m, Blk(l, t), 2048), GgmlType::kQ4_K) << l << " " << t;
    }
  }
  // With its own output matrix the embedding stays Q4_K.
  QuantMixModel untied = m;
  untied.has_output = true;
  EXPECT_EQ(MixTensorType(f, untied, "token_embd.weight", 2048), GgmlType::kQ4_K);
  EXPECT_EQ(MixTensorType(f, untied, "output.weight", 2048), GgmlType::kQ6_K);
}

TEST(QuantMix, LowBitMixes) {
  QuantMixModel m = Llama1B();
  const QuantFileType q2 = Type("Q2_K");
  EXPECT_EQ(MixTensorType(q2, m, Blk(3, "attn_v"), 2048), GgmlType::kQ4_K);  // 4 queries per KV
  EXPECT_EQ(MixTensorType(q2, m, Blk(3, "ffn_down"), 8192), GgmlType::kQ3_K);
  EXPECT_EQ(MixTensorType(q2, m, Blk(3, "attn_output"), 2048), GgmlType::kQ3_K);
  EXPECT_EQ(MixTensorType(q2, m, Blk(3, "ffn_up"), 2048), GgmlType::kQ2_K);
  const QuantFileType q3m = Type("Q3_K_M");
  EXPECT_EQ(MixTensorType(q3m, m, Blk(1, "attn_v"), 2048), GgmlType::kQ5_K);
  EXPECT_EQ(MixTensorType(q3m, m, Blk(2, "attn_v"), 2048), GgmlType::kQ4_K);
  EXPECT_EQ(MixTensorType(q3m, m, Blk(0, "ffn_down"), 8192), GgmlType::kQ5_K);  // < 16 / 16
  EXPECT_EQ(MixTensorType(q3m, m, Blk(1, "ffn_down"), 8192), GgmlType::kQ4_K);
  EXPECT_EQ(MixTensorType(q3m, m, Blk(1, "attn_output"), 2048), GgmlType::kQ4_K);
  EXPECT_EQ(MixTensorType(q3m, m, Blk(1, "attn_q"), 2048), GgmlType::kQ3_K);
  const QuantFileType q3s = Type("Q3_K_S");
  EXPECT_EQ(MixTensorType(q3s, m, Blk(1, "attn_v"), 2048), GgmlType::kQ3_K);
  EXPECT_EQ(MixTensorType(q3s, m, "token_embd.weight", 2048), GgmlType::kQ6_K);
  m.n_gqa = 1;
  EXPECT_EQ(MixTensorType(q2, m, Blk(3, "attn_v"), 2048), GgmlType::kQ3_K);
  EXPECT_EQ(MixTensorType(Type("IQ4_XS"), m, Blk(3, "attn_v"), 2048), GgmlType::kIQ4_XS);
  m.n_gqa = 4;
  EXPECT_EQ(MixTensorType(Type("IQ4_XS"), m, Blk(3, "attn_v"), 2048), GgmlType::kQ5_K);
  EXPECT_EQ(MixTensorType(Type("IQ4_NL"), m, Blk(1, "ffn_down"), 8192), GgmlType::kQ5_K);
  EXPECT_EQ(MixTensorType(Type("IQ4_NL"), m, Blk(2, "ffn_down"), 8192), GgmlType::kIQ4_NL);
  EXPECT_EQ(MixTensorType(Type("Q4_K_S"), m, Blk(3, "attn_v"), 2048), GgmlType::kQ5_K);
  EXPECT_EQ(MixTensorType(Type("Q4_K_S"), m, Blk(4, "attn_v"), 2048), GgmlType::kQ4_K);
}

TEST(QuantMix, LegacyAndFloatTypes) {
  const QuantMixModel m = Llama1B();
  EXPECT_EQ(MixTensorType(Type("Q4_0"), m, "token_embd.weight", 2048), GgmlType::kQ6_K);
  EXPECT_EQ(MixTensorType(Type("Q4_0"), m, Blk(0, "attn_v"), 2048), GgmlType::kQ4_0);
  EXPECT_EQ(MixTensorType(Type("Q8_0"), m, "token_embd.weight", 2048), GgmlType::kQ8_0);
  for (const char* f : {"F32", "F16", "BF16"}) {
    EXPECT_EQ(MixTensorType(Type(f), m, "token_embd.weight", 2048), Type(f).base) << f;
    EXPECT_EQ(MixTensorType(Type(f), m, Blk(0, "ffn_down"), 100), Type(f).base) << f;
  }
}

// Widths that 256 does not divide (SmolLM2's 576): llama.cpp's 32-element fallbacks; widths
// that 32 does not divide either: F16.
TEST(QuantMix, FallbackForRowWidth) {
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ4_K, 576), GgmlType::kQ5_0);
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ5_K, 576), GgmlType::kQ5_1);
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ6_K, 576), GgmlType::kQ8_0);
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ2_K, 576), GgmlType::kIQ4_NL);
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ3_K, 576), GgmlType::kIQ4_NL);
  EXPECT_EQ(FallbackForWidth(GgmlType::kIQ4_XS, 576), GgmlType::kIQ4_NL);
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ4_K, 1536), GgmlType::kQ4_K);
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ4_K, 172), GgmlType::kF16);
  EXPECT_EQ(FallbackForWidth(GgmlType::kQ4_0, 172), GgmlType::kF16);
  EXPECT_EQ(FallbackForWidth(GgmlType::kF32, 172), GgmlType::kF32);
  const QuantMixModel m = Llama1B();
  // The output rule picks Q8_0 straight away for such widths.
  EXPECT_EQ(MixTensorType(Type("Q4_K_M"), m, "token_embd.weight", 576), GgmlType::kQ8_0);
  EXPECT_EQ(MixTensorType(Type("Q4_K_M"), m, Blk(0, "attn_v"), 576), GgmlType::kQ8_0);
  EXPECT_EQ(MixTensorType(Type("Q4_K_M"), m, Blk(2, "attn_v"), 576), GgmlType::kQ5_0);
}

// Mixtures of experts, as llama.cpp's quantizer types them: expert tensors by their dense
// namesakes' rules and the layer in their name; and for exactly 8 experts (Mixtral) attn_k and
// attn_v Q8_0 and attn_output Q5_K in the lower mixes (Q3_K_L keeps its base type there).
// llama-quantize (c392e509) on tiny-mixtral and ik_llama.cpp's on tiny-qwen3moe (both F32, 8
// experts) chose the type `promptcache quantize` chooses for each of their 43 and 51 tensors in
// Q4_K_M, Q8_0 and (tiny-mixtral) Q3_K_M. (Mutations tried: the attn_k rule or the 8-expert
// attn_output rule left out; each fails here.)
TEST(QuantMix, MixtureOfExperts) {
  QuantMixModel mixtral;
  mixtral.n_layer = 32;
  mixtral.n_gqa = 4;
  mixtral.n_attn_v = 32;
  mixtral.n_expert = 8;
  const QuantFileType q4km = Type("Q4_K_M");
  const std::set<int> more = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(MixTensorType(q4km, mixtral, Blk(l, "attn_v"), 4096), GgmlType::kQ8_0) << l;
    EXPECT_EQ(MixTensorType(q4km, mixtral, Blk(l, "attn_k"), 4096), GgmlType::kQ8_0) << l;
    EXPECT_EQ(MixTensorType(q4km, mixtral, Blk(l, "attn_q"), 4096), GgmlType::kQ4_K) << l;
    EXPECT_EQ(MixTensorType(q4km, mixtral, Blk(l, "attn_output"), 4096), GgmlType::kQ5_K) << l;
    EXPECT_EQ(MixTensorType(q4km, mixtral, Blk(l, "ffn_down_exps"), 14336),
              more.count(l) ? GgmlType::kQ6_K : GgmlType::kQ4_K)
        << l;
    EXPECT_EQ(MixTensorType(q4km, mixtral, Blk(l, "ffn_gate_exps"), 4096), GgmlType::kQ4_K) << l;
    EXPECT_EQ(MixTensorType(q4km, mixtral, Blk(l, "ffn_up_exps"), 4096), GgmlType::kQ4_K) << l;
  }
  EXPECT_EQ(MixTensorType(Type("Q3_K_L"), mixtral, Blk(5, "attn_output"), 4096), GgmlType::kQ3_K);
  EXPECT_EQ(MixTensorType(Type("Q4_0"), mixtral, Blk(5, "attn_v"), 4096), GgmlType::kQ8_0);
  EXPECT_EQ(MixTensorType(Type("Q6_K"), mixtral, Blk(5, "attn_output"), 4096), GgmlType::kQ6_K);
  EXPECT_FALSE(
      IsQuantizableTensor("blk.0.ffn_gate_inp.weight", Dims({64, 32})));  // routers stay F32
  EXPECT_TRUE(IsQuantizableTensor("blk.0.ffn_gate_exps.weight", Dims({64, 32, 8})));

  // 128 experts (Qwen3-30B-A3B): the dense rules.
  QuantMixModel qwen = mixtral;
  qwen.n_layer = qwen.n_attn_v = 48;
  qwen.n_gqa = 8;
  qwen.n_expert = 128;
  EXPECT_EQ(MixTensorType(q4km, qwen, Blk(0, "attn_v"), 2048), GgmlType::kQ6_K);
  EXPECT_EQ(MixTensorType(q4km, qwen, Blk(7, "attn_v"), 2048), GgmlType::kQ4_K);
  EXPECT_EQ(MixTensorType(q4km, qwen, Blk(7, "attn_k"), 2048), GgmlType::kQ4_K);
  EXPECT_EQ(MixTensorType(q4km, qwen, Blk(7, "attn_output"), 4096), GgmlType::kQ4_K);
  EXPECT_EQ(MixTensorType(q4km, qwen, Blk(47, "ffn_down_exps"), 768), GgmlType::kQ6_K);
  EXPECT_EQ(MixTensorType(q4km, qwen, Blk(7, "ffn_down_exps"), 768), GgmlType::kQ4_K);
}

// llama.cpp's quantizer wrote the conformance fixtures (4 layers, 4 query heads on 2 KV heads,
// tied embeddings): the rules here choose the type it chose for every tensor of every file.
TEST(QuantMix, SameTypesAsLlamaCppFixtures) {
  const std::string dir = std::string(PC_SHARED_DIR) + "/models/conformance/";
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q4_k_m", "q5_k_m",
                           "q6_k", "iq4_nl", "iq4_xs"}) {
    auto file = GgufFile::Open(dir + "tiny-" + name + ".gguf");
    ASSERT_TRUE(file.ok()) << file.status().message();
    const QuantFileType f = Type(name);
    ASSERT_EQ(*(*file)->GetInt("general.file_type"), f.id) << name;
    const QuantMixModel m = QuantMixModelFromGguf(**file);
    EXPECT_EQ(m.n_layer, 4);
    EXPECT_EQ(m.n_gqa, 2);
    EXPECT_FALSE(m.has_output);
    int quantized = 0;
    for (const GgufTensorInfo& t : (*file)->tensors()) {
      if (!IsQuantizableTensor(t.name, t.dims)) {
        EXPECT_EQ(t.type, GgmlType::kF32) << name << " " << t.name;
        continue;
      }
      ++quantized;
      EXPECT_EQ(MixTensorType(f, m, t.name, t.dims[0]), t.type)
          << name << " " << t.name << ": llama.cpp chose " << GgmlTypeName(t.type);
    }
    EXPECT_EQ(quantized, 29) << name;
  }
}

}  // namespace
}  // namespace promptcache
