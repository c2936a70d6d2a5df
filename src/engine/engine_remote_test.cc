// The remote tier's prefix lookups run off the engine thread (admission.cc, remote_fetch.h):
// engines on stories260K share an in-memory store whose reads of chosen keys wait on a latch the
// test opens (remote_test_util.h), so a lookup can be held for as long as the test likes. While one
// request's lookup waits, another runs to its end; the held request then reuses what the store had
// and answers exactly as the cache-less reference; cancelling it or destroying the engine meanwhile
// ends cleanly; values that fail their checks end the chain. Nothing is timed: the waits are
// liveness bounds. Schema registration's reads: schema_remote_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/in_flight_test_util.h"
#include "engine/modular_test_util.h"
#include "engine/remote_test_util.h"

namespace promptcache {
namespace {

using in_flight_test::Cat;
using in_flight_test::Ids;

using remote_test::kLiveness;
using remote_test::LatchTier;
using remote_test::MakeEngine;
using remote_test::Options;
using remote_test::Store;
using remote_test::Submit;

// The remote names of a prompt's full blocks (default namespace).
std::vector<std::string> Names(Engine& e, const std::vector<int32_t>& prompt) {
  BlockCache* cache = static_cast<EngineImpl&>(e).cache();
  std::vector<std::string> names;
  for (const BlockKey& k : cache->ChainKeys(prompt, {})) names.push_back(cache->RemoteKeyOf({}, k));
  return names;
}

// P (50 tokens) computed by a first replica: the store holds its 3 full blocks (and the block
// after them, which holds the tokens it generated). B shares those 48 tokens and goes on with
// others: a lookup of B finds 3 blocks in the store and misses the 4th.
const std::vector<int32_t> kP = Ids(50, 1);
const std::vector<int32_t> kB = Cat(Ids(50, 1), Ids(40, 2));

void ComputeP(Store* store) {
  auto writer = MakeEngine(store);
  const CompletionResult r = Submit(*writer, kP)->Wait();
  PC_CHECK(r.status.ok());
}

// A second replica on the store P's replica wrote.
std::unique_ptr<Engine> ReaderOfP(Store* store) {
  ComputeP(store);
  return MakeEngine(store);
}

// Holds the store's reads of B's blocks, submits B and waits until its lookup reaches them.
std::shared_ptr<RequestHandle> SubmitHeldB(Store* store, Engine& e) {
  store->Hold(Names(e, kB));
  auto b = Submit(e, kB);
  EXPECT_TRUE(store->WaitEntered(1)) << "B's lookup never reached the store";
  return b;
}

int RemoteTokens(const CompletionResult& r) {
  int n = 0;
  for (const SourceRun& run : r.sources) n += run.source == TokenSource::kRemote ? run.length : 0;
  return n;
}

// On a build that looks the remote tier up on the engine thread, A cannot finish while B's
// lookup waits: this test then fails at A's wait.
TEST(RemoteFetch, AnotherRequestRunsWhileOnesLookupWaits) {
  Store store;
  auto e = ReaderOfP(&store);
  const std::vector<int32_t> a = Ids(40, 3);
  ASSERT_TRUE(Submit(*e, a)->Wait().status.ok());  // A's two blocks now in RAM
  const std::vector<std::string> names = Names(*e, kB);
  ASSERT_EQ(names.size(), 5u);
  store.Hold(names);
  auto b = Submit(*e, kB);
  ASSERT_TRUE(store.WaitEntered(1)) << "B's lookup never reached the store";
  auto again = Submit(*e, a);
  const bool a_done = again->WaitFor(kLiveness);
  store.Open();
  ASSERT_TRUE(a_done) << "A did not finish while B's remote lookup waited";
  const CompletionResult ra = again->Wait();
  EXPECT_EQ(ra.cached_tokens, 32);
  EXPECT_EQ(ra.tokens, Reference(e->model(), a, 8));
  ASSERT_TRUE(b->WaitFor(kLiveness));
  const CompletionResult rb = b->Wait();
  ASSERT_TRUE(rb.status.ok()) << rb.status.message();
  EXPECT_EQ(rb.cached_tokens, 48);
  EXPECT_EQ(RemoteTokens(rb), 48);
  EXPECT_GT(rb.remote_ms, 0);
  EXPECT_GE(rb.queue_ms, rb.remote_ms);
  EXPECT_EQ(rb.tokens, Reference(e->model(), kB, 8));
  EXPECT_EQ(e->Stats().remote.loads, 3u);
  // One lookup: the request's own lookup found the fetched blocks in RAM and asked nothing more.
  std::lock_guard<std::mutex> lock(store.mu);
  for (const std::string& n : names) EXPECT_EQ(store.asked[n], 1) << n;
  EXPECT_FALSE(store.no_deadline);
}

// Two requests for different prefixes that only the store holds, its reads of A's held: B's
// fetch goes on beside A's (the fetcher serves several at once), and B is answered, token for
// token as a replica holding its prefix in RAM answers, while A's reads are still held; then A
// is let through and answered as that replica answers. Mutation: a fetcher of one thread (B's
// fetch queued behind A's, which waits up to its 60 s deadline) fails this at B's wait.
TEST(RemoteFetch, AnotherRequestsFetchGoesOnWhileOnesIsHeld) {
  Store store, other;
  const std::vector<int32_t> pa = Ids(50, 21), pb = Ids(50, 22);
  auto writer = MakeEngine(&store);
  auto local = MakeEngine(&other);  // the reference: a replica that computed both prefixes
  for (Engine* w : {writer.get(), local.get()}) {
    ASSERT_TRUE(Submit(*w, pa)->Wait().status.ok());
    ASSERT_TRUE(Submit(*w, pb)->Wait().status.ok());
  }
  const std::vector<int32_t> a = Cat(pa, Ids(20, 23)), b = Cat(pb, Ids(20, 24));
  auto e = MakeEngine(&store);
  ASSERT_GT(static_cast<EngineImpl&>(*e).options().cache_redis_readers, 1);
  store.Hold(Names(*e, a));
  auto ha = Submit(*e, a);
  ASSERT_TRUE(store.WaitEntered(1)) << "A's lookup never reached the store";
  auto hb = Submit(*e, b);
  const bool b_done = hb->WaitFor(kLiveness);
  const bool a_waiting = !ha->WaitFor(0);  // the latch is shut: A cannot have its values
  store.Open();
  ASSERT_TRUE(b_done) << "B's fetch waited for A's";
  EXPECT_TRUE(a_waiting);
  // Its 48 prefix tokens read from the store, its answer the local replica's and the reference's.
  const auto expect_as_local = [&](const CompletionResult& r, const std::vector<int32_t>& prompt) {
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.cached_tokens, 48);
    EXPECT_EQ(RemoteTokens(r), 48);
    const CompletionResult l = Submit(*local, prompt)->Wait();
    EXPECT_EQ(l.cached_tokens, 48);
    EXPECT_EQ(r.tokens, l.tokens);
    EXPECT_EQ(r.tokens, Reference(e->model(), prompt, 8));
  };
  expect_as_local(hb->Wait(), b);
  ASSERT_TRUE(ha->WaitFor(kLiveness));
  expect_as_local(ha->Wait(), a);
  EXPECT_EQ(e->Stats().remote.loads, 6u);
  EXPECT_EQ(e->Stats().fetching, 0);
  EXPECT_FALSE(store.no_deadline);
}

// A burst larger than --parallel: each lookup holds a slot until its values are back, so two
// go to the fetcher and the rest stay queued (no more lookups sent, nor values held, than slots).
// Mutation: the fetch not counted in TakeAdmitted sends all four (fetching 4, queued 0).
TEST(RemoteFetch, LookupsAtOnceAreBoundedByTheSlots) {
  Store store;
  ComputeP(&store);
  EngineOptions o = Options();
  o.parallel = 2;
  auto e = MakeEngine(&store, o);
  const std::vector<std::string> names = Names(*e, kP);
  store.Hold(names);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(Submit(*e, Cat(kP, Ids(20, 10 + i))));
  ASSERT_TRUE(store.WaitEntered(1));
  // Three turns of the engine's loop after the four were queued: enough for it to send them all
  // to the fetcher, were they not bounded. None can be admitted while the latch holds.
  auto& impl = static_cast<EngineImpl&>(*e);
  for (int i = 0; i < 3; ++i) impl.RunOnEngineThread([] {});
  const EngineStats st = e->Stats();
  EXPECT_EQ(st.fetching, 2);
  EXPECT_EQ(st.queued, 2);
  EXPECT_EQ(st.active, 0);
  store.Open();
  for (size_t i = 0; i < hs.size(); ++i) {
    ASSERT_TRUE(hs[i]->WaitFor(kLiveness));
    const CompletionResult r = hs[i]->Wait();
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.cached_tokens, 48) << i;
    EXPECT_EQ(r.tokens, Reference(e->model(), Cat(kP, Ids(20, 10 + int(i))), 8)) << i;
  }
  EXPECT_EQ(e->Stats().fetching, 0);
}

