// The cross-request block cache: immutable, reference-counted KV blocks indexed by content keys,
// bounded in RAM, with an optional disk tier.
//
// Prefix caching keys each full block of a prompt by a chained hash (the previous block's key,
// this block's token ids, and a namespace: the model fingerprint), as vLLM does, so a lookup
// walks a new prompt block by block and stops at the first miss. The modular prompt cache stores
// module blocks here too under its own keys (chained the same way from a module's content key),
// and so does the segment cache (engine/segment_store.h), so all share one RAM budget and one
// disk tier.
//
// The cache holds one reference on each cached block. A block some sequence still uses has a
// higher count and is never evicted; unreferenced blocks go least-recently-used first, and only
// leaves (blocks no other cached block continues), so a chain is never cut in the middle.
//
// Sliding-window models (kv/kv_cache.h): an entry may hold its block whole or only its global
// part. A prefix hit of L tokens needs, on sliding layers, only the blocks a query at position L
// still sees: positions above L - W. So a prefix entry's sliding part, when the cache alone
// holds it, is evictable on its own (in the same least-recently-used order as whole blocks, and
// written whole to the disk tier first): the global part keeps the chain for longer hits, and a
// running sequence may still use it. A lookup returns only hits whose window blocks are complete
// in RAM or complete on disk (reloading their sliding parts), walking back to a shorter one
// otherwise, and hands out the blocks before the window as global references. Module entries
// are kept whole: they are reused at any position. Block files of global-only entries say so
// and load as global-only.
// Remote tier (kv/remote_tier.h), below the disk tier. No lookup reads it: LookupPrefix and
// AppendCached read RAM and disk only, so that the thread that owns the cache never waits on the
// network. The remote part is read in three parts instead: PlanRemotePrefix (on that thread: the
// chained keys after what RAM and disk hold), FetchRemotePrefix (on any other: the values up to
// the first miss), AdoptRemotePrefix (on the owner's thread again: each value checked like a
// block file and against the tokens and parent key the chain expects, the first that fails
// ending it), then LookupPrefix finds them in RAM. Chained blocks looked up one by one (a
// segment's, a module's) go the same way: PlanRemoteBlocks, then FetchRemotePrefix, then
// AdoptRemoteBlocks, then AppendCached finds them in RAM. Every block the cache takes in
// (computed, or loaded from disk and then evicted) is queued for writing there once; pinned ones
// without expiry.
//
// Pins are bounded: the bytes pinned blocks hold, in all and per owner (a tenant), stay within
// quotas (a pin that would pass one stops at the last block that fits, and says so), and every
// pin lapses: a counted pin (PinPrefix) `max_pin_seconds` after it was last set or hit, a timed
// one (PinPrefixFor) after its TTL, itself at most that long. ListPins and Unpin let an operator
// see and lift them; Drop(key, force) removes pinned chains too.
//
// Tenants: a prefix chain starts from a namespace key (`ns`, empty for the default namespace)
// instead of the empty key, so the chains of two namespaces share no key, in RAM, on disk or in
// the remote tier (whose keys also name the namespace). Module blocks live in the default one.
// Not thread-safe: the engine thread owns it (ChainKeys and RemoteKeyOf are pure, for any thread;
// RemoteLeading asks the store, for any thread but that one).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/disk_tier.h"
#include "kv/kv_cache.h"
#include "kv/remote_tier.h"

