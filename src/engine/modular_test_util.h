// Helpers of the modular prompt cache's engine tests (modular_test.cc, modular_models_test.cc),
// on engine_test_util.h's (engines over stories260K, or a synthesized fixture by its
// test_models.h path): PML prompts served greedily, and the same prompts computed in full without
// any cache; the story and pets schemas' prompts.
#pragma once

#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"
#include "engine/fidelity.h"
#include "engine/test_models.h"

namespace promptcache {

inline const std::string kStorySchema = std::string(PC_SOURCE_DIR) + "/examples/story/story.xml";

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline CompletionResult Serve(Engine& e, const std::string& xml,
                              CompletionRequest r = GreedyIgnoringEos()) {
  auto h = e.SubmitPml(xml, std::move(r));
  PC_CHECK(h.ok());
  CompletionResult res = (*h)->Wait();
  PC_CHECK(res.status.ok());
  return res;
}

inline PmlPrompt Parse(const std::string& xml) {
  auto p = ParsePrompt(xml);
  PC_CHECK(p.ok());
  return std::move(p).value();
}

// The same prompt computed in full: every included token at its position, no cache at all.
inline std::vector<int32_t> FullRecompute(Engine& e, const std::string& xml, int n = 24) {
  auto x = e.ExpandPrompt(Parse(xml));
  PC_CHECK(x.ok());
  FullRunOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.runner.threads = 2;
  auto r = RunFull(e.model(), *x, o);
  PC_CHECK(r.ok());
  return r->tokens;
}

// First-token logits of `x` computed in full: one forward pass, no cache, `kv` storage.
inline std::vector<float> FullFirstLogits(const Engine& e, const ExpandedPrompt& x,
                                          KvType kv = RunnerOptions{}.kv_type) {
  FullRunOptions o;
  o.max_tokens = 1;
  o.keep_logits = true;
  o.runner.threads = 2;
  o.runner.kv_type = kv;
  auto full = RunFull(e.model(), x, o);
  PC_CHECK(full.ok());
  return full->logits[0];
}

inline const char* kLily = R"(<prompt schema="story"><lily/><park/><find thing=" big box"/><![CDATA[
One day,]]></prompt>)";
inline const char* kTim =
    R"(<prompt schema="story"><tim/><lake/><ask/><answer/><find/><moral/><![CDATA[
Then]]></prompt>)";

// Always-included text and independent modules; no union defaults, so a prompt can include
// exactly one module.
inline const char* kPets = R"(<schema name="pets"> Once upon a time, there was a girl named Lily.
  <module name="dog"><![CDATA[
She had a dog named Max. Max liked to run and jump in the park with his ball.]]></module>
  <module name="cat"><![CDATA[
She also had a cat. The cat liked to sleep in the sun all day long.]]></module>
  <module name="toy"><![CDATA[
Her favorite toy was a]]><parameter name="what" length="8"/><![CDATA[.]]></module>
</schema>)";

// First-token logits of a PML prompt served for `n` greedy tokens (the result in *result).
inline std::vector<float> FirstLogits(Engine& e, const std::string& xml, int n = 1,
                                      CompletionResult* result = nullptr) {
  CompletionRequest req = GreedyIgnoringEos(n);
  std::vector<float> first;
  req.on_logits = [&](std::span<const float> l) {
    if (first.empty()) first.assign(l.begin(), l.end());
  };
  CompletionResult r = Serve(e, xml, std::move(req));
  if (result != nullptr) *result = std::move(r);
  return first;
}

}  // namespace promptcache
