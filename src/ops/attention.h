// The inner loop of attention, flash-attention style: queries fold tiles of up to 128 keys and
// values into a running softmax state (online softmax), so a tile read from the KV cache serves
// every query that reads it (the query heads of a KV head, the tokens of a prompt) and the full
// row of scores is never materialized. Knows nothing of models or caches: rows come as pointers.
//
// Rows may be f32, f16, or ggml's Q8_0 / Q4_0 blocks, read as they are: each vector of keys or
// values is decoded in registers where it is used (heads that start inside a block, smaller or
// odd-sized ones, are decoded a tile at a time instead, and so are the tiles of calls with many
// queries, which would otherwise decode each vector once per group of queries). The arithmetic of
// one query never depends on the other queries of a call, on how many there are, or on the row type
// (widening f16 and decoding a block, q * scale, are both exact in f32): the same values give
// bit-identical outputs however a caller batches or stores them.
#pragma once

#include <cmath>
#include <cstdint>

namespace promptcache {

// Keys per tile: each query's running max and sum are updated, and its output rows rescaled,
// once per tile, so longer tiles spread that (and each call's set-up, and the model's walk of the
// cache) over more keys.
constexpr int kAttnTileRows = 128;
constexpr int kAttnMaxHeadDim = 1024;

// A query's running state: the largest score seen and the sum of exp(score - max). Its output
// row (head_dim floats, kept by the caller) holds sum_i exp(score_i - max) * v_i; it must be
// zeros while the state is empty (sum == 0) and is divided by `sum` at the end.
struct AttnState {
  float max = -INFINITY;
  float sum = 0.0f;
};

enum class AttnRowType { kF32, kF16, kQ8_0, kQ4_0 };

// One tile: rows [0, n) of K and V, head_dim elements each, of `type`. Rows beyond n may be left
// unset. A quantized row may start inside a block (heads smaller than a block share it): at
// value `column` of the block each pointer points at.
struct AttnTile {
  AttnRowType type = AttnRowType::kF16;
  int column = 0;
  int n = 0;
  const void* k[kAttnTileRows];
  const void* v[kAttnTileRows];
};

// How a tile's dot products become scores: scale * q·k, then, with softcap > 0,
// softcap * tanh(score / softcap) (Gemma 2's attention logit soft-capping).
struct AttnScoring {
  float scale = 1.0f;
  float softcap = 0.0f;
};

// Folds the tile into the states of n_queries queries: query i sees rows
// [first_valid[i], n_valid[i]) (a non-empty range within [0, tile.n]: causal masking, and a
// sliding window's start), with scores as `scoring` says. first_valid may be null (all from 0).
// Rows outside a query's range weigh exactly 0, as if the tile did not hold them.
void AttendTile(const AttnTile& tile, int head_dim, const AttnScoring& scoring, int n_queries,
                const float* const* q, const int* first_valid, const int* n_valid,
                AttnState* const* state, float* const* out);

// Folds state b (over other keys) into a, as if a had seen b's keys too. An empty b changes
// nothing; into an empty a, b is copied exactly.
void MergeAttention(const AttnState& b, const float* out_b, AttnState* a, float* out_a,
                    int head_dim);

}  // namespace promptcache
