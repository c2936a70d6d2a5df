// llama.cpp's further samplers (typical-p, top-n-sigma, XTC, dynamic temperature, min_keep,
// DRY, mirostat): the cuts and DRY's penalties against llama.cpp's own implementation
// (testdata/README.md), mirostat's rule by hand, and the settings' checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/sampler_test_util.h"

namespace promptcache {
namespace {

struct ReferenceCase {
  std::string name;
  std::string params;
  std::vector<float> logits;
  std::map<int32_t, double> kept;
  std::vector<int32_t> history;
  std::vector<std::vector<int32_t>> breakers;
};

std::vector<ReferenceCase> ReadReference() {
  std::ifstream in(std::string(PC_SOURCE_DIR) + "/src/sampling/testdata/llama_cpp_samplers.txt");
  std::vector<ReferenceCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    if (key == "case") {
      cases.emplace_back();
      cases.back().name = line.substr(5);
    } else if (key == "params") {
      cases.back().params = line.substr(7);
    } else if (key == "history") {
      int32_t t;
      while (fields >> t) cases.back().history.push_back(t);
    } else if (key == "breakers") {
      std::string seq;
      while (fields >> seq) {
        std::vector<int32_t> ids;
        std::istringstream parts(seq);
        std::string id;
        while (std::getline(parts, id, ',')) ids.push_back(std::stoi(id));
        cases.back().breakers.push_back(ids);
      }
    } else if (key == "logits") {
      float l;
      while (fields >> l) cases.back().logits.push_back(l);
    } else if (key == "kept") {
      std::string pair;
      while (fields >> pair) {
        const size_t colon = pair.find(':');
        cases.back().kept[std::stoi(pair.substr(0, colon))] = std::stod(pair.substr(colon + 1));
      }
    }
  }
  return cases;
}

// Temperature 1 and no cut, then the case's settings ("typical_p=0.2 min_keep=1").
SamplingParams ParamsOf(const std::string& text) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 3;
  std::istringstream fields(text);
  std::string kv;
  while (fields >> kv) {
    const std::string key = kv.substr(0, kv.find('='));
    const float v = std::stof(kv.substr(kv.find('=') + 1));
    if (key == "temperature")
      p.temperature = v;
    else if (key == "top_k")
      p.top_k = static_cast<int>(v);
    else if (key == "top_p")
      p.top_p = v;
    else if (key == "min_p")
      p.min_p = v;
    else if (key == "min_keep")
      p.min_keep = static_cast<int>(v);
    else if (key == "typical_p")
      p.typical_p = v;
    else if (key == "top_n_sigma")
      p.top_n_sigma = v;
    else if (key == "xtc_probability")
      p.xtc_probability = v;
    else if (key == "xtc_threshold")
      p.xtc_threshold = v;
    else if (key == "dynatemp_range")
      p.dynatemp_range = v;
    else if (key == "dynatemp_exponent")
      p.dynatemp_exponent = v;
    else if (key == "dry_multiplier")
      p.dry_multiplier = v;
    else if (key == "dry_base")
      p.dry_base = v;
    else if (key == "dry_allowed_length")
      p.dry_allowed_length = static_cast<int>(v);
    else if (key == "dry_penalty_last_n")
      p.dry_penalty_last_n = static_cast<int>(v);
    else
      ADD_FAILURE() << "unknown setting " << key;
  }
  return p;
}

TEST(SamplerReference, MatchesLlamaCpp) {
  const std::vector<ReferenceCase> cases = ReadReference();
  ASSERT_EQ(cases.size(), 29u);
  for (const ReferenceCase& c : cases) {
    SCOPED_TRACE(c.name + " (" + c.params + ")");
    ASSERT_FALSE(c.kept.empty());
    SamplingParams params = ParamsOf(c.params);
    params.dry_breakers = c.breakers;
    Sampler sampler(params);
    const auto n = static_cast<int32_t>(c.logits.size());
    const std::vector<Sampler::Choice> got = sampler.Distribution(c.logits.data(), n, c.history);
    // Below 1e-30 llama.cpp's float probabilities underflow (to 0, or to a denormal it
    // prints) where this engine's doubles do not: such tails are left out on both sides.
    std::map<int32_t, double> ours;
    for (const Sampler::Choice& ch : got) {
      if (ch.p > 1e-30) ours[ch.id] = ch.p;
    }
    size_t reference_kept = 0;
    for (const auto& [id, p] : c.kept) reference_kept += p > 1e-30;
    ASSERT_EQ(ours.size(), reference_kept);
    for (const auto& [id, p] : c.kept) {
      if (p <= 1e-30) continue;
      ASSERT_TRUE(ours.count(id)) << "token " << id << " kept by llama.cpp";
      EXPECT_NEAR(ours[id], p, 2e-5) << "token " << id;
    }
  }
}

SamplingParams Mirostat(int version, float tau, float eta) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  p.mirostat = version;
  p.mirostat_tau = tau;
  p.mirostat_eta = eta;
  return p;
}