namespace promptcache {

struct BlockCacheOptions {
  size_t ram_bytes = size_t(1) << 30;
  double ttl_seconds = 0;          // idle entries older than this are evicted; 0: never
  int min_tokens = 0;              // prompts shorter than this are not cached
  int granularity = 0;             // reuse prefixes in multiples of this many tokens (0: block)
  int remote_ttl_seconds = 86400;  // expiry of what is written to the remote tier (pinned: none)
  int remote_batch = 8;            // chained keys asked of the remote tier ahead (pipelined)
  // The most bytes pinned blocks may hold (whole blocks, sliding parts included), in all and per
  // named owner (a tenant; the default owner "" is bounded by the total only).
  size_t pin_bytes = SIZE_MAX;
  size_t owner_pin_bytes = SIZE_MAX;
  // The longest a pin holds: a counted pin lapses this long after it was last set or hit, a
  // timed pin's TTL is cut to it. 0: counted pins hold until unpinned, timed ones for their TTL.
  double max_pin_seconds = 0;
};

struct BlockCacheStats {
  uint64_t lookups = 0, hits = 0, hit_tokens = 0;
  uint64_t evictions = 0, expirations = 0, disk_writes = 0, disk_loads = 0, disk_errors = 0;
  // Sliding parts evicted on their own, and lookups cut short for want of a window's block.
  uint64_t sliding_evictions = 0, window_misses = 0;
  uint64_t remote_loads = 0;  // blocks loaded from the remote tier
  // ram_bytes: what the entries hold (global parts, and sliding parts where they hold them).
  size_t ram_blocks = 0, ram_bytes = 0, disk_bytes = 0, disk_files = 0;
  size_t pinned_blocks = 0, pinned_bytes = 0;  // pinned_bytes: as the pin quotas count them
  uint64_t pins_limited = 0;                   // pins cut short by a pin quota
  bool has_remote = false;
  RemoteStats remote;
};

// Where a block of a prefix hit was before the lookup found it. LookupPrefix says kRam or kDisk;
// a block AdoptRemotePrefix took in is in RAM by then, and its caller, who knows which keys it
// took in, reports those as kRemote.
enum class BlockOrigin : uint8_t { kRam, kDisk, kRemote };

// How many leading tokens of a prompt each tier holds (a router's view; nothing is loaded).
struct TierCounts {
  int ram = 0, disk = 0, remote = 0;
  int local = 0;  // in RAM or on disk, block by block: what a lookup finds before the remote tier
};

struct CachedPrefixInfo {
  BlockKey key;  // the last block's key
  int tokens;    // prefix length
  bool in_ram, on_disk, pinned;
  double idle_seconds;
};

// One pinned prefix chain, named by its last pinned block (BlockCache::ListPins).
struct PinnedPrefixInfo {
  BlockKey key;       // the chain's last pinned block
  BlockKey ns;        // the namespace its chain starts from (empty: the default one)
  std::string owner;  // who pinned its last block ("" the default owner)
  int tokens = 0;     // prefix length up to that block
  size_t bytes = 0;   // the chain's pinned blocks, as the quotas count them (shared ones in each)
  int counted = 0;    // counted pins on its last block (PinPrefix)
  // Seconds until its last block's pin lapses (its earlier blocks may hold longer); < 0: never.
  double expires_in_seconds = -1;
};

// One cached block, for drawing the prefix tree (BlockCache::ListBlocks).
struct CachedBlockInfo {
  BlockKey key, parent;  // parent empty: the chain's first block
  int depth = 0;         // tokens before this block in its chain
  std::vector<int32_t> tokens;
  bool in_ram = true, on_disk = false, pinned = false;
  // A prefix chain's block (false: a schema module's or a segment's). Blocks on disk only don't
  // record which: listed as prefixes.
  bool prefix = false;
  bool segment = false;  // a segment's block (engine/segment_store.h)
  uint64_t hits = 0;  // prefix lookups that reused it (since it was last loaded into RAM)
  double idle_seconds = 0;
};

// A prefix lookup's remote part, planned on the thread that owns the cache
// (BlockCache::PlanRemotePrefix), sent from another (FetchRemotePrefix), and taken in on the
// owner's thread again (BlockCache::AdoptRemotePrefix): the chain keys that could extend what RAM
// and disk hold of a prompt, and their names in the remote tier. No names: nothing to ask.
struct RemotePrefixFetch {
  BlockKey ns;                     // the namespace the chain starts from
  BlockKey parent;                 // the key before keys[0] (ns for a chain's first block)
  int first = 0;                   // the index in the prompt's blocks of keys[0]
  std::vector<BlockKey> keys;      // the chain keys after the local hit, in order
  std::vector<std::string> names;  // their names in the remote tier
  int window = 2;                  // values asked for ahead (RemoteTier::Stream)
};

// Keys [from, from + n) of `fetch`, as a plan of their own (the chain's parent and first block
// moved along): for taking a plan's values in a part at a time.
RemotePrefixFetch SlicePlan(const RemotePrefixFetch& fetch, size_t from, size_t n);

// The values of fetch.names from `tier`, from the first up to the first miss, read under a
// RemoteBudget of `deadline_ms` (all the calls together); `stop` (may be null), asked after each
// value, ends it early. Touches no cache: any thread may call it.
std::vector<RemoteValue> FetchRemotePrefix(RemoteTier& tier, const RemotePrefixFetch& fetch,
                                           int deadline_ms,
                                           const std::function<bool()>& stop = nullptr);

class BlockCache {
 public:
  using Clock = std::chrono::steady_clock;

