#include "engine/segment_store.h"

#include <algorithm>

#include "core/hash.h"
#include "model/kv_shift.h"

namespace promptcache {

SegmentStore::SegmentStore(const Model& model, BlockCache* cache, ThreadPool* pool,
                           SegmentEncoding encoding)
    : model_(model), cache_(cache), pool_(pool), encoding_(encoding) {
  if (encoding_ == SegmentEncoding::kAlone) {
    const Tokenizer& tok = model.tokenizer();
    const int32_t first = tok.bos() >= 0 ? tok.bos() : tok.eos();
    if (first >= 0) preamble_.push_back(first);
  }
}

std::vector<BlockKey> SegmentStore::Keys(std::span<const int32_t> tokens,
                                         const BlockKey& ns) const {
  Hasher128 h;
  h.Update(std::string_view("promptcache segment v1"));
  h.UpdatePod(static_cast<uint8_t>(encoding_));
  h.UpdatePod(static_cast<uint64_t>(preamble_.size()));
  h.Update(preamble_.data(), preamble_.size() * sizeof(int32_t));
  h.Update(std::string_view(KvTypeName(cache_->pool()->layout().type)));
  h.UpdatePod(ns.hi);
  h.UpdatePod(ns.lo);
  h.UpdatePod(static_cast<uint64_t>(tokens.size()));
  h.Update(tokens.data(), tokens.size_bytes());
  uint64_t d[2];
  h.Digest(d);
  BlockKey key{d[0], d[1]};
  const size_t bs = cache_->pool()->layout().block_size;
  std::vector<BlockKey> keys;
  for (size_t b = 0; b < tokens.size(); b += bs) {
    key = cache_->ChainKey(key, tokens.subspan(b, std::min(bs, tokens.size() - b)));
    keys.push_back(key);
  }
  return keys;
}

SegmentStore::Lookup SegmentStore::Find(std::span<const int32_t> tokens, const BlockKey& ns,
                                        KvSequence* out) {
  PC_CHECK(out->size() == 0);
  Lookup l;
  for (const BlockKey& k : Keys(tokens, ns)) {
    if (!cache_->AppendCached(k, out, /*segment=*/true)) break;
  }
  const bool whole = out->size() == static_cast<int>(tokens.size());
  // Positions as encoded, consecutive; else blocks of two encodings.
  bool consecutive = whole;
  if (whole) {
    l.start = out->Position(0);
    int32_t expect = l.start;
    const BlockPool* blocks = cache_->pool();
    for (const KvSpan& s : out->spans()) {
      for (int j = 0; j < s.count && consecutive; ++j) {
        consecutive = blocks->Positions(s.block)[s.begin + j] + s.shift == expect++;
      }
    }
  }
  l.found = whole && consecutive;
  l.partial = !l.found && out->size() > 0;
  if (!l.found) out->Clear();
  return l;
}

bool SegmentStore::Present(std::span<const int32_t> tokens, const BlockKey& ns) const {
  const std::vector<BlockKey> keys = Keys(tokens, ns);
  return cache_->Probe(keys).local ==
         static_cast<int>(keys.size()) * cache_->pool()->layout().block_size;
}

Status SegmentStore::Store(std::span<const int32_t> tokens, const BlockKey& ns,
                           const KvSequence& seq, int begin, bool replace) {
  const std::vector<BlockKey> keys = Keys(tokens, ns);
  if (replace) {
    // Last block first: each Drop also takes what the cache holds after it in the chain.
    for (auto it = keys.rbegin(); it != keys.rend(); ++it) (void)cache_->Drop(it->Hex());
  }
  // Blocks of its own, from slot 0: block i holds tokens [iB, (i+1)B) as the keys say.
  KvSequence copy(cache_->pool());
  const int n = static_cast<int>(tokens.size());
  PC_RETURN_IF_ERROR(AppendShifted(model_.config(), seq, begin, begin + n, 0, &copy, pool_));
  PC_CHECK(copy.Locate(0).begin == 0);
  const size_t bs = cache_->pool()->layout().block_size;
  for (size_t b = 0; b < keys.size(); ++b) {
    const size_t first = b * bs;
    cache_->Insert(keys[b], b == 0 ? BlockKey{} : keys[b - 1], copy, static_cast<int>(first),
                   tokens.subspan(first, std::min(bs, tokens.size() - first)),
                   /*segment=*/true);
  }
  return Status::Ok();
}

}  // namespace promptcache