TEST(RemoteFetch, ACancelledRequestIsDroppedWhenItsLookupReturns) {
  Store store;
  auto e = ReaderOfP(&store);
  auto b = SubmitHeldB(&store, *e);
  b->Cancel();
  store.Open();
  ASSERT_TRUE(b->WaitFor(kLiveness));
  const CompletionResult rb = b->Wait();
  EXPECT_EQ(rb.finish_reason, "cancelled");
  EXPECT_TRUE(rb.tokens.empty());
  // Its values went unused and are freed, though its handle is still held.
  EXPECT_EQ(store.Live(), 0);
  // The engine goes on: the same prompt reads the store itself (the cancelled request took
  // nothing into the cache) and answers as the reference.
  const CompletionResult again = Submit(*e, kB)->Wait();
  EXPECT_EQ(again.cached_tokens, 48);
  EXPECT_EQ(RemoteTokens(again), 48);
  EXPECT_EQ(again.tokens, Reference(e->model(), kB, 8));
  EXPECT_EQ(e->Stats().requests_cancelled, 1u);
}

// Two fetcher threads, both held in the store's reads (B's and C's), and D's lookup queued behind
// them: destroying the engine ends both held reads within their deadline, D's is not sent, and
// every request is answered.
TEST(RemoteFetch, DestroyingTheEngineEndsALookupWithinItsDeadline) {
  Store store;
  ComputeP(&store);
  EngineOptions o = Options(/*deadline_ms=*/2000);
  o.cache_redis_readers = 2;
  auto e = MakeEngine(&store, o);
  const std::vector<int32_t> c_prompt = Ids(60, 4);
  std::vector<std::string> held = Names(*e, kB), c_names = Names(*e, c_prompt);
  held.insert(held.end(), c_names.begin(), c_names.end());
  store.Hold(held);
  auto b = Submit(*e, kB);
  auto c = Submit(*e, c_prompt);
  ASSERT_TRUE(store.WaitEntered(2));
  auto d = Submit(*e, Ids(60, 5));  // also a lookup, behind B's and C's in the fetcher
  auto destroyed = std::async(std::launch::async, [&] { e.reset(); });
  ASSERT_EQ(destroyed.wait_for(std::chrono::duration<double>(kLiveness)), std::future_status::ready)
      << "the engine's destructor waits on the lookup";
  for (auto* h : {&b, &c, &d}) {
    ASSERT_TRUE((*h)->WaitFor(kLiveness));
    const CompletionResult r = (*h)->Wait();
    EXPECT_TRUE(!r.status.ok() || r.finish_reason == "cancelled") << r.finish_reason;
  }
  EXPECT_FALSE(store.no_deadline);  // the lookup ran under its deadline
  EXPECT_EQ(store.Live(), 0);
}

