// gpt-oss as data (config.h): what ReadModelConfig makes of synth's tiny-gpt-oss file. The
// forward pass itself is checked against ik_llama.cpp's logits in conformance_test.
#include <gtest/gtest.h>

#include <cmath>

#include "model/model_test_util.h"

namespace promptcache {
namespace {

std::string TinyGptOss(GgmlType type) {
  const std::string p = RemoveAtExit(
      (std::filesystem::temp_directory_path() /
       ("pc_gpt_oss_test_" + std::to_string(getpid()) + "_" + GgmlTypeName(type) + ".gguf"))
          .string());
  SynthOptions o;
  o.preset = "tiny-gpt-oss";
  o.vocab_path = kStories;
  o.type = type;
  o.out_path = p;
  PC_CHECK(Synthesize(o, nullptr).ok());
  return p;
}

// The architecture's conventions and the file's keys: NeoX rotation with YaRN x32 from 256
// positions (head_dim 64, base 150000: the ramp runs from pair 0 to pair 10), a 16-token window
// on even layers, the clamped SwiGLU, post_attention_norm as the FFN's input norm, 8 experts of
// 256, 2 per token.
TEST(GptOss, ConfigFromTheFile) {
  const std::unique_ptr<Model> m = LoadOrDie(TinyGptOss(GgmlType::kQ8_0));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "gpt-oss");
  EXPECT_TRUE(c.rope_halves);
  EXPECT_EQ(c.ffn_activation, FfnActivation::kSwiGluOai);
  EXPECT_TRUE(c.ffn_norm_is_post_attention_norm);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_sliding, (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_ff_exp, 256);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_scaling, "yarn");
  EXPECT_EQ(c.rope_scaled_context, 256 * 32);
  EXPECT_FLOAT_EQ(c.rope_mscale, 1.0f + 0.1f * std::log(32.0f));
  ASSERT_EQ(c.inv_freq.size(), 32u);
  auto base = [](int i) { return std::pow(150000.0, -2.0 * i / 64); };
  EXPECT_FLOAT_EQ(c.inv_freq[0], base(0));                     // extrapolated: kept
  EXPECT_FLOAT_EQ(c.inv_freq[5], base(5) * (0.5 / 32 + 0.5));  // halfway up the ramp
  EXPECT_FLOAT_EQ(c.inv_freq[10], base(10) / 32);              // interpolated: slowed
  EXPECT_FLOAT_EQ(c.inv_freq[31], base(31) / 32);
  // Every layer binds its biases and sinks (the file has them; the load checks their shapes).
  const GgufFile& f = m->file();
  for (const char* name :
       {"blk.3.attn_sinks.weight", "blk.3.attn_output.bias", "blk.3.ffn_gate_inp.bias",
        "blk.3.ffn_down_exps.bias", "blk.3.post_attention_norm.weight"}) {
    EXPECT_NE(f.FindTensor(name), nullptr) << name;
  }
  EXPECT_EQ(f.FindTensor("blk.0.ffn_norm.weight"), nullptr);
  EXPECT_EQ(f.FindTensor("blk.0.ffn_up_exps.bias")->dims, (std::vector<int64_t>{256, 8}));
}

// The same file with MXFP4 weights (its experts' type in the real models) loads and gives
// finite logits close to the F32 file's: MXFP4's error is large (a quarter of a value at
// worst), so only closeness, not equality.
TEST(GptOss, Mxfp4FileRunsNearTheF32One) {
  const std::unique_ptr<Model> f32 = LoadOrDie(TinyGptOss(GgmlType::kF32));
  const std::unique_ptr<Model> mx = LoadOrDie(TinyGptOss(GgmlType::kMXFP4));
  EXPECT_EQ(mx->weight_type(), GgmlType::kMXFP4);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  Runner a(*f32, KvType::kF32), b(*mx, KvType::kF32);
  const std::vector<float> la = a.Full(ids, Iota(10)), lb = b.Full(ids, Iota(10));
  ASSERT_EQ(la.size(), lb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lb[i])) << i;
    num += (la[i] - lb[i]) * (la[i] - lb[i]);
    den += la[i] * la[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.5);
  std::printf("MXFP4 against F32 logits: relative RMS %.3f\n", std::sqrt(num / den));
}

}  // namespace
}  // namespace promptcache