  // `disk` and `remote` may be null (no such tier).
  BlockCache(BlockPool* pool, std::string fingerprint, const BlockCacheOptions& options,
             std::unique_ptr<DiskTier> disk, std::unique_ptr<RemoteTier> remote = nullptr);
  ~BlockCache();

  const BlockCacheOptions& options() const { return options_; }
  // A new RAM budget; Maintain() evicts down to it.
  void SetRamBudget(size_t bytes) { options_.ram_bytes = bytes; }
  BlockPool* pool() const { return pool_; }
  DiskTier* disk() const { return disk_.get(); }
  RemoteTier* remote() const { return remote_.get(); }

  // The key of block `index` of a prefix chain after `parent` (empty for the first block).
  BlockKey ChainKey(const BlockKey& parent, std::span<const int32_t> tokens) const;

  // Appends to `seq` (by reference) the longest cached prefix of `tokens` in whole blocks,
  // loading blocks from the disk tier where RAM misses, and returns its length. At most
  // `max_tokens` tokens are matched (callers pass tokens.size() - 1, so the last prompt token is
  // always computed and yields logits). Positions are 0, 1, 2, ... as in plain prompts. With
  // sliding layers the hit is one whose last window is complete, and its blocks before that
  // window come as global references.
  // `ns`: the namespace the chain starts from. With `origins`, it receives one entry per block
  // of the hit: where the block was before this lookup (RAM, or read from the disk tier), for a
  // request's cache map. The remote tier is not asked: its part of the prefix is read apart
  // (PlanRemotePrefix, FetchRemotePrefix, AdoptRemotePrefix) and found here in RAM.
  int LookupPrefix(std::span<const int32_t> tokens, int max_tokens, KvSequence* seq,
                   const BlockKey& ns = {}, std::vector<BlockOrigin>* origins = nullptr);
  // The remote part of LookupPrefix(tokens, max_tokens, ..., ns), found without asking the
  // remote tier: the walk through RAM and disk (loading nothing), and from the first block
  // neither holds, the keys up to max_tokens. No names when there is no remote tier, when RAM and
  // disk hold the whole chain, or when it stops at a block they hold for another prompt.
  RemotePrefixFetch PlanRemotePrefix(std::span<const int32_t> tokens, int max_tokens,
                                     const BlockKey& ns = {}) const;
  // Indexes the values fetched for `fetch` (values[i] for fetch.keys[i]) as prefix blocks of
  // namespace fetch.ns: each checked as the record of its key, holding the prompt's tokens after
  // the block before it; the first that fails stops the chain (counted invalid). A key cached
  // meanwhile (the same prompt computed, or fetched for another request) is kept as it is,
  // if it is the prompt's. Returns the keys indexed from the values; `walked` (if given): how
  // many keys the chain went through (indexed or kept), fewer than values.size() if it stopped.
  std::vector<BlockKey> AdoptRemotePrefix(std::span<const int32_t> tokens,
                                          const RemotePrefixFetch& fetch,
                                          std::span<const RemoteValue> values,
                                          size_t* walked = nullptr);
  // The remote part of a lookup of chained blocks that AppendCached then reads one by one (a
  // segment's, a module piece's): from the first of `keys` that neither RAM nor disk holds, the
  // keys and their names in the remote tier. No names: no remote tier, or all held here.
  RemotePrefixFetch PlanRemoteBlocks(std::span<const BlockKey> keys) const;
  // Indexes the values fetched for such a plan (values[i] for fetch.keys[i]), each checked as the
  // record of its key (one that fails is counted invalid, and stops them); AppendCached then finds
  // them in RAM. A key cached meanwhile is kept. Returns how many were indexed.
  int AdoptRemoteBlocks(const RemotePrefixFetch& fetch, std::span<const RemoteValue> values);
  // The chained keys of the full blocks of `tokens` in namespace `ns`.
  std::vector<BlockKey> ChainKeys(std::span<const int32_t> tokens, const BlockKey& ns) const;
  // The key under which the remote tier holds a block.
  std::string RemoteKeyOf(const BlockKey& ns, const BlockKey& key) const {
    return RemoteKey(remote_prefix_, ns, key);
  }
  // How many leading blocks of `keys` the remote tier holds under namespace `ns` (their names as
  // RemoteKeyOf(ns, ...) gives them), 0 when there is no remote tier: a router's view, nothing
  // loaded. It asks the store on the calling thread and waits for its answer, so it must not be
  // called on the engine thread, which never waits on the network.
  int RemoteLeading(const BlockKey& ns, std::span<const BlockKey> keys) const;
  // The leading blocks of `keys` in RAM and on disk, in tokens (TierCounts::remote is left 0:
  // the caller asks the remote tier, off the engine thread).
  TierCounts Probe(const std::vector<BlockKey>& keys) const;

