// Helpers of the Engine's tests on the real stories260K model (engine_test.cc,
// engine_choices_test.cc, engine_generation_test.cc, engine_limits_test.cc), and the part every
// engine test shares (modular_test_util.h, in_flight_test_util.h and remote_test_util.h build on
// it, so that a test may include any of them together): an engine over the model, a greedy
// request, a request run to its end, and the reference greedy generation without the Engine or
// any cache.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "engine/fidelity.h"
#include "engine/test_models.h"
#include "promptcache/engine.h"

namespace promptcache {

inline const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";

// An engine over stories260K (kStories, test_models.h; or `o.model_path` when set) on 2 threads.
inline std::unique_ptr<Engine> Make(EngineOptions o = {}) {
  if (o.model_path.empty()) o.model_path = kStories;
  o.threads = 2;
  auto e = Engine::Create(o);
  PC_CHECK(e.ok());
  return std::move(e).value();
}

// A greedy request for `n` tokens of `prompt`, ending at the end-of-sequence token.
inline CompletionRequest Greedy(std::vector<int32_t> prompt, int n = 24) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0;
  return r;
}

// A greedy request for exactly `n` tokens, past the end-of-sequence token (ignore_eos), and no
// prompt of its own (a PML prompt's requests).
inline CompletionRequest GreedyIgnoringEos(int n = 24) {
  CompletionRequest r = Greedy({}, n);
  r.ignore_eos = true;
  return r;
}

inline CompletionResult Complete(Engine& e, CompletionRequest r) {
  auto h = e.Submit(std::move(r));
  PC_CHECK(h.ok());
  return (*h)->Wait();
}

// The same greedy generation without the Engine or any cache: fidelity's full recompute on a
// fresh Runner (the prompt at positions 0, 1, ... in one forward pass, then a token per pass,
// each the argmax of its logits). `n` tokens, fewer where it reaches the end-of-sequence token,
// as a request does, unless `ignore_eos` (to compare with requests that set it).
inline std::vector<int32_t> Reference(const Model& m, const std::vector<int32_t>& prompt, int n,
                                      bool ignore_eos = false) {
  ExpandedPrompt x;
  x.tokens = prompt;
  for (size_t i = 0; i < prompt.size(); ++i) x.positions.push_back(static_cast<int32_t>(i));
  x.end = static_cast<int>(prompt.size());
  FullRunOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = ignore_eos;
  auto r = RunFull(m, x, o);
  PC_CHECK(r.ok());
  return r->tokens;
}

}  // namespace promptcache
