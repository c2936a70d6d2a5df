// What the engine's cache holds, as its cache API reports it: cached prefix chains
// (Engine::ListCache) and blocks (ListCacheBlocks), pins (ListPins, PinPrefix), and how much of
// a prompt each tier would serve (LookupCache, LookupPrompt). Plain values, copied out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace promptcache {

// One cached prefix chain, named by its last block (Engine::ListCache).
struct CacheEntryInfo {
  std::string key;  // hex key of the prefix's last block
  int tokens = 0;   // prefix length
  bool in_ram = false;
  bool on_disk = false;
  bool pinned = false;
  double idle_seconds = 0;
};

// One pinned prefix chain, named by its last pinned block (Engine::ListPins).
struct PinInfo {
  std::string key;                 // hex key of the chain's last pinned block
  std::string namespace_key;       // hex root key of its cache namespace; "" the default namespace
  std::string tenant;              // who pinned its last block ("" the default tenant)
  int tokens = 0;                  // prefix length up to that block
  size_t bytes = 0;                // its pinned blocks, as the pin quotas count them
  int counted_pins = 0;            // counted pins on its last block
  double expires_in_seconds = -1;  // until its last block's pin lapses; < 0: never
};

// What Engine::PinPrefix pinned.
struct PinOutcome {
  int tokens = 0;        // the pinned prefix, in whole blocks
  bool limited = false;  // stopped short at a pin quota
};

// One cached block, for drawing the prefix tree: chains share their first blocks.
struct CacheBlockInfo {
  std::string key, parent;  // hex; parent empty: a chain's first block
  int depth = 0;            // tokens before the block in its chain
  std::vector<int32_t> tokens;
  bool on_disk = false, pinned = false;
  bool prefix = true;  // false: a schema module's block, or a segment's
  uint64_t hits = 0;   // prefix lookups that reused it
  double idle_seconds = 0;
  bool in_ram = true;    // false: on the disk tier only (`prefix` is then not known: true)
  bool segment = false;  // a segment's block (CompletionRequest::segments); `prefix` is false
};

// How many leading tokens of a prompt each cache tier holds (Engine::LookupCache). For a modular
// prompt (Engine::LookupPrompt): how many of its tokens come from cached pieces held in RAM, on
// disk but not in RAM, and in the remote tier only.
struct CacheTierCounts {
  int ram = 0, disk = 0, remote = 0;
  int prompt_tokens = 0;  // LookupPrompt: every token the prompt includes
  int reusable = 0;  // what a request would reuse now: the prefix found in RAM, then disk, then
                     // remote, in whole blocks, at most the prompt minus its last token; and
                     // the tokens of `segments`
  // LookupCache with segments (and the engine's segment cache on): the tokens of the segments
  // beyond `reusable`'s prefix found cached whole in some tier, as a request would look them
  // up (those shorter than segment_min_tokens are not).
  int segments = 0;
};

}  // namespace promptcache
