// Writes llama_cpp_samplers.txt: distributions from llama.cpp's own samplers (c392e509) for
// sampler_test's SamplerReference tests. Not built by the project; README.md says how it was
// built. Each case: logits (from a fixed generator), one llama.cpp sampler chain, then softmax;
// it prints the logits, our settings for the same cut, and the kept ids with probabilities.
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#include "llama.h"
#include "llama-sampling.h"

static void Case(const char* name, const char* ours, int n, uint64_t seed, float scale,
                 std::vector<llama_sampler*> chain, const std::vector<int>& history = {},
                 const std::vector<std::vector<llama_token>>& breakers = {}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> logits(n);
  for (float& l : logits) l = dist(rng);
  std::vector<llama_token_data> data(n);
  for (int i = 0; i < n; ++i) data[i] = {i, logits[i], 0.0f};
  llama_token_data_array arr{data.data(), (size_t)n, -1, false};
  for (llama_sampler* s : chain) {
    for (int t : history) llama_sampler_accept(s, t);
    llama_sampler_apply(s, &arr);
    llama_sampler_free(s);
  }
  llama_sampler* sm = llama_sampler_init_softmax();
  llama_sampler_apply(sm, &arr);
  llama_sampler_free(sm);
  std::printf("case %s\nparams %s\n", name, ours);
  if (!history.empty()) {
    std::printf("history");
    for (int t : history) std::printf(" %d", t);
    std::printf("\n");
  }
  if (!breakers.empty()) {
    std::printf("breakers");
    for (const auto& b : breakers) {
      std::printf(" ");
      for (size_t i = 0; i < b.size(); ++i) std::printf(i ? ",%d" : "%d", b[i]);
    }
    std::printf("\n");
  }
  std::printf("logits");
  for (float l : logits) std::printf(" %.9g", l);
  std::printf("\nkept");
  for (size_t i = 0; i < arr.size; ++i) {
    // Masked tokens (top-n-sigma's -infinity) stay in the array with probability 0.
    if (arr.data[i].p > 0) std::printf(" %d:%.9g", arr.data[i].id, arr.data[i].p);
  }
  std::printf("\n");
}

