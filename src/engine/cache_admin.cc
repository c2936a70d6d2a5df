// The engine's cache administration (include/promptcache/engine.h): listing, pinning,
// dropping and saving cached prefixes, a router's lookup of each tier, and warming a prefix,
// each run on the engine thread between steps (RunOnEngineThread).
#include <algorithm>

#include "engine/engine_slot.h"

namespace promptcache {

std::vector<CacheEntryInfo> EngineImpl::ListCache() const {
  std::vector<CacheEntryInfo> out;
  RunOnEngineThread([&] {
    for (const CachedPrefixInfo& p : cache_->List()) {
      out.push_back({p.key.Hex(), p.tokens, p.in_ram, p.on_disk, p.pinned, p.idle_seconds});
    }
  });
  return out;
}

std::vector<CacheBlockInfo> EngineImpl::ListCacheBlocks() const {
  std::vector<CacheBlockInfo> out;
  RunOnEngineThread([&] {
    for (CachedBlockInfo& b : cache_->ListBlocks()) {
      out.push_back({b.key.Hex(), b.parent.empty() ? "" : b.parent.Hex(), b.depth,
                     std::move(b.tokens), b.on_disk, b.pinned, b.prefix, b.hits, b.idle_seconds,
                     b.in_ram, b.segment});
    }
  });
  return out;
}

Status EngineImpl::PinPrefix(const std::vector<int32_t>& tokens, bool pinned,
                             const std::string& cache_namespace, const std::string& tenant,
                             PinOutcome* out) {
  PinOutcome o;
  const BlockKey ns = NamespaceKey(cache_namespace);
  bool found = true;
  RunOnEngineThread([&] {
    o.tokens = cache_->PinPrefix(tokens, pinned, ns, tenant, &o.limited);
    // A pin the quota stopped at its first block still found the prefix cached.
    if (o.tokens == 0 && !o.limited) found = false;
    UpdateStatsSnapshot();
  });
  if (out != nullptr) *out = o;
  if (!found) return NotFound("no cached prefix of these tokens");
  return Status::Ok();
}

Status EngineImpl::DropCache(const std::string& key, bool force) {
  Status st;
  RunOnEngineThread([&] {
    st = cache_->Drop(key, force);
    UpdateStatsSnapshot();
  });
  return st;
}

std::vector<PinInfo> EngineImpl::ListPins() const {
  std::vector<PinInfo> out;
  RunOnEngineThread([&] {
    for (const PinnedPrefixInfo& p : cache_->ListPins()) {
      out.push_back({p.key.Hex(), p.ns.empty() ? "" : p.ns.Hex(), p.owner, p.tokens, p.bytes,
                     p.counted, p.expires_in_seconds});
    }
  });
  return out;
}

Result<int> EngineImpl::Unpin(const std::string& key) {
  Result<int> n = 0;
  RunOnEngineThread([&] {
    n = cache_->Unpin(key);
    UpdateStatsSnapshot();
  });
  return n;
}

Status EngineImpl::SaveCache() {
  Status st;
  RunOnEngineThread([&] {
    st = cache_->SaveAll();
    UpdateStatsSnapshot();
  });
  return st;
}

CacheTierCounts EngineImpl::LookupCache(const std::vector<int32_t>& tokens,
                                        const std::string& cache_namespace,
                                        const std::vector<PromptSegment>& segments) const {
  CacheTierCounts out;
  if (tokens.empty()) return out;
  const BlockKey ns = NamespaceKey(cache_namespace);
  const std::vector<BlockKey> keys = cache_->ChainKeys(tokens, ns);
  TierCounts local;
  // Segments a request would look up (Submit's rules; bad ranges are skipped): whether each is
  // in RAM or on disk; those that are not are asked of the remote tier below.
  std::vector<PromptSegment> valid;
  for (const PromptSegment& g : segments) {
    if (!options_.segment_cache) break;
    if (g.begin >= (valid.empty() ? 0 : valid.back().end) && g.begin < g.end &&
        g.end <= static_cast<int>(tokens.size())) {
      valid.push_back(g);
    }
  }
  std::vector<bool> present(valid.size());
  const auto segment_tokens = [&](const PromptSegment& g) {
    return std::span<const int32_t>(tokens).subspan(g.begin, g.size());
  };
  RunOnEngineThread([&] {
    local = cache_->Probe(keys);
    for (size_t i = 0; i < valid.size(); ++i) {
      present[i] = segments_->Present(segment_tokens(valid[i]), ns);
    }
  });
  out.ram = local.ram;
  out.disk = local.disk;
  const int bs = blocks_.layout().block_size;
  // The remote tier is asked here, on the caller's thread: the engine never waits for it.
  out.remote = cache_->RemoteLeading(ns, keys) * bs;
  // A lookup reads RAM and disk block by block, then the remote tier from where they end.
  const int usable = std::max(local.local, out.remote) / bs;
  const int limit = (static_cast<int>(tokens.size()) - 1) / bs;
  out.reusable = std::min(usable, limit) * bs;
  // The segments beyond that prefix, found whole in some tier.
  std::vector<PromptSegment> looked = LookedUp(valid, out.reusable);
  for (const PromptSegment& g : looked) {
    const size_t i = std::find_if(valid.begin(), valid.end(),
                                  [&](const PromptSegment& v) { return v.begin == g.begin; }) -
                     valid.begin();
    bool found = present[i];
    if (!found && cache_->remote() != nullptr) {
      // Segment blocks are named in the default namespace (their keys carry the tenant's).
      const std::vector<BlockKey> blocks = segments_->Keys(segment_tokens(g), ns);
      found = cache_->RemoteLeading({}, blocks) == static_cast<int>(blocks.size());
    }
    // A request recomputes the prompt's last token.
    if (found) out.segments += std::min(g.end, static_cast<int>(tokens.size()) - 1) - g.begin;
  }
  out.reusable += out.segments;
  return out;
}

Result<int> EngineImpl::WarmPrefix(const std::vector<int32_t>& tokens,
                                   const std::string& cache_namespace) {
  const BlockKey ns = NamespaceKey(cache_namespace);
  if (tokens.empty()) return InvalidArgument("the prompt is empty");
  if (static_cast<int>(tokens.size()) > context_) return InvalidArgument("prompt over the context");
  for (int32_t t : tokens) {
    if (t < 0 || t >= model_->config().n_vocab) return InvalidArgument("token id out of range");
  }
  Status st;
  int cached = 0;
  // A batch per task, between the steps of running requests: a long prefix does not hold the
  // engine for the whole of its prefill. The sequence's references keep its blocks meanwhile.
  std::unique_ptr<KvSequence> seq;
  // The remote tier is read here, on the caller's thread, as a request's lookup is by the
  // fetcher (admission.cc): the engine thread plans it and takes the values in, never waiting on
  // the network.
  const int n = static_cast<int>(tokens.size());
  RemotePrefixFetch plan;
  RunOnEngineThread([&] { plan = cache_->PlanRemotePrefix(tokens, n, ns); });
  std::vector<RemoteValue> values;
  if (!plan.names.empty()) {
    values = FetchRemotePrefix(*cache_->remote(), plan, options_.cache_redis_deadline_ms);
  }
  RunOnEngineThread([&] {
    cache_->AdoptRemotePrefix(tokens, plan, values);
    seq = std::make_unique<KvSequence>(&blocks_);
    cached = cache_->LookupPrefix(tokens, n, seq.get(), ns);
  });
  for (int b = cached; b < static_cast<int>(tokens.size()) && st.ok(); b += options_.batch_size) {
    RunOnEngineThread([&] {
      std::vector<BatchToken> batch;
      const int e = std::min<int>(tokens.size(), b + options_.batch_size);
      for (int i = b; i < e; ++i) batch.push_back({tokens[i], i, seq.get(), false});
      st = model_->Forward(batch, nullptr, &pool_, &scratch_);
    });
  }
  RunOnEngineThread([&] {
    if (st.ok()) cache_->InsertPrefix(tokens, *seq, ns);
    seq.reset();
    cache_->Maintain();
    UpdateStatsSnapshot();
  });
  if (!st.ok()) return st;
  return cached;
}

}  // namespace promptcache
