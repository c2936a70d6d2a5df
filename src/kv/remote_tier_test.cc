// The remote tier: key naming, the record's checks on values any replica may have written, a
// lookup's remote part (a prefix's or chained blocks': planned, fetched, taken in; the cache's
// lookups never ask the store) against an in-memory fake store, the Redis URL parser, the circuit
// breaker's states and the Redis client's deadlines against a store that answers a byte at a
// time. (The real Redis is tested end to end by tests/node/redis.test.mjs, a slow one by
// redis_slow.test.mjs.)
#include "kv/remote_tier.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "kv/block_cache.h"
#include "kv/redis_tier.h"
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

TEST(RedisUrl, ParsesAndRejects) {
  auto a = ParseRedisUrl("redis://127.0.0.1:6380/2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  auto b = ParseRedisUrl("redis://:secret@cache");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->password, "secret");
  EXPECT_EQ(b->port, 6379);
  for (const char* bad : {"http://x", "redis://", "redis://h:0", "redis://h:99999", "redis://h/x",
                          "redis://user:pw@h"}) {
    EXPECT_FALSE(ParseRedisUrl(bad).ok()) << bad;
  }
}

TEST(RedisTier, UnreachableStoreMissesFastAndDropsWrites) {
  // Port 1 on loopback: refused at once.
  RedisOptions o;
  o.url = "redis://127.0.0.1:1";
  o.timeout_ms = 50;
  o.queue_bytes = 1 << 20;
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  auto v = (*tier)->Get({"a", "b"});
  EXPECT_FALSE(v[0] || v[1]);
  EXPECT_EQ((*tier)->CountLeading({"a"}), 0);
  EXPECT_TRUE((*tier)->Put("k", std::string(10, 'x'), 60));
  EXPECT_FALSE((*tier)->Put("k", std::string(2 << 20, 'x'), 60));  // beyond the queue
  (*tier)->Flush();
  const RemoteStats s = (*tier)->Stats();
  EXPECT_GE(s.errors, 1u);
  EXPECT_EQ(s.dropped, 2u);
  EXPECT_EQ(s.misses, 2u);
}

using TimePoint = CircuitBreaker::TimePoint;
using State = CircuitBreaker::State;
using Path = CircuitBreaker::Path;
using Change = CircuitBreaker::Change;

TimePoint At(double s) { return TimePoint() + std::chrono::milliseconds(int64_t(s * 1000)); }

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresAndProbesAfterTheCooldown) {
  CircuitBreaker b({3, 5, 60});
  EXPECT_TRUE(b.AllowRead(At(0)));
  EXPECT_EQ(b.Failed(Path::kRead, At(0)), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kRead, At(1)), Change::kNone);
  // A success in between starts the count again.
  EXPECT_EQ(b.Succeeded(Path::kRead), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kRead, At(2)), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kRead, At(2)), Change::kNone);
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_EQ(b.Failed(Path::kRead, At(2)), Change::kOpened);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.opens(), 1u);
  // Open: nothing goes, reads are counted as skipped.
  EXPECT_FALSE(b.AllowRead(At(3)));
  EXPECT_FALSE(b.AllowRead(At(6.9)));
  EXPECT_FALSE(b.AllowWrite());
  EXPECT_EQ(b.skipped(), 2u);
  // After 5 s one read is the probe; the others wait for it.
  EXPECT_TRUE(b.AllowRead(At(7)));
  EXPECT_EQ(b.state(), State::kHalfOpen);
  EXPECT_FALSE(b.AllowRead(At(7)));
  EXPECT_FALSE(b.AllowWrite());
  // The probe fails: open again, twice as long.
  EXPECT_EQ(b.Failed(Path::kRead, At(8)), Change::kNone);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.opens(), 2u);
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 10);
  EXPECT_FALSE(b.AllowRead(At(17.9)));
  EXPECT_TRUE(b.AllowRead(At(18)));
  // A probe given back (never sent) lets the next read probe.
  b.Abandoned();
  EXPECT_TRUE(b.AllowRead(At(18)));
  EXPECT_EQ(b.Succeeded(Path::kRead), Change::kClosed);
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_TRUE(b.AllowWrite());
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 5);
}