// A prompt with segments: its prefix read off the engine thread, then its segments looked up and
// planned as usual (a miss here, computed in place and stored).
TEST(RemoteFetch, APromptWithSegmentsPlansThemAfterItsFetchedPrefix) {
  Store store;
  ComputeP(&store);
  EngineOptions o = Options();
  o.segment_cache = true;
  o.segment_min_tokens = 16;
  auto e = MakeEngine(&store, o);
  CompletionRequest req = Greedy(kB, 8);
  req.segments.push_back({48, 90});
  auto h = e->Submit(req);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->WaitFor(kLiveness));
  const CompletionResult r = (*h)->Wait();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.cached_tokens, 48);
  EXPECT_EQ(RemoteTokens(r), 48);
  EXPECT_EQ(r.segment_lookups, 1);
  EXPECT_EQ(r.segment_stores, 1);
  EXPECT_EQ(r.tokens, Reference(e->model(), kB, 8));
}

// A segment (48 tokens, 3 blocks) that a first replica stored in the store, and the reference:
// the answer of a replica with the segment in its RAM to a prompt that reuses it.
struct SegmentCase {
  Store store;
  EngineOptions o = Options();
  std::vector<int32_t> g = Ids(48, 9);
  CompletionRequest sr = Greedy(Cat(Cat(Ids(20, 8), g), Ids(10, 11)), 8);
  CompletionResult ref;
  std::vector<std::string> names;  // the segment's blocks' names in the store

