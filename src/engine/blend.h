// Selective recompute of a modular prompt's cached tokens: the step beyond the Prompt Cache
// paper, after CacheBlend (Yao et al., 2024).
//
// A module encoded alone never attended to the modules a prompt puts before it, so its cached
// K/V differ from what the full prompt would compute, and most of the difference sits in a few
// tokens. CacheBlend finds them by how far their K/V move on an early layer when recomputed with
// the full context, recomputes those in every layer and reuses the rest. Here: the candidate
// tokens (those of pieces whose encoding context is not the prompt's, in blocks the sequence
// owns) are run through the first two layers in place (Model::Forward with in-place slots and a
// layer limit), each token's deviation is the squared distance between its recomputed and cached
// values on the last of them; the three times `ratio` share that moved most go through three
// layers and are ranked again (CacheBlend's gradual filtering), and the `ratio` share that moved
// most is run through every layer in place. A recomputed token attends to everything before it in
// the sequence, the tokens recomputed before it included. ratio 0: nothing (but the forced
// tokens); 1: every candidate (equal to the full computation of those tokens, up to what the
// non-candidates hold).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace promptcache {

struct BlendStats {
  int candidates = 0;  // tokens that could have been recomputed
  int recomputed = 0;  // tokens recomputed in every layer (the forced ones included)
  int forced = 0;      // of them, recomputed whatever the share (BlendInput::forced)
  double ms = 0;       // selection and recompute
};

// What Blend works on, by slot of the sequence.
struct BlendInput {
  // The candidates' slots (ascending, in blocks seq owns alone) and token ids. Positions are read
  // from seq.
  std::vector<int> slots;
  std::vector<int32_t> tokens;
  // Of those slots, the ones recomputed whatever the share (ascending): the first tokens of a
  // reused segment (EngineOptions::segment_border_tokens), where most of its error sits (EPIC,
  // Hu et al. 2024). The share is of all candidates, picked among the others.
  std::vector<int> forced;
  // Tokens computed at request time among them (arguments, cache="false" text, a segment's
  // neighbours), which attended to the candidates before the recompute: those after the first
  // slot the recompute rewrites are run again with it, in the same in-place pass, so every token
  // sees the recomputed tokens before it.
  std::vector<int> computed_slots;
  std::vector<int32_t> computed_tokens;
};

Status Blend(const Model& model, KvSequence* seq, const BlendInput& in, double ratio,
             int batch_size, ThreadPool* pool, ForwardScratch* scratch, BlendStats* stats);

}  // namespace promptcache
