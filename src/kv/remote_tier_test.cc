// The remote tier: key naming, the record's checks on values any replica may have written, and a
// lookup's remote part (a prefix's or chained blocks': planned, fetched, taken in; the cache's
// lookups never ask the store) against an in-memory fake store. The Redis client is tested in
// redis_tier_test.cc, the real Redis end to end by tests/node/redis.test.mjs, a slow one by
// redis_slow.test.mjs.
#include "kv/remote_tier.h"

#include <gtest/gtest.h>

#include <map>

#include "kv/block_cache.h"
#include "kv/testing_blocks.h"

namespace promptcache {
namespace {

using testing_blocks::Computed;
using testing_blocks::Layout;
using testing_blocks::Tokens;

// A store in a map, shared by the "replicas" of a test; writes are immediate.
struct FakeStore {
  std::map<std::string, std::string> values;
  bool down = false;
  int gets = 0;  // round trips
};

class FakeTier : public RemoteTier {
 public:
  explicit FakeTier(FakeStore* store) : store_(store) {}
  std::vector<std::optional<RemoteValue>> Get(const std::vector<std::string>& keys) override {
    std::vector<std::optional<RemoteValue>> out(keys.size());
    ++store_->gets;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = store_->values.find(keys[i]);
      if (!store_->down && it != store_->values.end()) {
        auto copy = std::make_shared<std::string>(it->second);
        out[i] = RemoteValue{copy, *copy};
        ++stats_.hits;
      } else {
        ++stats_.misses;
      }
    }
    return out;
  }
  int CountLeading(const std::vector<std::string>& keys) override {
    int n = 0;
    while (!store_->down && n < int(keys.size()) && store_->values.count(keys[n])) ++n;
    return n;
  }
  bool Put(std::string key, std::string value, int ttl) override {
    if (store_->down) return false;
    store_->values[key] = std::move(value);
    ttls[key] = ttl;
    ++stats_.writes;
    return true;
  }
  void Persist(std::string key) override { ttls[key] = 0; }
  void CountInvalid() override { ++stats_.invalid; }
  RemoteStats Stats() const override { return stats_; }
  void Flush() override {}
  std::map<std::string, int> ttls;