  std::unique_ptr<Engine> Reader() {
    o.segment_cache = true;
    o.segment_min_tokens = 16;
    CompletionRequest wr = Greedy(Cat(Ids(30, 7), g), 8);
    wr.segments.push_back({30, 78});
    sr.segments = {{20, 68}};
    PC_CHECK((*MakeEngine(&store, o)->Submit(wr))->Wait().segment_stores == 1);
    Store other;
    auto local = MakeEngine(&other, o);
    PC_CHECK((*local->Submit(wr))->Wait().segment_stores == 1);
    ref = (*local->Submit(sr))->Wait();
    PC_CHECK(ref.segment_hits == 1);
    auto e = MakeEngine(&store, o);
    auto& impl = static_cast<EngineImpl&>(*e);
    for (const BlockKey& k : impl.segments()->Keys(g, {})) {
      names.push_back(impl.cache()->RemoteKeyOf({}, k));
    }
    return e;
  }
};

// A segment's blocks are read off the engine thread too: while the store holds the reads of its
// blocks, another request runs to its end; then the prompt reuses the segment from the store
// and answers as the replica with the segment in its RAM. On a build whose segment lookups read
// the store on the engine thread (AppendCached), A cannot finish: this test then fails there.
TEST(RemoteFetch, ASegmentsBlocksAreReadOffTheEngineThread) {
  SegmentCase c;
  auto e = c.Reader();
  ASSERT_TRUE(Submit(*e, Ids(40, 3))->Wait().status.ok());
  c.store.Hold(c.names);
  auto h = e->Submit(c.sr);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(c.store.WaitEntered(1)) << "the segment's lookup never reached the store";
  auto a = Submit(*e, Ids(40, 3));
  const bool a_done = a->WaitFor(kLiveness);
  c.store.Open();
  ASSERT_TRUE(a_done) << "A did not finish while a segment's remote lookup waited";
  ASSERT_TRUE((*h)->WaitFor(kLiveness));
  const CompletionResult r = (*h)->Wait();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.segment_hits, 1);
  EXPECT_EQ(r.cached_tokens, c.ref.cached_tokens);
  EXPECT_EQ(r.tokens, c.ref.tokens);
  EXPECT_EQ(e->Stats().remote.loads, 3u);
  std::lock_guard<std::mutex> lock(c.store.mu);
  for (const std::string& n : c.names) EXPECT_EQ(c.store.asked[n], 1) << n;
}

// A segment block whose value fails its checks: the segment is a miss (computed and stored
// again), and the engine thread does not ask the store for it a second time (a segment's lookup
// at admission reads RAM and disk only). Mutation: BlockCache::AppendCached asking the store
// where RAM and disk miss (as it did), the second block is asked twice and counted invalid twice.
TEST(RemoteFetch, ACorruptSegmentBlockIsAMissAskedOnce) {
  SegmentCase c;
  auto e = c.Reader();
  {
    std::lock_guard<std::mutex> lock(c.store.mu);
    std::string& v = c.store.values.at(c.names[1]);
    v[v.size() / 2] ^= 0x55;
    c.store.asked.clear();
  }
  const CompletionResult r = (*e->Submit(c.sr))->Wait();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.segment_hits, 0);
  EXPECT_EQ(r.segment_stores, 1);
  EXPECT_EQ(e->Stats().remote.invalid, 1u);
  std::lock_guard<std::mutex> lock(c.store.mu);
  EXPECT_EQ(c.store.asked[c.names[1]], 1);
}

