// POST /v1/bench/savings: the web page's "Savings" charts, measured on the server's own model
// by the same code as `promptcache bench --plot` (engine/savings.h): generation with and without
// the KV cache, time to first token cold / prefix hit / schema modules, and K/V bytes per token
// by KV type. The generation series runs on the engine's thread, so requests wait for it; the
// TTFT series goes through the engine's queue like any request.
#pragma once

#include <optional>
#include <string_view>

#include "core/status.h"
#include "nlohmann/json.hpp"
#include "promptcache/engine.h"
#include "server/openai_request.h"

namespace promptcache {

struct SavingsRequest {
  int max_tokens = 64;   // longest generation timed with and without the KV cache
  int max_prompt = 256;  // longest prompt timed for time to first token
};

// Limits that keep one request from holding the engine for long (the no-cache series is
// quadratic in max_tokens).
inline constexpr int kMaxSavingsTokens = 256;
inline constexpr int kMaxSavingsPrompt = 4096;

// The body: {"max_tokens": N, "max_prompt": N}, both optional; an empty body takes the defaults.
// Returns the error to send, or nullopt with *out set. (In savings_request.cc, part of
// pc_server_api: it needs no engine, and fuzz/routes_fuzz.cc reaches it.)
std::optional<ApiError> ParseSavingsBody(std::string_view body, SavingsRequest* out);

// Runs the three measurements: {"object": "bench.savings", "generation": [{tokens,
// with_cache_ms, no_cache_ms}], "ttft": [{prompt_tokens, cold_ms, prefix_hit_ms, modules_ms,
// modules_prompt_tokens}], "kv_bytes_per_token": {"f16": N, ...}, "kv_type": the server's}.
Result<nlohmann::ordered_json> MeasureSavings(Engine& engine, const SavingsRequest& request);

}  // namespace promptcache