 private:
  FakeStore* store_;
  RemoteStats stats_;
};

BlockCacheOptions Options() {
  BlockCacheOptions o;
  o.ram_bytes = 100 * Layout().bytes_per_block();
  o.remote_batch = 2;
  return o;
}

TEST(RemoteKeys, NameModelTypeBlockSizeAndNamespace) {
  const std::string p = RemoteKeyPrefix("fp1", KvType::kF16, 16);
  EXPECT_EQ(p, "pc:3:fp1:f16:b16:");
  EXPECT_NE(p, RemoteKeyPrefix("fp2", KvType::kF16, 16));
  EXPECT_NE(p, RemoteKeyPrefix("fp1", KvType::kF32, 16));
  EXPECT_NE(p, RemoteKeyPrefix("fp1", KvType::kF16, 32));
  const BlockKey ns{1, 2}, key{3, 4};
  EXPECT_EQ(RemoteKey(p, ns, key), p + ns.Hex() + ":" + key.Hex());
  EXPECT_NE(RemoteKey(p, ns, key), RemoteKey(p, {}, key));
}

// Replica A computed `t` (namespace `ns`) and wrote its full blocks to the store, then went away.
void ComputeInto(FakeStore* store, const std::vector<int32_t>& t, const BlockKey& ns = {}) {
  BlockPool pool(Layout(), 0, false);
  BlockCache a(&pool, "fp", Options(), nullptr, std::make_unique<FakeTier>(store));
  KvSequence seq = Computed(&pool, t);
  a.InsertPrefix(t, seq, ns);
}

// A prefix lookup with the remote tier, made as the engine makes it: the keys after what RAM and
// disk hold planned, their values read from the cache's tier and taken in, then a lookup that
// finds them in RAM.
int RemoteLookup(BlockCache& cache, std::span<const int32_t> tokens, int max_tokens,
                 KvSequence* seq, const BlockKey& ns = {}) {
  const RemotePrefixFetch plan = cache.PlanRemotePrefix(tokens, max_tokens, ns);
  if (!plan.names.empty()) {
    cache.AdoptRemotePrefix(tokens, plan, FetchRemotePrefix(*cache.remote(), plan, 1000));
  }
  return cache.LookupPrefix(tokens, max_tokens, seq, ns);
}

// The same for chained blocks looked up one by one (a segment's, a module piece's), before
// AppendCached finds them in RAM. Returns how many were taken in.
int RemoteBlocks(BlockCache& cache, std::span<const BlockKey> keys) {
  const RemotePrefixFetch plan = cache.PlanRemoteBlocks(keys);
  if (plan.names.empty()) return 0;
  return cache.AdoptRemoteBlocks(plan, FetchRemotePrefix(*cache.remote(), plan, 1000));
}

TEST(RemoteKeys, NamespacesChainApart) {
  BlockPool pool(Layout(), 0, false);
  BlockCache cache(&pool, "fp", Options(), nullptr);
  const auto t = Tokens(8);
  const auto a = cache.ChainKeys(t, {}), b = cache.ChainKeys(t, BlockKey{7, 7});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_FALSE(a[0] == b[0]);
  EXPECT_FALSE(a[1] == b[1]);
  EXPECT_TRUE(a == cache.ChainKeys(t, {}));
}

TEST(RemoteValues, RoundTripAndEveryCheck) {
  BlockPool pool(Layout(), 0, false);
  const auto t = Tokens(4);
  KvSequence seq = Computed(&pool, t);
  const BlockKey key{5, 6}, parent{1, 1};
  BlockRecord r{key, parent, t, {0, 1, 2, 3}};
  const std::string v = EncodeBlock(r, "fp", pool, seq.spans()[0].block, 0);
  BlockId b = *pool.Allocate();
  Result<BlockRecord> got = DecodeBlock(v, key, "fp", &pool, b);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->tokens, t);
  EXPECT_TRUE(got->parent == parent);
  EXPECT_EQ(reinterpret_cast<const float*>(pool.K(b, 1))[3], 100.5f);
  // Another key, another model, another KV type, a flipped byte, a cut: all rejected.
  EXPECT_FALSE(DecodeBlock(v, BlockKey{5, 7}, "fp", &pool, b).ok());
  EXPECT_FALSE(DecodeBlock(v, key, "other", &pool, b).ok());
  BlockPool f16(Layout(KvType::kF16), 0, false);
  EXPECT_FALSE(DecodeBlock(v, key, "fp", &f16, *f16.Allocate()).ok());
  std::string bad = v;
  bad[bad.size() - 3] ^= 1;
  EXPECT_EQ(DecodeBlock(bad, key, "fp", &pool, b).status().message(), "checksum mismatch");
  EXPECT_FALSE(DecodeBlock(v.substr(0, v.size() - 1), key, "fp", &pool, b).ok());
  EXPECT_FALSE(DecodeBlock("garbage", key, "fp", &pool, b).ok());
  pool.Unref(b);
}