  // Registers the full blocks of `seq` (which holds `tokens` at positions 0..n-1, block-aligned
  // from its start) as cached prefixes, each entry holding what the sequence holds of its block.
  // Blocks already cached under the same key are kept, made complete again where the entry
  // lost its sliding part and the sequence has one. Returns the number of leading blocks now
  // cached under their keys (0 for a prefix under min_tokens): a prefill in flight marks them
  // ready for the requests waiting on it (kv/in_flight.h).
  int InsertPrefix(std::span<const int32_t> tokens, const KvSequence& seq,
                   const BlockKey& ns = {});

  // Pins (or unpins) the cached blocks of the longest cached prefix of tokens[0, n). Pinned
  // blocks are never evicted or expired. Returns the number of tokens pinned: a pin stops at
  // the first block that would take the pinned bytes past a quota (for `owner` or in all),
  // setting *limited. Blocks pinned already cost nothing and are renewed.
  int PinPrefix(std::span<const int32_t> tokens, bool pinned, const BlockKey& ns = {},
                const std::string& owner = "", bool* limited = nullptr);
  // Pins the same blocks for `ttl_seconds` from now (Anthropic's cache_control TTLs): until
  // then they are never evicted, expired or dropped; each prefix hit on a block renews its pin
  // for its TTL (the longest asked while it held). Counted pins (PinPrefix) are apart: a block
  // is pinned while either holds. Returns the number of tokens pinned.
  // Bounded like PinPrefix.
  int PinPrefixFor(std::span<const int32_t> tokens, double ttl_seconds, const BlockKey& ns = {},
                   const std::string& owner = "", bool* limited = nullptr);
  // New quotas (the engine lowers the total as running requests reserve K/V); pins already
  // held stay until they lapse.
  void SetPinBudget(size_t total, size_t per_owner) {
    options_.pin_bytes = total;
    options_.owner_pin_bytes = per_owner;
  }
  // The pinned chains, each by its last pinned block.
  std::vector<PinnedPrefixInfo> ListPins() const;
  // Lifts every pin (counted and timed) of the chain through `key_hex`: the block, the blocks
  // before it and those cached after it; the blocks stay cached. Empty key: every pin. Returns
  // the blocks unpinned; NotFound when the key names no cached block.
  Result<int> Unpin(const std::string& key_hex);
  // The clock every idle time, TTL and timed pin is read from (tests move it by hand).
  void SetClockForTesting(std::function<Clock::time_point()> now) { now_ = std::move(now); }