TEST(SamplerMirostat, Version2KeepsTokensWithinMuBitsAndLearnsFromEachDraw) {
  // Surprises 1, 2, 3, 4, 5, 5 bits; mu starts at 2 * tau = 3.2.
  const std::vector<double> probs = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.03125};
  const std::vector<float> logits = LogitsOf(probs);
  Sampler sampler(Mirostat(2, 1.6f, 0.5f));
  EXPECT_FLOAT_EQ(sampler.mirostat_mu(), 3.2f);
  // top_k 40 and top_p 0.95 (the defaults) do not apply: mirostat replaces the cuts.
  const std::vector<Sampler::Choice> d = sampler.Distribution(logits.data(), 6, {});
  ASSERT_EQ(d.size(), 3u);  // surprise <= 3.2 bits
  EXPECT_NEAR(d[0].p, 0.5 / 0.875, 1e-6);
  EXPECT_FLOAT_EQ(sampler.mirostat_mu(), 3.2f);  // Distribution does not learn
  float mu = 3.2f;
  for (int step = 0; step < 50; ++step) {
    // The set at this mu: the tokens whose surprise is at most mu (the best one at least).
    double kept = 0;
    for (double p : probs) {
      if (-std::log2(p) <= mu || p == probs[0]) kept += p;
    }
    const int32_t id = sampler.Sample(logits.data(), 6, {});
    ASSERT_LE(-std::log2(probs[id]), std::max(mu, 1.0f) + 1e-5) << "step " << step;
    mu -= 0.5f * static_cast<float>(-std::log2(probs[id] / kept) - 1.6);
    ASSERT_NEAR(sampler.mirostat_mu(), mu, 1e-4) << "step " << step;
  }
}

TEST(SamplerMirostat, Version1CutsAtTheZipfRank) {
  // A Zipf distribution p_i ~ 1 / i^s over 1000 tokens: the estimate of s is exact, and the
  // cut is k = (eps * 2^mu / (1 - N^-eps))^(1/s) with eps = s - 1.
  const double s = 1.2;
  const int n = 1000;
  std::vector<double> probs(n);
  for (int i = 0; i < n; ++i) probs[i] = 1.0 / std::pow(i + 1, s);
  const std::vector<float> logits = LogitsOf(probs);
  for (float tau : {2.0f, 3.0f, 4.0f}) {
    Sampler sampler(Mirostat(1, tau, 0.1f));
    const double mu = 2 * tau;
    const double k = std::pow((s - 1) * std::exp2(mu) / (1 - std::pow(n, -(s - 1))), 1 / s);
    const std::vector<Sampler::Choice> d = sampler.Distribution(logits.data(), n, {});
    EXPECT_EQ(d.size(), static_cast<size_t>(k)) << "tau " << tau;
    for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i].id, static_cast<int32_t>(i));
  }
}

TEST(SamplerXtc, ExcludesTheTopChoicesOnlyWhenTheCoinSaysSo) {
  // Tokens 0-2 are each above 0.2; token 2 is the least probable of them.
  const std::vector<float> logits = LogitsOf({0.3, 0.26, 0.24, 0.1, 0.1});
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 9;
  p.xtc_threshold = 0.2f;
  p.xtc_probability = 1.0f;
  Sampler always(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t id = always.Sample(logits.data(), 5, {});
    ASSERT_GE(id, 2);  // 0 and 1 are excluded at every step
  }
  // Probability 0 draws no coin: the stream is the one without XTC.
  p.xtc_probability = 0.0f;
  Sampler off(p);
  SamplingParams plain = p;
  plain.xtc_threshold = 0.1f;
  Sampler reference(plain);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(off.Sample(logits.data(), 5, {}), reference.Sample(logits.data(), 5, {}));
  }
  // Half the time: the excluded tokens come up, but less often than without XTC.
  p.xtc_probability = 0.5f;
  Sampler half(p);
  int top = 0;
  for (int i = 0; i < 2000; ++i) top += half.Sample(logits.data(), 5, {}) == 0;
  EXPECT_GT(top, 150);  // 0.5 * 0.3 * 2000 = 300 expected
  EXPECT_LT(top, 450);
}

TEST(SamplerExtras, RejectOutOfRangeSettingsByName) {
  struct Case {
    void (*mutate)(SamplingParams&);
    const char* field;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.min_keep = -1; }, "min_keep"},
      {[](SamplingParams& p) { p.dynatemp_range = -0.5f; }, "dynatemp_range"},
      {[](SamplingParams& p) { p.dynatemp_exponent = NAN; }, "dynatemp_exponent"},
      {[](SamplingParams& p) { p.top_n_sigma = -0.5f; }, "top_n_sigma"},
      {[](SamplingParams& p) { p.typical_p = 0.0f; }, "typical_p"},
      {[](SamplingParams& p) { p.typical_p = 1.5f; }, "typical_p"},
      {[](SamplingParams& p) { p.xtc_probability = 2.0f; }, "xtc_probability"},
      {[](SamplingParams& p) { p.xtc_threshold = -0.1f; }, "xtc_threshold"},
      {[](SamplingParams& p) { p.mirostat = 3; }, "mirostat"},
      {[](SamplingParams& p) { p.mirostat_tau = INFINITY; }, "mirostat_tau"},
      {[](SamplingParams& p) { p.mirostat_eta = -1.0f; }, "mirostat_eta"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const Status s = p.Validate();
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.message().rfind(c.field, 0), 0u) << s.message();
  }
}

TEST(SamplerExtras, TopNSigmaIgnoresBannedTokens) {
  // A banned token (-infinity, as a grammar's mask leaves it) must not make the spread
  // infinite and keep everything: 0 sigmas keep only the best.
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, -INFINITY, 0.5f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.top_n_sigma = 0.0f;
  Sampler sampler(p);
  const std::vector<Sampler::Choice> d = sampler.Distribution(logits.data(), 5, {});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 1);
}

}  // namespace
}  // namespace promptcache