// A schema's modules that another replica encoded are read off the engine thread too: a replica
// that registered the schema without encoding it serves a prompt whose modules' reads the store
// holds, while another request runs to its end; the prompt then reuses every module from the
// store and answers as a replica that encoded them itself. On a build whose module gathers read
// the store on the engine thread (AppendCached), A cannot finish: this test then fails there.
TEST(RemoteFetch, ModulesAreReadOffTheEngineThread) {
  Store store, other;
  ASSERT_TRUE(MakeEngine(&store)->LoadSchemaFile(kStorySchema).ok());
  auto local = MakeEngine(&other);
  ASSERT_TRUE(local->LoadSchemaFile(kStorySchema).ok());
  const CompletionResult ref = (*local->SubmitPml(kLily, Greedy({}, 8)))->Wait();
  ASSERT_TRUE(ref.status.ok());
  ASSERT_GT(ref.cached_tokens, 0);
  auto e = MakeEngine(&store);
  SchemaLoadOptions lazy;
  lazy.encode = false;
  ASSERT_TRUE(e->LoadSchemaFile(kStorySchema, lazy).ok());
  ASSERT_TRUE(Submit(*e, Ids(40, 3))->Wait().status.ok());
  std::vector<std::string> names;  // every value in the store: the modules'
  for (const auto& [name, value] : store.values) names.push_back(name);
  store.Hold(names);
  auto h = e->SubmitPml(kLily, Greedy({}, 8));
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_TRUE(store.WaitEntered(1)) << "the modules' lookup never reached the store";
  auto a = Submit(*e, Ids(40, 3));
  const bool a_done = a->WaitFor(kLiveness);
  store.Open();
  ASSERT_TRUE(a_done) << "A did not finish while a module's remote lookup waited";
  ASSERT_TRUE((*h)->WaitFor(kLiveness));
  const CompletionResult r = (*h)->Wait();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.cached_tokens, ref.cached_tokens);
  EXPECT_EQ(r.encoded_tokens, 0);
  EXPECT_EQ(r.tokens, ref.tokens);
  EXPECT_GT(e->Stats().remote.loads, 0u);
  std::lock_guard<std::mutex> lock(store.mu);
  for (const auto& [name, n] : store.asked) EXPECT_LE(n, 1) << name;  // each asked once at most
}

// Warming a prefix (POST /v1/cache/warm) reads the store on the caller's thread: the engine
// serves others meanwhile.
TEST(RemoteFetch, WarmingReadsTheStoreOffTheEngineThread) {
  Store store;
  auto e = ReaderOfP(&store);
  store.Hold(Names(*e, kB));
  auto warm = std::async(std::launch::async, [&] { return e->WarmPrefix(kB, ""); });
  ASSERT_TRUE(store.WaitEntered(1));
  const std::vector<int32_t> a = Ids(20, 5);
  auto ha = Submit(*e, a);
  const bool a_done = ha->WaitFor(kLiveness);
  store.Open();
  ASSERT_TRUE(a_done) << "A did not finish while the warm's remote lookup waited";
  EXPECT_EQ(ha->Wait().tokens, Reference(e->model(), a, 8));
  ASSERT_EQ(warm.wait_for(std::chrono::duration<double>(kLiveness)), std::future_status::ready);
  const Result<int> cached = warm.get();
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 48);
  const CompletionResult rb = Submit(*e, kB)->Wait();
  EXPECT_GE(rb.cached_tokens, 80);  // warmed whole
  EXPECT_EQ(rb.tokens, Reference(e->model(), kB, 8));
}

// Replaces the store's value of B's block 1 with `tamper(value)`.
void Tamper(Store* store, Engine& e, const std::function<std::string(std::string)>& tamper) {
  const std::string name = Names(e, kB)[1];
  std::lock_guard<std::mutex> lock(store->mu);
  store->values[name] = tamper(store->values.at(name));
}

// A byte of the value flipped: its checksum fails.
std::string Corrupt(std::string v) {
  v[v.size() / 2] ^= 0x55;
  return v;
}

void ExpectChainEndsAtBlock1(Store* store, Engine& e) {
  const CompletionResult r = Submit(e, kB)->Wait();
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.cached_tokens, 16);
  EXPECT_EQ(RemoteTokens(r), 16);
  EXPECT_EQ(r.tokens, Reference(e.model(), kB, 8));
  const EngineStats st = e.Stats();
  EXPECT_EQ(st.remote.loads, 1u);    // block 0 only: nothing after the rejected value
  EXPECT_EQ(st.remote.invalid, 1u);  // block 1
}