  // Generic keyed entries (module and segment blocks): a block's slots [begin, begin+count)
  // under `key`. `segment` marks a segment's entries (CachedBlockInfo::segment), also when
  // loaded from a lower tier. Contains: in RAM or on disk (the remote tier is not asked).
  bool Contains(const BlockKey& key) const;
  // Adds a reference to the cached span under `key` to seq, loading it from disk if RAM misses.
  // The remote tier is not asked: a caller reads its blocks there beforehand, off this thread
  // (PlanRemoteBlocks, FetchRemotePrefix, AdoptRemoteBlocks), and finds them here in RAM; a
  // value that failed its checks there is a miss here, not read again.
  bool AppendCached(const BlockKey& key, KvSequence* seq, bool segment = false);
  void Insert(const BlockKey& key, const BlockKey& parent, const KvSequence& seq, int slot_begin,
              std::span<const int32_t> tokens, bool segment = false);

  // Evicts unreferenced leaves, and sliding parts of prefix entries only the cache holds, least
  // recently used first (writing them to the disk tier first) until the RAM budget holds, and
  // expires idle ones. Called by the engine after each step.
  void Maintain();
  // Writes every RAM entry that is not yet on disk to the disk tier.
  Status SaveAll();
  // Drops one prefix chain's entries from RAM and disk (by its last block's key), or all
  // unpinned entries when key is empty. NotFound if the key is unknown. A pinned entry is an
  // InvalidArgument ("pinned") unless `force`, which drops pinned entries too.
  Status Drop(const std::string& key_hex, bool force = false);

  std::vector<CachedPrefixInfo> List() const;
  // Every block in RAM, with its parent: the prefix tree that List() shows only the leaves of.
  // Blocks in RAM, then up to `max_disk_only` blocks held by the disk tier only (their headers
  // read from disk; depth follows their parents where listed, else they start a chain).
  std::vector<CachedBlockInfo> ListBlocks(size_t max_disk_only = 4096) const;
  BlockCacheStats Stats() const;

 private:
  // Removes (spilling to disk) the unreferenced entries idle longer than the TTL.
  void ExpireIdle();
  struct Entry {
    BlockId block{};
    int begin = 0, count = 0;
    BlockKey parent;
    std::vector<int32_t> tokens;
    int depth = 0;     // tokens before this block in its chain
    int children = 0;  // cached entries whose parent this is
    int pins = 0;
    Clock::time_point pins_until{};  // when the counted pins lapse (with max_pin_seconds)
    std::string owner;               // who pinned it while unpinned (the pin quotas' owner)
    // A timed pin (PinPrefixFor): pinned until then, renewed by hits for pin_ttl_seconds.
    Clock::time_point pinned_until{};
    double pin_ttl_seconds = 0;
    Clock::time_point last_used;
    bool on_disk = false;
    bool sliding = true;     // holds the block's sliding part (a full reference)
    bool prefix = false;     // a prefix chain's block: its sliding part may go on its own
    bool segment = false;    // a segment's block
    uint64_t hits = 0;       // prefix lookups that reused it
    BlockKey ns;             // the namespace its chain starts from
    bool on_remote = false;  // written (queued) to the remote tier, or read from it
  };