TEST(CircuitBreaker, WritesOpenItButOnlyAReadClosesIt) {
  CircuitBreaker b({2, 5, 8});
  EXPECT_EQ(b.Failed(Path::kWrite, At(0)), Change::kNone);
  // A read's success does not clear the writes' count, nor a write's the reads'.
  EXPECT_EQ(b.Succeeded(Path::kRead), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kWrite, At(0)), Change::kOpened);
  EXPECT_FALSE(b.AllowWrite());
  EXPECT_EQ(b.Succeeded(Path::kWrite), Change::kNone);  // a batch from before it opened
  EXPECT_EQ(b.state(), State::kOpen);
  // Failed probes double the cool-down up to its limit.
  for (double t : {5.0, 15.0, 23.0}) {
    EXPECT_TRUE(b.AllowRead(At(t))) << t;
    b.Failed(Path::kRead, At(t));
  }
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 8);
  EXPECT_FALSE(b.AllowRead(At(30.9)));
  EXPECT_TRUE(b.AllowRead(At(31)));
}

// A store on loopback that answers every connection that sends anything with an endless bulk
// string, one byte every 50 ms: each socket read gets a byte well within any timeout, but no
// reply ever ends.
class TricklingStore {
 public:
  TricklingStore() {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(listen_, 16), 0);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~TricklingStore() {
    stop_ = true;
    thread_.join();
    for (const Client& c : clients_) ::close(c.fd);
    ::close(listen_);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  struct Client {
    int fd;
    bool asked = false;
    size_t sent = 0;
  };
  void Run() {
    static const std::string kReply = "$1000000\r\n" + std::string(1000000, 'x');
    while (!stop_) {
      std::vector<pollfd> fds{{listen_, POLLIN, 0}};
      for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 50);
      if (fds[0].revents & POLLIN) clients_.push_back({::accept(listen_, nullptr, nullptr)});
      for (size_t i = 1; i < fds.size(); ++i) {
        char buf[4096];
        if ((fds[i].revents & POLLIN) && ::recv(fds[i].fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
          clients_[i - 1].asked = true;
        }
      }
      for (Client& c : clients_) {
        if (c.asked && c.sent < kReply.size()) {
          c.sent += std::max<ssize_t>(0, ::send(c.fd, &kReply[c.sent], 1, MSG_NOSIGNAL));
        }
      }
    }
  }
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<Client> clients_;
  std::thread thread_;
};

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(RedisTier, ASlowStoreCostsALookupItsDeadlineThenNothingOnceTheBreakerOpens) {
  TricklingStore store;
  RedisOptions o{store.url(), /*timeout_ms=*/100, size_t(1) << 20, /*deadline_ms=*/300,
                 /*breaker=*/{3, 60, 60}};  // no probe within the test
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  for (int i = 1; i <= 3; ++i) {
    // Past the reconnect backoff (100 ms after a failure), within which a lookup misses unsent.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    const auto t0 = std::chrono::steady_clock::now();
    auto v = (*tier)->Get({"k1", "k2"});
    // A liveness bound: the whole value would take 14 hours at this pace.
    EXPECT_LT(SecondsSince(t0), 2.0) << i;
    EXPECT_FALSE(v[0] || v[1]);
    EXPECT_EQ((*tier)->Stats().deadline_misses, uint64_t(i));
    EXPECT_EQ((*tier)->Stats().breaker_open, i == 3);
  }
  // Open: no call at all, every key a miss at once, and writes dropped.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ((*tier)->CountLeading({"k1"}), 0);
  int streamed = 0;
  (*tier)->Stream({"k1", "k2", "k3"}, 2,
                  [&](std::optional<RemoteValue>) { return ++streamed > 0; });
  EXPECT_LT(SecondsSince(t0), 0.2);
  EXPECT_EQ(streamed, 0);
  EXPECT_FALSE((*tier)->Put("k", "v", 60));
  const RemoteStats s = (*tier)->Stats();
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.skipped, 2u);
  EXPECT_EQ(s.misses, 2u * 3 + 3);
  EXPECT_GE(s.dropped, 1u);
}

TEST(RedisTier, ARequestsBudgetBoundsAllItsCalls) {
  TricklingStore store;
  RedisOptions o{store.url(), 100, size_t(1) << 20, /*deadline_ms=*/60000, {100, 60, 60}};
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  const auto t0 = std::chrono::steady_clock::now();
  {
    RemoteBudget budget(400);
    for (int i = 0; i < 5; ++i) (*tier)->Get({"k" + std::to_string(i)});
  }
  // Five calls, each allowed a minute on its own, end within the one budget of 0.4 s.
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_GE((*tier)->Stats().deadline_misses, 1u);
  EXPECT_FALSE(RemoteBudget::Deadline().has_value());
}

}  // namespace
}  // namespace promptcache
