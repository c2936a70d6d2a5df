// The per-request cache map (docs/server.md, "Cache map"): what a request asking for
// "cache_map": true gets beside its timings, for the web page's strip of tokens coloured by where
// their K/V came from. The engine reports the prompt's sources run-length encoded
// (CompletionResult::sources); this adds the generated tokens, the text of every token (for the
// page's hover) and an estimate of the prompt's time with nothing cached.
//
// Pure functions of the result and the prompt's tokens, unit-tested without a server.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "promptcache/engine.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {

// What the server keeps of a request that asked for a cache map.
struct CacheMapRequest {
  std::vector<int32_t> prompt;     // every prompt token, in the order the sources count them
  std::vector<int32_t> positions;  // modular prompts: their positions (empty: 0, 1, 2, ...)
  int block_size = 16;
};

// The source's name in the map: "ram", "disk", "remote", "module", "computed".
const char* TokenSourceName(TokenSource source);

// {"block_size", "prompt_tokens", "cached_tokens", "computed_tokens", "generated_tokens",
//  "ttft_ms", "recompute_estimate_ms", "runs": [{"source", "start", "length"}...],
//  "pieces": [token text...], "positions": [...] (modular only)}. The runs cover the prompt and
// then the generated tokens ("generated"); pieces hold the prompt's then the generated tokens'.
nlohmann::ordered_json CacheMapJson(const CacheMapRequest& request, const CompletionResult& result,
                                    const Tokenizer& tokenizer);

// GET /v1/cache/tree: every block in RAM, parents first (depth order), each with its key,
// parent key (null for a chain's first block), depth, token ids and their text, pinned, on_disk,
// hits, idle_seconds and kind ("prefix" or "module"): what the page draws as the prefix tree.
nlohmann::ordered_json CacheTreeJson(std::vector<CacheBlockInfo> blocks, int block_size,
                                     const Tokenizer& tokenizer);

// Adds `field` to the top-level object of a JSON body, or of a Server-Sent Event's
// "data: {...}\n\n". Text that is not an object comes back unchanged.
std::string AddJsonField(const std::string& body, const std::string& field,
                         const nlohmann::ordered_json& value);
std::string AddEventField(const std::string& event, const std::string& field,
                          const nlohmann::ordered_json& value);

}  // namespace promptcache