int main() {
  for (float p : {0.2f, 0.5f, 0.9f, 0.95f}) {
    std::string ours = "typical_p=" + std::to_string(p) + " min_keep=1";
    Case(("typical " + std::to_string(p)).c_str(), ours.c_str(), 64, 11, 2.0f,
         {llama_sampler_init_typical(p, 1)});
  }
  Case("typical min_keep", "typical_p=0.2 min_keep=6", 64, 12, 2.0f,
       {llama_sampler_init_typical(0.2f, 6)});
  for (float s : {0.0f, 0.5f, 1.0f, 2.0f}) {
    std::string ours = "top_n_sigma=" + std::to_string(s);
    Case(("top_n_sigma " + std::to_string(s)).c_str(), ours.c_str(), 64, 13, 2.0f,
         {llama_sampler_init_top_n_sigma(s)});
  }
  Case("top_k then top_n_sigma", "top_k=20 top_n_sigma=1", 64, 14, 2.0f,
       {llama_sampler_init_top_k(20), llama_sampler_init_top_n_sigma(1.0f)});
  for (float t : {0.05f, 0.1f, 0.2f}) {
    std::string ours = "xtc_probability=1 xtc_threshold=" + std::to_string(t);
    Case(("xtc " + std::to_string(t)).c_str(), ours.c_str(), 32, 15, 1.5f,
         {llama_sampler_init_xtc(1.0f, t, 0, 1)});
  }
  Case("xtc min_keep", "xtc_probability=1 xtc_threshold=0.05 min_keep=30", 32, 15, 1.5f,
       {llama_sampler_init_xtc(1.0f, 0.05f, 30, 1)});
  for (float e : {0.5f, 1.0f, 2.0f}) {
    std::string ours = "temperature=0.8 dynatemp_range=0.5 dynatemp_exponent=" + std::to_string(e);
    Case(("dynatemp " + std::to_string(e)).c_str(), ours.c_str(), 64, 16, 2.0f,
         {llama_sampler_init_temp_ext(0.8f, 0.5f, e)});
  }
  Case("dynatemp low entropy", "temperature=1 dynatemp_range=0.9 dynatemp_exponent=1", 64, 17,
       6.0f, {llama_sampler_init_temp_ext(1.0f, 0.9f, 1.0f)});
  Case("min_p min_keep", "min_p=0.5 min_keep=5", 64, 18, 2.0f,
       {llama_sampler_init_min_p(0.5f, 5)});
  Case("top_p min_keep", "top_p=0.1 min_keep=4", 64, 19, 2.0f,
       {llama_sampler_init_top_p(0.1f, 4)});
  Case("top_k typical top_p min_p", "top_k=30 typical_p=0.9 top_p=0.8 min_p=0.05 min_keep=1", 64,
       20, 2.0f,
       {llama_sampler_init_top_k(30), llama_sampler_init_typical(0.9f, 1),
        llama_sampler_init_top_p(0.8f, 1), llama_sampler_init_min_p(0.05f, 1)});
  // DRY over a history with repeats: tokens 0-31, breakers 30 (one token) and 28 then 29.
  const std::vector<int> story = {1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 6, 7, 1, 2, 3, 8, 2, 3, 4,
                                  5, 9, 1, 2, 3, 4};
  const std::vector<std::vector<llama_token>> breakers = {{30}, {28, 29}};
  auto dry = [&](float mult, float base, int allowed, int last_n) {
    return llama_sampler_init_dry_testing(1024, mult, base, allowed, last_n, breakers);
  };
  Case("dry", "dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=-1", 32,
       21, 1.0f, {dry(0.8f, 1.75f, 2, -1)}, story, breakers);
  Case("dry allowed 1", "dry_multiplier=1 dry_base=2 dry_allowed_length=1 dry_penalty_last_n=-1",
       32, 22, 1.0f, {dry(1.0f, 2.0f, 1, -1)}, story, breakers);
  Case("dry last 12", "dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=12",
       32, 23, 1.0f, {dry(0.8f, 1.75f, 2, 12)}, story, breakers);
  std::vector<int> broken = story;
  broken.insert(broken.end() - 3, 30);  // one-token breaker: only "2 3 4" after it counts
  Case("dry breaker", "dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=-1",
       32, 24, 1.0f, {dry(0.8f, 1.75f, 2, -1)}, broken, breakers);
  std::vector<int> broken2 = story;
  broken2.insert(broken2.end() - 2, {28, 29});  // two-token breaker
  Case("dry two-token breaker",
       "dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=1 dry_penalty_last_n=-1", 32, 25, 1.0f,
       {dry(0.8f, 1.75f, 1, -1)}, broken2, breakers);
  std::vector<int> looped;  // a long loop: the exponent grows to its bound
  for (int i = 0; i < 60; ++i) looped.push_back(i % 3);
  Case("dry long loop", "dry_multiplier=0.5 dry_base=1.1 dry_allowed_length=3 dry_penalty_last_n=-1",
       32, 26, 1.0f, {dry(0.5f, 1.1f, 3, -1)}, looped, breakers);
  // A repeat longer than the tokens after the latest breaker counts only those; and a breaker
  // token that would continue a repeat is not penalized.
  Case("dry capped by breaker",
       "dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=-1", 32, 27, 1.0f,
       {dry(0.8f, 1.75f, 2, -1)}, {5, 7, 30, 1, 2, 3, 4, 8, 6, 7, 30, 1, 2, 3}, breakers);
  Case("dry breaker continues",
       "dry_multiplier=0.8 dry_base=1.75 dry_allowed_length=2 dry_penalty_last_n=-1", 32, 28, 1.0f,
       {dry(0.8f, 1.75f, 2, -1)}, {1, 2, 3, 30, 5, 6, 1, 2, 3, 4, 9, 1, 2, 3}, breakers);
  return 0;
}