TEST(RemoteFetch, ACorruptValueEndsTheChain) {
  Store store;
  auto e = ReaderOfP(&store);
  Tamper(&store, *e, Corrupt);
  ExpectChainEndsAtBlock1(&store, *e);
}

// A well-formed record under block 1's key, checksum and all, whose tokens are not the
// prompt's: only the check of the tokens against the chain's rejects it.
TEST(RemoteFetch, ARecordOfOtherTokensUnderTheKeyEndsTheChain) {
  Store store;
  auto e = ReaderOfP(&store);
  const Model& m = e->model();
  const BlockKey key = static_cast<EngineImpl&>(*e).cache()->ChainKeys(kB, {})[1];
  Tamper(&store, *e, [&](std::string v) {
    BlockPool pool(m.MakeKvLayout(KvType::kF16, 16), 0, false);
    const BlockId block = *pool.Allocate();
    Result<BlockRecord> r = DecodeBlock(v, key, m.fingerprint(), &pool, block);
    PC_CHECK(r.ok());
    r->tokens[3] = r->tokens[3] == 7 ? 8 : 7;
    std::string forged = EncodeBlock(*r, m.fingerprint(), pool, block, 0);
    pool.Unref(block);
    return forged;
  });
  ExpectChainEndsAtBlock1(&store, *e);
}

// Two requests for one prefix, both looked up while the store is held: whichever's values are
// taken in first (with several readers the two fetches run at once, so either may end first)
// loads the three blocks; the other finds them kept (not loaded twice) or waits for what the
// first computes (in-flight sharing). Both answer as the reference, and no block is left behind.
TEST(RemoteFetch, TwoLookupsOfOnePrefixShareIt) {
  Store store;
  auto e = ReaderOfP(&store);
  auto b1 = SubmitHeldB(&store, *e);
  auto b2 = Submit(*e, kB);
  store.Open();
  const std::vector<int32_t> want = Reference(e->model(), kB, 8);
  int remote = 0;
  for (auto* h : {&b1, &b2}) {
    ASSERT_TRUE((*h)->WaitFor(kLiveness));
    const CompletionResult r = (*h)->Wait();
    EXPECT_GE(r.cached_tokens, 48);
    EXPECT_EQ(r.tokens, want);
    remote += RemoteTokens(r);
  }
  EXPECT_EQ(remote, 48);  // each block taken in once, by one of them
  EXPECT_EQ(e->Stats().remote.loads, 3u);
  // Once the slots are gone, only the cache holds blocks (none taken in twice and leaked).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLiveness);
  EngineStats st = e->Stats();
  while (st.kv_bytes_in_use != st.cache_ram_bytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = e->Stats();
  }
  EXPECT_EQ(st.kv_bytes_in_use, st.cache_ram_bytes);
}

// Fetched values are taken in a part per turn of the engine's loop, so that copying a long
// prefix does not hold up the others' steps: one block per turn here. The chain's parent and
// block index move along from part to part (mutation: SlicePlan keeping the plan's parent fails
// the second part's check: 16 cached tokens), a value that fails still ends its chain, and a
// segment's blocks are taken in the same way.
TEST(RemoteFetch, ValuesAreTakenInAPartPerTurn) {
  {
    Store store;
    auto e = ReaderOfP(&store);
    static_cast<EngineImpl&>(*e).set_adopt_parts(1);
    const CompletionResult r = Submit(*e, kB)->Wait();
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.cached_tokens, 48);
    EXPECT_EQ(RemoteTokens(r), 48);
    EXPECT_EQ(r.tokens, Reference(e->model(), kB, 8));
    EXPECT_EQ(e->Stats().remote.loads, 3u);
  }
  {
    Store store;
    auto e = ReaderOfP(&store);
    static_cast<EngineImpl&>(*e).set_adopt_parts(1);
    Tamper(&store, *e, Corrupt);
    ExpectChainEndsAtBlock1(&store, *e);
  }
  SegmentCase c;
  auto e = c.Reader();
  static_cast<EngineImpl&>(*e).set_adopt_parts(1);
  const CompletionResult r = (*e->Submit(c.sr))->Wait();
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.segment_hits, 1);
  EXPECT_EQ(r.cached_tokens, c.ref.cached_tokens);
  EXPECT_EQ(r.tokens, c.ref.tokens);
  EXPECT_EQ(e->Stats().remote.loads, 3u);
}

}  // namespace
}  // namespace promptcache
