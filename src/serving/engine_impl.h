// The Engine behind include/promptcache/engine.h: a request queue in front of one engine thread
// that owns the model's compute (thread pool, KV blocks, block cache) and serves up to
// `parallel` sequences with continuous batching.
//
// Each step builds one batch: the next token of every decoding sequence, then prefill chunks of
// newly admitted prompts (after their cached prefix) up to batch_size tokens. Finished or
// cancelled sequences leave their full blocks in the cache.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/session.h"
#include "kv/block_cache.h"
#include "model/model.h"
#include "promptcache/engine.h"

namespace promptcache {

class EngineImpl : public Engine {
 public:
  EngineImpl(const EngineOptions& options, std::unique_ptr<Model> model,
             std::unique_ptr<DiskTier> disk);
  ~EngineImpl() override;

  const Model& model() const override { return *model_; }
  const EngineOptions& options() const override { return options_; }
  Result<std::shared_ptr<RequestHandle>> Submit(CompletionRequest request) override;
  EngineStats Stats() const override;
  std::vector<CacheEntryInfo> ListCache() const override;
  Status PinPrefix(const std::vector<int32_t>& tokens, bool pinned) override;
  Status DropCache(const std::string& key) override;
  Status SaveCache() override;
  Result<int> WarmPrefix(const std::vector<int32_t>& tokens) override;

  // Runs `fn` on the engine thread and waits for it: how other threads touch engine state.
  void RunOnEngineThread(const std::function<void()>& fn) const;
  BlockCache* cache() { return cache_.get(); }
  BlockPool* blocks() { return &blocks_; }
  ThreadPool* pool() { return &pool_; }
  ForwardScratch* scratch() { return &scratch_; }

 private:
  struct Request;
  struct Slot;

  void Loop();
  void Admit(std::shared_ptr<Request> r);
  bool Step();  // one forward pass over all active slots; false if there was nothing to do
  void HandleLogits(Slot& s, const float* logits);
  void Finish(Slot& s, const std::string& reason, Status status = Status::Ok());
  void UpdateStatsSnapshot();

  EngineOptions options_;
  std::unique_ptr<Model> model_;
  int context_;
  ThreadPool pool_;
  BlockPool blocks_;
  std::unique_ptr<BlockCache> cache_;
  ForwardScratch scratch_;
  std::vector<std::unique_ptr<Slot>> active_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  mutable std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  int in_flight_ = 0;  // submitted and not yet finished; guarded by mu_
  EngineStats stats_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace promptcache
