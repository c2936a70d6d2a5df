// An Engine over a model already loaded: for the CLI's one-request commands (run), which load
// and check the model themselves, with their own messages, before serving through the Engine.
// Engine::Create (include/promptcache/engine.h) loads options.model_path and calls this.
#pragma once

#include <memory>

#include "kv/remote_tier.h"
#include "model/model.h"
#include "promptcache/engine.h"

namespace promptcache {

// Checks `options` against `model` as Engine::Create does and starts the engine.
// options.batch_size 0 is the model's default (what fits 32 MiB of scratch, at most 512).
// `static_kv`: allocate the K/V blocks of `parallel` sequences of the whole context at start, a
// pool that never grows (`--static-cache`; for one-request engines without the prefix cache,
// whose cached blocks would share it). `remote`: the remote tier to use instead of the one
// options.cache_redis names (tests: a store of their own).
Result<std::unique_ptr<Engine>> CreateEngine(EngineOptions options, std::unique_ptr<Model> model,
                                             bool static_kv = false,
                                             std::unique_ptr<RemoteTier> remote = nullptr);

}  // namespace promptcache
