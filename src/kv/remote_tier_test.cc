// The remote tier: key naming, the record's checks on values any replica may have written, the
// lookup walk against an in-memory fake store, and the Redis URL parser. (The real Redis is
// tested end to end by tests/node/redis.test.mjs.)
#include "kv/remote_tier.h"

#include <gtest/gtest.h>

#include <map>

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
  {
    BlockPool pool(Layout(), 0, false);
    BlockCache a(&pool, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
    KvSequence seq = Computed(&pool, t);
    a.InsertPrefix(t, seq);
  }
  EXPECT_EQ(store.values.size(), 5u);
  BlockPool pool(Layout(), 0, false);
  auto* tier = new FakeTier(&store);
  BlockCache b(&pool, "fp", Options(), nullptr, std::unique_ptr<RemoteTier>(tier));
  KvSequence seq(&pool);
  store.gets = 0;
  EXPECT_EQ(b.LookupPrefix(t, 21, &seq), 20);
  EXPECT_EQ(store.gets, 3);  // batches of 2: 2 + 2 + 1
  EXPECT_EQ(reinterpret_cast<const float*>(seq.SlotK(17, 1))[0], 117.5f);
  EXPECT_EQ(b.Stats().remote_loads, 5u);
  // Now in RAM: no round trip.
  KvSequence again(&pool);
  store.gets = 0;
  EXPECT_EQ(b.LookupPrefix(t, 21, &again), 20);
  EXPECT_EQ(store.gets, 0);
  // A replica missing block 2 of the store stops there.
  store.values.erase(b.RemoteKeyOf({}, b.ChainKeys(t, {})[2]));
  BlockPool pool3(Layout(), 0, false);
  BlockCache c(&pool3, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
  KvSequence s3(&pool3);
  EXPECT_EQ(c.LookupPrefix(t, 21, &s3), 8);
}

TEST(RemoteWalk, ForeignCorruptAndOtherTenantValuesAreSkipped) {
  FakeStore store;
  const auto t = Tokens(8);
  const BlockKey tenant{9, 9};
  {
    BlockPool pool(Layout(), 0, false);
    BlockCache a(&pool, "fp", Options(), nullptr, std::make_unique<FakeTier>(&store));
    KvSequence seq = Computed(&pool, t);
    a.InsertPrefix(t, seq, tenant);
  }
  BlockPool pool(Layout(), 0, false);
  auto* tier = new FakeTier(&store);
  BlockCache b(&pool, "fp", Options(), nullptr, std::unique_ptr<RemoteTier>(tier));
  KvSequence s0(&pool);
  EXPECT_EQ(b.LookupPrefix(t, 8, &s0), 0);  // the default namespace sees nothing
  s0.Clear();
  // Block 0 of the default namespace: another model's value, then a corrupted one.
  const auto keys = b.ChainKeys(t, {});
  BlockPool other(Layout(), 0, false);
  KvSequence oseq = Computed(&other, t);
  BlockRecord r{keys[0], {}, Tokens(4), {0, 1, 2, 3}};
  store.values[b.RemoteKeyOf({}, keys[0])] =
      EncodeBlock(r, "another-model", other, oseq.spans()[0].block, 0);
  KvSequence s1(&pool);
  EXPECT_EQ(b.LookupPrefix(t, 8, &s1), 0);
  EXPECT_EQ(tier->Stats().invalid, 1u);
  std::string v = EncodeBlock(r, "fp", other, oseq.spans()[0].block, 0);
  v[v.size() / 2] ^= 0x55;
  store.values[b.RemoteKeyOf({}, keys[0])] = v;
  KvSequence s2(&pool);
  EXPECT_EQ(b.LookupPrefix(t, 8, &s2), 0);
  EXPECT_EQ(tier->Stats().invalid, 2u);
  // The right tenant finds its blocks.
  KvSequence s3(&pool);
  EXPECT_EQ(b.LookupPrefix(t, 8, &s3, tenant), 8);
  EXPECT_EQ(pool.blocks_in_use(), 2);  // rejected values left no block behind
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
  EXPECT_EQ(b.LookupPrefix(t, 8, &s), 0);
  TierCounts c = a.Probe(a.ChainKeys(t, {}));
  EXPECT_EQ(c.ram, 8);
  EXPECT_EQ(c.disk, 0);
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
  auto tier = OpenRedisTier({"redis://127.0.0.1:1", 50, 1 << 20});
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

}  // namespace
}  // namespace promptcache
