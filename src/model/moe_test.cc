// Mixture-of-experts routing (moe.h): the experts chosen, their weights, ties, and the grouping
// of a batch's choices by expert. The forward pass that uses them is checked against
// llama.cpp's and ik_llama.cpp's logits in conformance_test (Architectures/SynthReference,
// qwen3moe and mixtral).
#include "model/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/model_test_util.h"
#include "model/synth.h"

namespace promptcache {
namespace {

// Softmax over all experts, the k most probable, renormalized to sum 1. (Mutations tried:
// weights left as the probabilities, not renormalized; the selection by `>=`, which takes the
// later of tied experts; each fails here.)
TEST(RouteToken, TopKOfTheSoftmaxRenormalized) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f, -1.0f};
  int32_t ids[2];
  float w[2];
  RouteToken(logits.data(), 5, 2, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  double z = 0;
  for (float x : {1.0, 3.0, 2.0, 0.0, -1.0}) z += std::exp(x);
  EXPECT_NEAR(logits[1], std::exp(3.0) / z, 1e-6);  // the logits became the probabilities
  EXPECT_NEAR(logits[4], std::exp(-1.0) / z, 1e-6);
  const double e3 = std::exp(3.0), e2 = std::exp(2.0);
  EXPECT_NEAR(w[0], e3 / (e3 + e2), 1e-6);
  EXPECT_NEAR(w[1], e2 / (e3 + e2), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
}

// Ties go to the lower expert index, at the top and at the last place taken.
TEST(RouteToken, TiesGoToTheLowerIndex) {
  std::vector<float> logits = {0.5f, 2.0f, 0.5f, 2.0f, 1.0f};
  int32_t ids[4];
  float w[4];
  RouteToken(logits.data(), 5, 4, ids, w);
  EXPECT_EQ(std::vector<int32_t>(ids, ids + 4), (std::vector<int32_t>{1, 3, 4, 0}));
  EXPECT_EQ(w[0], w[1]);
  logits = {1.0f, 0.5f, 1.0f, 0.5f};
  RouteToken(logits.data(), 4, 1, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(w[0], 1.0f);
  logits = {1.0f, 0.5f, 1.0f, 0.5f};
  RouteToken(logits.data(), 4, 3, ids, w);
  EXPECT_EQ(std::vector<int32_t>(ids, ids + 3), (std::vector<int32_t>{0, 2, 1}));
}

// Qwen2-MoE's routing: the same choice, the weights the chosen experts' probabilities as they
// are. (Mutation tried: RouteToken ignoring `normalize`, renormalizing always: fails here.)
TEST(RouteToken, WithoutRenormalizingTheWeightsAreTheProbabilities) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f, -1.0f};
  int32_t ids[2];
  float w[2];
  RouteToken(logits.data(), 5, 2, ids, w, /*normalize=*/false);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  double z = 0;
  for (float x : {1.0, 3.0, 2.0, 0.0, -1.0}) z += std::exp(x);
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
  EXPECT_EQ(w[0], logits[1]);
  EXPECT_LT(w[0] + w[1], 0.95f);
}

// Every expert used: weights are the whole softmax.
TEST(RouteToken, AllExpertsUsed) {
  std::vector<float> logits = {0.0f, 1.0f};
  int32_t ids[2];
  float w[2];
  RouteToken(logits.data(), 2, 2, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 0);
  EXPECT_NEAR(w[0], std::exp(1.0) / (1 + std::exp(1.0)), 1e-6);
}

// Three tokens' two choices each, grouped by expert in token order; expert 3 has none.
TEST(GroupByExpert, RowsByExpertInTokenOrder) {
  const int32_t ids[] = {2, 0, 0, 1, 2, 1};
  ExpertGroups g;
  GroupByExpert(ids, 3, 2, 4, &g);
  EXPECT_EQ(g.first, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(g.count, (std::vector<int64_t>{2, 2, 2, 0}));
  EXPECT_EQ(g.row_token, (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(g.choice_row, (std::vector<int32_t>{4, 0, 1, 2, 5, 3}));
  // Reused for a smaller batch: nothing left over.
  const int32_t one[] = {3, 1};
  GroupByExpert(one, 1, 2, 4, &g);
  EXPECT_EQ(g.first, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(g.count, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(g.row_token, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(g.choice_row, (std::vector<int32_t>{1, 0}));
}

// A copy of the GGUF file `src` with `edit` applied to the writer after the keys are copied
// (those for which `keep_key` is false dropped), tensors for which `keep` is false dropped and
// `dims` changing a tensor's declared shape (its bytes kept: the new shape must hold as many).
struct Rewrite {
  std::function<void(GgufWriter*)> edit = [](GgufWriter*) {};
  std::function<bool(const std::string&)> keep_key = [](const std::string&) { return true; };
  std::function<bool(const std::string&)> keep = [](const std::string&) { return true; };
  std::function<void(const std::string&, std::vector<int64_t>*)> dims =
      [](const std::string&, std::vector<int64_t>*) {};
};

std::string Rewritten(const std::string& src, const Rewrite& r, const std::string& tag) {
  std::unique_ptr<GgufFile> f = GgufFile::Open(src).value();
  GgufWriter w;
  for (const auto& [key, value] : f->metadata()) {
    if (r.keep_key(key)) w.SetValue(key, value);
  }
  r.edit(&w);
  for (const GgufTensorInfo& t : f->tensors()) {
    if (!r.keep(t.name)) continue;
    std::vector<int64_t> dims = t.dims;
    r.dims(t.name, &dims);
    const uint8_t* data = t.data;
    w.AddTensor(t.name, dims, t.type,
                [data](uint8_t* dst, size_t n) { std::memcpy(dst, data, n); });
  }
  const std::string path = RemoveAtExit(
      (std::filesystem::temp_directory_path() / ("pc_moe_" + std::to_string(getpid()) + tag))
          .string());
  PC_CHECK(w.Write(path).ok());
  return path;
}

// Damaged mixture-of-experts files: one line naming the key or tensor, never a crash.
TEST(MoeLoad, BadFilesNameTheKeyOrTensor) {
  const std::string good = SynthesizeArchitecture("qwen3moe");
  ASSERT_TRUE(Model::Load(good).ok());
  const std::string k = "qwen3moe.";
  struct Case {
    std::string tag, want;
    Rewrite r;
  };
  std::vector<Case> cases = {
      {"used0",
       k + "expert_used_count = 0 is out of range",
       {.edit = [&](GgufWriter* w) { w->SetU32(k + "expert_used_count", 0); }}},
      {"used9",
       k + "expert_used_count = 9 is out of range (1 to " + k + "expert_count = 8)",
       {.edit = [&](GgufWriter* w) { w->SetU32(k + "expert_used_count", 9); }}},
      {"huge",
       k + "expert_count = 1000000 is out of range",
       {.edit = [&](GgufWriter* w) { w->SetU32(k + "expert_count", 1000000); }}},
      {"noexperts",
       k + "expert_count = 0 is out of range",
       {.edit = [&](GgufWriter* w) { w->SetU32(k + "expert_count", 0); }}},
      {"more",
       "tensor 'blk.0.ffn_gate_inp.weight' has shape [256, 8], expected [256, 16]",
       {.edit = [&](GgufWriter* w) { w->SetU32(k + "expert_count", 16); }}},
      {"nodown",
       "missing tensor 'blk.1.ffn_down_exps.weight'",
       {.keep = [](const std::string& n) { return n != "blk.1.ffn_down_exps.weight"; }}},
      {"norouter",
       "missing tensor 'blk.2.ffn_gate_inp.weight'",
       {.keep = [](const std::string& n) { return n != "blk.2.ffn_gate_inp.weight"; }}},
      {"shape",
       "tensor 'blk.3.ffn_up_exps.weight' has shape [512, 256, 4], expected [256, 256, 8]",
       {.dims =
            [](const std::string& n, std::vector<int64_t>* d) {
              if (n == "blk.3.ffn_up_exps.weight") *d = {512, 256, 4};
            }}},
      {"2d",
       "tensor 'blk.0.ffn_down_exps.weight' has shape [256, 2048], expected [256, 256, 8]",
       {.dims =
            [](const std::string& n, std::vector<int64_t>* d) {
              if (n == "blk.0.ffn_down_exps.weight") *d = {256, 2048};
            }}},
  };
  for (const Case& c : cases) {
    const std::string path = Rewritten(good, c.r, c.tag);
    Result<std::unique_ptr<Model>> m = Model::Load(path);
    ASSERT_FALSE(m.ok()) << c.tag;
    const std::string msg = m.status().message();
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.tag << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// qwen2moe as data (config.h): qwen2's attention, routed weights not renormalized, and a
// shared expert (expert_shared_feed_forward_length wide) with its gate in every layer. The
// forward pass is checked against ik_llama.cpp's logits in conformance_test.
TEST(Qwen2Moe, ConfigFromTheFile) {
  const std::unique_ptr<Model> m = LoadOrDie(SynthesizeArchitecture("qwen2moe"));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "qwen2moe");
  EXPECT_TRUE(c.rope_halves);
  EXPECT_EQ(c.n_ff, 768);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_ff_exp, 256);
  EXPECT_FALSE(c.expert_weights_norm);
  EXPECT_EQ(c.n_ff_shexp, 512);
  // Every layer's shared expert and its gate are multiplied (and packed) with the rest.
  int shared = 0;
  for (const auto& [name, w] : m->Matrices()) {
    if (name.find("_shexp.") == std::string::npos) continue;
    ++shared;
    const bool gate = name.find("gate_inp_shexp") != std::string::npos;
    EXPECT_EQ(w->rows, gate ? 1 : name.find("down") != std::string::npos ? 256 : 512) << name;
  }
  EXPECT_EQ(shared, 4 * 4);
  // The other mixtures of experts renormalize and have no shared expert.
  const std::unique_ptr<Model> q3 = LoadOrDie(SynthesizeArchitecture("qwen3moe"));
  EXPECT_TRUE(q3->config().expert_weights_norm);
  EXPECT_EQ(q3->config().n_ff_shexp, 0);
}

// The shared expert's gate as a [n_embd, 1] matrix loads as the vector does and gives the same
// logits; without the gate the shared expert runs ungated, which changes them; without
// expert_shared_feed_forward_length it is feed_forward_length wide (so this file's no longer
// fits). Damaged files name the tensor or key.
TEST(Qwen2Moe, SharedExpertTensors) {
  const std::string good = SynthesizeArchitecture("qwen2moe");
  const std::string k = "qwen2moe.";
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 432, 383, 286};
  auto logits = [&](const std::string& path) {
    const std::unique_ptr<Model> m = LoadOrDie(path);
    Runner r(*m, KvType::kF32);
    return r.Full(ids, Iota(ids.size()));
  };
  const std::vector<float> want = logits(good);
  const std::string column = Rewritten(good,
                                       {.dims =
                                            [](const std::string& n, std::vector<int64_t>* d) {
                                              if (n.find("ffn_gate_inp_shexp") != std::string::npos)
                                                *d = {256, 1};
                                            }},
                                       "column");
  EXPECT_EQ(logits(column), want);
  const std::string ungated = Rewritten(
      good,
      {.keep =
           [](const std::string& n) { return n.find("ffn_gate_inp_shexp") == std::string::npos; }},
      "ungated");
  EXPECT_NE(logits(ungated), want);

  struct Case {
    std::string tag, want;
    Rewrite r;
  };
  std::vector<Case> cases = {
      {"nodownsh",
       "missing tensor 'blk.2.ffn_down_shexp.weight'",
       {.keep = [](const std::string& n) { return n != "blk.2.ffn_down_shexp.weight"; }}},
      {"nowidth",
       "tensor 'blk.0.ffn_gate_shexp.weight' has shape [256, 512], expected [256, 768]",
       {.keep_key =
            [&](const std::string& key) {
              return key != k + "expert_shared_feed_forward_length";
            }}},
      {"width0",
       k + "expert_shared_feed_forward_length = 0 is out of range",
       {.edit = [&](GgufWriter* w) { w->SetU32(k + "expert_shared_feed_forward_length", 0); }}},
      {"gate2",
       "tensor 'blk.1.ffn_gate_inp_shexp.weight' has shape [128, 2], expected [256, 1]",
       {.dims =
            [](const std::string& n, std::vector<int64_t>* d) {
              if (n == "blk.1.ffn_gate_inp_shexp.weight") *d = {128, 2};
            }}},
  };
  // A vector of the wrong length (its own bytes: Rewrite keeps a tensor's).
  const std::string gate1 = "blk.1.ffn_gate_inp_shexp.weight";
  cases.push_back({"gate1d",
                   "tensor '" + gate1 + "' has shape [128], expected [256]",
                   {.edit =
                        [&](GgufWriter* w) {
                          w->AddTensor(gate1, {128}, GgmlType::kF32,
                                       [](uint8_t* dst, size_t n) { std::memset(dst, 0, n); });
                        },
                    .keep = [&](const std::string& n) { return n != gate1; }}});
  for (const Case& c : cases) {
    const std::string path = Rewritten(good, c.r, c.tag);
    Result<std::unique_ptr<Model>> m = Model::Load(path);
    ASSERT_FALSE(m.ok()) << c.tag;
    const std::string msg = m.status().message();
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.tag << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace promptcache