  Entry* Find(const BlockKey& key);
  // Walks the prefix chain of `tokens` (whole blocks) through RAM and disk, calling `visit` on
  // each entry until the first block held in neither; returns the tokens walked.
  int ForEachPrefixEntry(std::span<const int32_t> tokens, const BlockKey& ns,
                         const std::function<void(const BlockKey&, Entry&)>& visit);
  // `prefix`: the key is a prefix chain's (its sliding part may be evicted on its own).
  bool LoadFromDisk(const BlockKey& key, bool prefix, const BlockKey& ns = {});
  // Indexes a record read from the remote tier into a fresh block, when it checks out (and, for
  // a prefix, holds `tokens` after `parent`); else counts it invalid.
  bool AdoptRemote(const BlockKey& key, std::string_view value, const BlockKey& ns,
                   const BlockKey* parent, std::span<const int32_t> tokens);
  // The remote part of a prefix lookup from block `first` (after `parent`) up to `limit` tokens.
  RemotePrefixFetch RemoteChain(std::span<const int32_t> tokens, int limit, const BlockKey& ns,
                                const BlockKey& parent, int first) const;
  // Whether a cached entry is the prompt's block: a full block of `tokens` after `parent` (a hash
  // collision of chain keys would serve another prompt's K/V).
  bool IsBlockOf(const Entry& e, const BlockKey& parent, std::span<const int32_t> tokens) const;
  // Values asked for ahead when a chain is read from the remote tier (RemoteTier::Stream).
  int RemoteWindow() const;
  // Queues the entry's block for the remote tier unless it is there already.
  void WriteRemote(const BlockKey& key, Entry& e);
  void AddEntry(const BlockKey& key, Entry e);
  // Indexes a block record just read into `block` (from disk or the remote tier), with `e`
  // saying where it came from; a cached parent gives its depth.
  void AddLoaded(const BlockKey& key, BlockId block, BlockRecord&& r, Entry e);
  void RemoveEntry(const BlockKey& key, bool spill_to_disk);
  // Writes the entry's block to the disk tier (whole where the block is complete).
  Status WriteEntry(const BlockKey& key, const Entry& e);
  // Whether the disk tier has the block as complete as it is in RAM.
  bool OnDisk(const BlockKey& key, BlockId block) const;
  // WriteEntry unless OnDisk (failures are counted and logged), and WriteRemote.
  void Spill(const BlockKey& key, Entry& e);
  Clock::time_point Now() const { return now_ ? now_() : Clock::now(); }
  static Clock::duration ToDuration(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  // By a counted pin or a timed one that has not expired.
  bool Pinned(const Entry& e) const;
  bool CountedPinHolds(const Entry& e) const;
  // What a pinned entry counts against the pin quotas: its whole block.
  size_t PinBytes() const { return pool_->layout().block_bytes(true); }
  // The bytes pinned now, in all and by `owner`.
  void PinnedBytes(const std::string& owner, size_t* total, size_t* owned) const;
  // Walks the cached prefix of `tokens` and applies `pin` to each entry while the quotas hold.
  int PinWithin(std::span<const int32_t> tokens, const BlockKey& ns, const std::string& owner,
                bool* limited, const std::function<void(const BlockKey&, Entry&)>& pin);
  // Drops lapsed counted pins (so that an unpin later does not count against a new pin).
  void ClearLapsedPins();
  bool Evictable(const Entry& e) const;
  // Its sliding part is evictable on its own.
  bool Strippable(const Entry& e) const;
  void StripSliding(const BlockKey& key, Entry& e);
  // Gives a global-only entry its sliding part back from a complete file on the disk tier.
  // Returns whether the entry is complete.
  bool MakeComplete(const BlockKey& key, Entry& e);
  // Makes a global-only entry complete with `block` (complete, holding the same tokens at slot
  // `begin`), taking a full reference to it in place of the entry's own.
  void Complete(Entry* e, BlockId block, int begin);
  // Whether block b of a prefix hit of n blocks is in the window of the query after it (always
  // without sliding layers).
  bool InWindow(size_t b, size_t n) const;
  // The number of blocks of `chain` (a prefix) usable as a hit of n blocks: n walked back, in
  // steps of `step` blocks, to one whose window blocks are complete.
  size_t UsableBlocks(const std::vector<BlockKey>& chain, size_t n, size_t step);
  size_t RamBytes() const { return held_bytes_; }

  BlockPool* pool_;
  std::string fingerprint_;
  BlockCacheOptions options_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RemoteTier> remote_;
  std::string remote_prefix_;  // RemoteKeyPrefix of this model and layout
  std::map<BlockKey, Entry> entries_;
  size_t held_bytes_ = 0;  // what the entries hold: see BlockCacheStats::ram_bytes
  BlockCacheStats stats_;
  std::function<Clock::time_point()> now_;  // null: Clock::now
};

}  // namespace promptcache