TEST(RemoteWalk, ReplicaBLoadsWhatAComputedInBatchesAndStopsAtTheFirstMiss) {
  FakeStore store;
  const auto t = Tokens(22);  // 5 full blocks
  ComputeInto(&store, t);
  EXPECT_EQ(store.values.size(), 5u);
  BlockPool pool(Layout(), 0, false);
  auto* tier = new FakeTier(&store);
  BlockCache b(&pool, "fp", Options(), nullptr, std::unique_ptr<RemoteTier>(tier));
  KvSequence seq(&pool);
  store.gets = 0;
  EXPECT_EQ(RemoteLookup(b, t, 21, &seq), 20);
  EXPECT_EQ(store.gets, 3);  // batches of 2: 2 + 2 + 1
  EXPECT_EQ(reinterpret_cast<const float*>(seq.SlotK(17, 1))[0], 117.5f);
  EXPECT_EQ(b.Stats().remote_loads, 5u);
  // Now in RAM: no round trip.
  KvSequence again(&pool);
  store.gets = 0;
  EXPECT_EQ(RemoteLookup(b, t, 21, &again), 20);
  EXPECT_EQ(store.gets, 0);
  // A replica missing block 2 of the store stops there.
  store.values.erase(b.RemoteKeyOf({}, b.ChainKeys(t, {})[2]));
  BlockPool pool3(Layout(), 0, false);
  BlockCache c(&pool3, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
  KvSequence s3(&pool3);
  EXPECT_EQ(RemoteLookup(c, t, 21, &s3), 8);
}

TEST(RemoteWalk, ForeignCorruptAndOtherTenantValuesAreSkipped) {
  FakeStore store;
  const auto t = Tokens(8);
  const BlockKey tenant{9, 9};
  ComputeInto(&store, t, tenant);
  BlockPool pool(Layout(), 0, false);
  auto* tier = new FakeTier(&store);
  BlockCache b(&pool, "fp", Options(), nullptr, std::unique_ptr<RemoteTier>(tier));
  KvSequence s0(&pool);
  EXPECT_EQ(RemoteLookup(b, t, 8, &s0), 0);  // the default namespace sees nothing
  s0.Clear();
  // Block 0 of the default namespace: another model's value, then a corrupted one.
  const auto keys = b.ChainKeys(t, {});
  BlockPool other(Layout(), 0, false);
  KvSequence oseq = Computed(&other, t);
  BlockRecord r{keys[0], {}, Tokens(4), {0, 1, 2, 3}};
  store.values[b.RemoteKeyOf({}, keys[0])] =
      EncodeBlock(r, "another-model", other, oseq.spans()[0].block, 0);
  KvSequence s1(&pool);
  EXPECT_EQ(RemoteLookup(b, t, 8, &s1), 0);
  EXPECT_EQ(tier->Stats().invalid, 1u);
  std::string v = EncodeBlock(r, "fp", other, oseq.spans()[0].block, 0);
  v[v.size() / 2] ^= 0x55;
  store.values[b.RemoteKeyOf({}, keys[0])] = v;
  KvSequence s2(&pool);
  EXPECT_EQ(RemoteLookup(b, t, 8, &s2), 0);
  EXPECT_EQ(tier->Stats().invalid, 2u);
  // This model's records under the key, but not the prompt's block: of other tokens, and of its
  // tokens after another parent. Mutation: without either comparison of the record's tokens and
  // parent when a value is taken in (BlockCache::AdoptRemote), it is not counted invalid.
  const BlockRecord not_ours[] = {{keys[0], {}, Tokens(4, 1), {0, 1, 2, 3}},
                                  {keys[0], BlockKey{3, 3}, Tokens(4), {0, 1, 2, 3}}};
  for (const BlockRecord& w : not_ours) {
    store.values[b.RemoteKeyOf({}, keys[0])] =
        EncodeBlock(w, "fp", other, oseq.spans()[0].block, 0);
    KvSequence s(&pool);
    EXPECT_EQ(RemoteLookup(b, t, 8, &s), 0);
  }
  EXPECT_EQ(tier->Stats().invalid, 4u);
  // The right tenant finds its blocks.
  KvSequence s3(&pool);
  EXPECT_EQ(RemoteLookup(b, t, 8, &s3, tenant), 8);
  EXPECT_EQ(pool.blocks_in_use(), 2);  // rejected values left no block behind
}

// The lookup's three parts one by one (the engine's, so as not to wait on the network on its
// thread): the plan from where RAM ends, the values read apart, and taking them in, where a block
// cached in between is kept and the rest checked; the lookup then asks the store nothing.
TEST(RemoteWalk, PlannedFetchedAndAdoptedApart) {
  FakeStore store;
  const auto t = Tokens(22);  // 5 full blocks
  ComputeInto(&store, t);
  BlockPool pool(Layout(), 0, false);
  auto* tier = new FakeTier(&store);
  BlockCache b(&pool, "fp", Options(), nullptr, std::unique_ptr<RemoteTier>(tier));
  const std::vector<int32_t> first8(t.begin(), t.begin() + 8);
  {
    KvSequence two = Computed(&pool, first8);
    b.InsertPrefix(first8, two);
  }
  const auto keys = b.ChainKeys(t, {});
  store.gets = 0;
  const RemotePrefixFetch plan = b.PlanRemotePrefix(t, 21);
  EXPECT_EQ(store.gets, 0);  // planning asks nothing
  EXPECT_EQ(plan.first, 2);
  EXPECT_TRUE(plan.parent == keys[1]);
  ASSERT_EQ(plan.names.size(), 3u);
  EXPECT_EQ(plan.names[0], b.RemoteKeyOf({}, keys[2]));
  EXPECT_TRUE(b.PlanRemotePrefix(first8, 8).names.empty());  // RAM holds it all
  BlockCache no_remote(&pool, "fp", Options(), nullptr);
  EXPECT_TRUE(no_remote.PlanRemotePrefix(t, 21).names.empty());
  std::vector<RemoteValue> values = FetchRemotePrefix(*tier, plan, 1000);
  ASSERT_EQ(values.size(), 3u);
  // Block 2 is computed meanwhile: kept; blocks 3 and 4 are taken in.
  const std::vector<int32_t> first12(t.begin(), t.begin() + 12);
  {
    KvSequence three = Computed(&pool, first12);
    b.InsertPrefix(first12, three);
  }
  const std::vector<BlockKey> adopted = b.AdoptRemotePrefix(t, plan, values);
  ASSERT_EQ(adopted.size(), 2u);
  EXPECT_TRUE(adopted[0] == keys[3] && adopted[1] == keys[4]);
  EXPECT_EQ(b.Stats().remote_loads, 2u);
  EXPECT_EQ(pool.blocks_in_use(), 5);  // nothing taken in twice
  store.gets = 0;
  KvSequence seq(&pool);
  EXPECT_EQ(b.LookupPrefix(t, 21, &seq), 20);
  EXPECT_EQ(store.gets, 0);
  // A value that is not its key's ends the chain: nothing after it is taken in.
  BlockPool p2(Layout(), 0, false);
  BlockCache c(&p2, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
  const RemotePrefixFetch all = c.PlanRemotePrefix(t, 21);
  ASSERT_EQ(all.names.size(), 5u);
  std::vector<RemoteValue> swapped = FetchRemotePrefix(*tier, all, 1000);
  ASSERT_EQ(swapped.size(), 5u);
  std::swap(swapped[1], swapped[2]);
  EXPECT_EQ(c.AdoptRemotePrefix(t, all, swapped).size(), 1u);
  EXPECT_EQ(p2.blocks_in_use(), 1);
}

// AppendCached reads RAM and disk only: blocks another replica wrote are found once read apart
// (RemoteBlocks), and one whose value failed its checks is a miss, not asked for again. Mutation:
// AppendCached asking the store (as it did) hits block 0 at once and reads block 2 twice.
TEST(RemoteWalk, AppendCachedAsksTheStoreNothing) {
  FakeStore store;
  const auto t = Tokens(12);  // 3 blocks, chained from a module's content key
  std::vector<BlockKey> keys;
  {
    BlockPool pool(Layout(), 0, false);
    BlockCache a(&pool, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
    keys = a.ChainKeys(t, BlockKey{9, 9});
    KvSequence seq = Computed(&pool, t);
    for (size_t i = 0; i < keys.size(); ++i) {
      a.Insert(keys[i], i ? keys[i - 1] : BlockKey{}, seq, 4 * i, std::span(t).subspan(4 * i, 4));
    }
  }
  BlockPool pool(Layout(), 0, false);
  auto* tier = new FakeTier(&store);
  BlockCache b(&pool, "fp", Options(), nullptr, std::unique_ptr<RemoteTier>(tier));
  KvSequence seq(&pool);
  EXPECT_FALSE(b.AppendCached(keys[0], &seq));  // in the store only: a miss
  EXPECT_EQ(store.gets, 0);
  std::string& v = store.values.at(b.RemoteKeyOf({}, keys[2]));
  v[v.size() / 2] ^= 0x55;
  EXPECT_EQ(RemoteBlocks(b, keys), 2);  // block 2's value fails its checks
  EXPECT_EQ(tier->Stats().invalid, 1u);
  store.gets = 0;
  EXPECT_TRUE(b.AppendCached(keys[0], &seq));
  EXPECT_TRUE(b.AppendCached(keys[1], &seq));
  EXPECT_FALSE(b.AppendCached(keys[2], &seq));
  EXPECT_EQ(seq.size(), 8);
  EXPECT_EQ(store.gets, 0);
  EXPECT_EQ(tier->Stats().invalid, 1u);
}

// A cached block under the prompt's chain key that is not the prompt's block (as under a
// collision of chain keys: its tokens after another chain's block, or other tokens after the
// prompt's block before it) is not taken as the prompt's: values fetched for the keys from it on
// are not taken in, a plan asks nothing past it, and a lookup stops before it. Mutation: without
// BlockCache::IsBlockOf's parent comparison the first case hits 12 tokens, without its token
// comparison the second.
TEST(RemoteWalk, AnotherBlockUnderThePromptsKeyIsNotThePrompts) {
  const auto t = Tokens(12);    // 3 full blocks, in the store
  const auto x = Tokens(8, 1);  // another chain
  for (const bool other_parent : {true, false}) {
    SCOPED_TRACE(other_parent ? "another parent" : "other tokens");
    FakeStore store;
    ComputeInto(&store, t);
    BlockPool pool(Layout(), 0, false);
    BlockCache b(&pool, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
    const auto keys = b.ChainKeys(t, {});
    KvSequence xs = Computed(&pool, x);
    b.InsertPrefix(x, xs);
    const std::vector<int32_t> first4(t.begin(), t.begin() + 4);
    KvSequence one = Computed(&pool, first4);
    b.InsertPrefix(first4, one);
    const RemotePrefixFetch plan = b.PlanRemotePrefix(t, 12);
    ASSERT_EQ(plan.first, 1);
    const std::vector<RemoteValue> values = FetchRemotePrefix(*b.remote(), plan, 1000);
    ASSERT_EQ(values.size(), 2u);
    // Meanwhile block 1's key comes to name a block of x's K/V.
    const BlockKey parent = other_parent ? b.ChainKeys(x, {})[0] : keys[0];
    const std::span<const int32_t> held =
        std::span<const int32_t>(other_parent ? t : x).subspan(4, 4);
    b.Insert(keys[1], parent, xs, 4, held);
    size_t walked = 9;
    EXPECT_TRUE(b.AdoptRemotePrefix(t, plan, values, &walked).empty());
    EXPECT_EQ(walked, 0u);
    EXPECT_TRUE(b.PlanRemotePrefix(t, 12).names.empty());
    KvSequence seq(&pool);
    EXPECT_EQ(b.LookupPrefix(t, 12, &seq), 4);
  }
}

TEST(RemoteWalk, StoreDownIsAMissAndPinnedPrefixesHaveNoExpiry) {
  FakeStore store;
  BlockPool pool(Layout(), 0, false);
  auto* tier = new FakeTier(&store);
  BlockCache a(&pool, "fp", Options(), nullptr, std::unique_ptr<RemoteTier>(tier));
  const auto t = Tokens(8);
  KvSequence seq = Computed(&pool, t);
  a.InsertPrefix(t, seq);
  const std::string k0 = a.RemoteKeyOf({}, a.ChainKeys(t, {})[0]);
  EXPECT_EQ(tier->ttls[k0], Options().remote_ttl_seconds);
  EXPECT_EQ(a.PinPrefix(t, true), 8);
  EXPECT_EQ(tier->ttls[k0], 0);
  store.down = true;
  BlockPool p2(Layout(), 0, false);
  BlockCache b(&p2, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
  KvSequence s(&p2);
  EXPECT_EQ(RemoteLookup(b, t, 8, &s), 0);
  TierCounts c = a.Probe(a.ChainKeys(t, {}));
  EXPECT_EQ(c.ram, 8);
  EXPECT_EQ(c.disk, 0);
}

// A router's count of the leading blocks the store holds (LookupCache's and LookupPrompt's):
// up to the first gap, under the namespace asked, nothing without a remote tier. Mutations: a
// count one block too long, or names without the namespace, fail it.
TEST(RemoteWalk, RemoteLeadingCountsUpToTheFirstGapInItsNamespace) {
  FakeStore store;
  const BlockKey tenant{9, 9};
  const auto t = Tokens(22);  // 5 full blocks
  ComputeInto(&store, t, tenant);
  BlockPool pool(Layout(), 0, false);
  BlockCache b(&pool, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
  const std::vector<BlockKey> keys = b.ChainKeys(t, tenant);
  EXPECT_EQ(b.RemoteLeading(tenant, keys), 5);
  EXPECT_EQ(b.RemoteLeading(tenant, std::span(keys).first(3)), 3);
  EXPECT_EQ(b.RemoteLeading({}, keys), 0);  // the same keys, named in the default namespace
  EXPECT_EQ(b.RemoteLeading(tenant, b.ChainKeys(Tokens(8, 1), tenant)), 0);  // never written
  store.values.erase(b.RemoteKeyOf(tenant, keys[2]));
  EXPECT_EQ(b.RemoteLeading(tenant, keys), 2);
  store.values.erase(b.RemoteKeyOf(tenant, keys[0]));
  EXPECT_EQ(b.RemoteLeading(tenant, keys), 0);
  EXPECT_EQ(pool.blocks_in_use(), 0);  // counting loads nothing
  BlockCache local(&pool, "fp", Options(), nullptr);
  EXPECT_EQ(local.RemoteLeading(tenant, keys), 0);
}

}  // namespace
}  // namespace promptcache
