// Mixture-of-experts routing: which experts each token of a batch runs through, with what
// weights, and the batch's tokens grouped by expert so that each expert's matrices multiply all
// of its tokens at once (forward.cc runs them; this module only decides and arranges).
//
// As llama.cpp and ik_llama.cpp route Mixtral, Qwen2-MoE and Qwen3-MoE (build_moe_ffn): a
// softmax over all experts' router logits, the n_expert_used most probable, their probabilities
// renormalized to sum 1 (norm_w: Mixtral, Qwen3-MoE) or taken as they are (Qwen2-MoE). A token's
// choice depends only on its own logits, so routing never depends on the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/matmul.h"

namespace promptcache {

// Routes one token: `logits` (n_expert router logits) become the softmax probabilities in place;
// ids[0..k) get the k most probable experts, most probable first, and weights[0..k) their
// probabilities, divided by the sum of the k when `normalize`. Ties go to the lower expert index.
// (The peers differ there: ik_llama.cpp's partial sort takes the higher index, llama.cpp's exchange
// sort mostly the lower; exact ties of float probabilities do not arise from real router weights.)
void RouteToken(float* logits, int n_expert, int k, int32_t* ids, float* weights,
                bool normalize = true);

// The batch's (token, choice) pairs grouped by expert: `rows` of them, expert e's rows being
// [first[e], first[e] + count[e]) in ascending token order.
struct ExpertGroups {
  std::vector<int64_t> first, count;  // [n_expert]
  std::vector<int32_t> row_token;     // [T * k] the token of each row
  std::vector<int32_t> choice_row;    // [T * k] token t's j-th choice's row: [t * k + j]
};

// Groups T tokens' k choices each (ids: [T * k] from RouteToken) by expert.
void GroupByExpert(const int32_t* ids, int T, int k, int n_expert, ExpertGroups* g);

// Buffers of a mixture-of-experts block, reused across layers and calls (ForwardScratch::moe).
struct MoeScratch {
  std::vector<float> router;   // [T, n_expert] logits, then probabilities
  std::vector<int32_t> ids;    // [T, k]
  std::vector<float> weights;  // [T, k]
  ExpertGroups groups;
  std::vector<float> x;             // [T * k, n_embd] the tokens' FFN inputs, by expert
  std::vector<float> gate, up;      // [T * k, n_ff_exp]
  std::vector<float> out;           // [T * k, n_embd] each row's expert output
  std::vector<int32_t> row_expert;  // [T * k] each row's expert
  // A grouped multiply's matrices (MatMulGrouped), with their rows and outputs.
  std::vector<WeightMatrix> ws;
  std::vector<int64_t> first, rows;
  std::vector<float*> outs;
  // The shared expert (ModelConfig::n_ff_shexp): its gate's logit per token [T], and its
  // output [T, n_embd] (its gate and up rows are ForwardScratch's gate and up).
  std::vector<float> shared_gate, shared_out;
};

}  // namespace promptcache
