// The server's /metrics page in Prometheus's text exposition format (version 0.0.4): the engine's
// counters and gauges (requests, tokens, cache hits, cache bytes in RAM and on disk, evictions,
// active and queued requests), a cumulative time-to-first-token histogram that the server keeps
// from each finished request, and HTTP responses by status code.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "promptcache/engine.h"

namespace promptcache {

// Upper bounds of the time-to-first-token histogram's buckets, in seconds: from a warm cache hit
// on a small model (milliseconds) to a cold multi-thousand-token prefill on 2 cores (tens of s).
inline constexpr std::array<double, 14> kTtftBucketsSeconds = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};

struct HistogramSnapshot {
  std::array<uint64_t, kTtftBucketsSeconds.size()> buckets{};  // per bucket, not cumulative
  uint64_t count = 0;
  double sum = 0;  // seconds
};

// One tenant's own traffic (--api-keys): what its key may read of /metrics.
struct TenantCounters {
  uint64_t requests = 0;  // completion requests answered (streamed or not)
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
};

// Thread-safe counters the server adds to the engine's: TTFT observations, HTTP statuses, and
// each tenant's requests and tokens.
class ServerMetrics {
 public:
  void ObserveTtft(double seconds);
  void CountResponse(int http_status);
  void ObserveTenant(const std::string& tenant, const CompletionResult& result);

  HistogramSnapshot Ttft() const;
  std::map<int, uint64_t> Responses() const;
  TenantCounters CountsOf(const std::string& tenant) const;

 private:
  mutable std::mutex mu_;
  HistogramSnapshot ttft_;
  std::map<int, uint64_t> responses_;
  std::map<std::string, TenantCounters> tenants_;
};

// What the connection layer saw (server/http_transport.h).
struct ConnectionStats {
  int open = 0;
  uint64_t refused = 0;    // beyond --max-connections or --max-connections-per-client
  uint64_t timed_out = 0;  // requests whose headers or body missed their deadline
  uint64_t refused_per_client = 0;  // of `refused`, beyond --max-connections-per-client
};

// A tenant's page: its own counters under the names the whole page gives the server's.
std::string FormatTenantMetrics(const TenantCounters& counters, const std::string& model);

// The whole page. `model` labels the promptcache_info metric.
std::string FormatMetrics(const EngineStats& stats, const HistogramSnapshot& ttft,
                          const std::map<int, uint64_t>& responses, const std::string& model,
                          const ConnectionStats& connections = {});

}  // namespace promptcache
