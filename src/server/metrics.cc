#include "server/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace promptcache {
namespace {

// Prometheus floats: integers print without a fraction, others with enough digits.
std::string Num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.9g", v);
  }
  return buf;
}

// Label values escape backslash, double quote and newline.
std::string EscapeLabel(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Page {
 public:
  // A metric family with one unlabelled sample.
  void Add(const char* name, const char* type, const char* help, double value) {
    Header(name, type, help);
    Sample(name, "", value);
  }
  void Header(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, const std::string& labels, double value) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + Num(value) + "\n";
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// A page that begins with promptcache_info, the family both pages (the server's, a tenant's)
// lead with.
Page InfoPage(const std::string& model) {
  Page p;
  p.Header("promptcache_info", "gauge", "The model this server serves.");
  p.Sample("promptcache_info", "model=\"" + EscapeLabel(model) + "\"", 1);
  return p;
}

// --fidelity-sample: the sampled requests' evaluations against the full recompute. Ratios pool
// the steps of every sample; with no sample yet they are NaN (nothing measured), not a value.
void AddFidelity(Page& p, const FidelityStats& f) {
  const FidelityTally t = f.Total();
  const double none = std::nan("");
  p.Add("promptcache_fidelity_samples_total", "counter",
        "Requests that reused approximate K/V (schema modules, segments) evaluated against the "
        "full recompute of their prompt (--fidelity-sample), in the background.",
        double(t.samples));
  p.Add("promptcache_fidelity_dropped_total", "counter",
        "Requests sampled for fidelity and not evaluated: the queue of pending evaluations was "
        "full.",
        double(f.dropped));
  p.Add("promptcache_fidelity_pending", "gauge",
        "Sampled requests waiting for their evaluation (it runs while the server is idle).",
        double(f.pending));
  p.Add("promptcache_fidelity_top1_margin_aware", "gauge",
        "Margin-aware top-1 agreement against the full recompute over the sampled requests' "
        "generated steps (teacher-forced) whose full-recompute top-2 margin is at least 0.1 "
        "logit: the headline fidelity (NaN before the first sample).",
        t.margin_steps > 0 ? double(t.margin_agreements) / double(t.margin_steps)
                           : (t.samples > 0 ? 1.0 : none));
  p.Add("promptcache_fidelity_top1", "gauge",
        "Top-1 agreement against the full recompute over every generated step of the sampled "
        "requests (teacher-forced; near ties included).",
        t.steps > 0 ? double(t.agreements) / double(t.steps) : none);
  p.Add("promptcache_fidelity_first_token_kl_mean", "gauge",
        "KL(full recompute || served) of the first generated token's distributions, in nats, "
        "averaged over the sampled requests.",
        t.samples > 0 ? t.first_token_kl_sum / double(t.samples) : none);
  p.Add("promptcache_fidelity_first_token_kl_max", "gauge",
        "The largest first-token KL(full recompute || served) of any sampled request, in nats.",
        t.samples > 0 ? t.first_token_kl_max : none);
}

// The request and token counters, then the prefix and segment lookups.
void AddRequests(Page& p, const EngineStats& s) {
  p.Add("promptcache_requests_total", "counter", "Completion requests submitted to the engine.",
        s.requests);
  p.Add("promptcache_requests_failed_total", "counter", "Completion requests that failed.",
        s.requests_failed);
  p.Add("promptcache_requests_rejected_total", "counter",
        "Completion requests refused because the queue was full.", s.requests_rejected);
  p.Add("promptcache_requests_cancelled_total", "counter",
        "Completion requests cancelled: their client went away (streamed or not) or the server "
        "stopped.",
        s.requests_cancelled);
  p.Add("promptcache_prompt_tokens_total", "counter", "Prompt tokens of all requests.",
        s.prompt_tokens);
  p.Add("promptcache_cached_tokens_total", "counter",
        "Prompt tokens whose K/V came from the prefix cache.", s.cached_tokens);
  p.Add("promptcache_computed_tokens_total", "counter", "Prompt tokens computed (not cached).",
        s.prompt_tokens >= s.cached_tokens ? s.prompt_tokens - s.cached_tokens : 0);
  p.Add("promptcache_prefix_shared_in_flight_tokens_total", "counter",
        "Of the cached tokens, those another request's prefill was computing at the time: a "
        "prefix shared by concurrent requests, computed once.",
        s.shared_in_flight_tokens);
  p.Add("promptcache_draft_tokens_total", "counter",
        "Speculative decoding: guessed tokens checked by the model (a prediction's, or the "
        "text's repeats).",
        s.draft_tokens);
  p.Add("promptcache_draft_accepted_tokens_total", "counter",
        "Of the guessed tokens, those the sampling confirmed: each saved a forward pass.",
        s.accepted_draft_tokens);
  p.Add("promptcache_in_flight_segment_waits_total", "counter",
        "Times a request waited for a segment another request was computing, then reused it: a "
        "segment shared by concurrent requests, computed once.",
        s.in_flight_segment_waits);
  p.Add("promptcache_generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
  p.Add("promptcache_cache_lookups_total", "counter", "Prefix cache lookups.", s.cache_lookups);
  p.Add("promptcache_cache_hits_total", "counter", "Lookups that reused at least one block.",
        s.cache_hits);
  p.Add("promptcache_segment_lookups_total", "counter",
        "Segments looked up (beyond the prefix hit, at least --segment-min-tokens long).",
        s.segment_lookups);
  p.Add("promptcache_segment_hits_total", "counter", "Segment lookups found cached.",
        s.segment_hits);
  p.Add("promptcache_segment_tokens_reused_total", "counter",
        "Tokens of reused segments whose K/V came from the cache (not recomputed).",
        s.segment_tokens_reused);
  p.Add("promptcache_segment_stores_total", "counter",
        "Segments stored after a miss, for later requests.", s.segment_stores);
  p.Add("promptcache_cache_hit_ratio", "gauge", "cache_hits_total / cache_lookups_total.",
        s.cache_lookups > 0 ? double(s.cache_hits) / double(s.cache_lookups) : 0.0);
  p.Add("promptcache_cached_token_ratio", "gauge", "cached_tokens_total / prompt_tokens_total.",
        s.prompt_tokens > 0 ? double(s.cached_tokens) / double(s.prompt_tokens) : 0.0);
}

// The cache's bytes, pins, evictions and disk tier.
void AddCache(Page& p, const EngineStats& s) {
  p.Header("promptcache_cache_bytes", "gauge",
           "Bytes of cached K/V blocks (shared blocks counted once), by tier.");
  p.Sample("promptcache_cache_bytes", "tier=\"ram\"", double(s.cache_ram_bytes));
  p.Sample("promptcache_cache_bytes", "tier=\"disk\"", double(s.cache_disk_bytes));
  p.Add("promptcache_kv_bytes_in_use", "gauge",
        "Bytes of every K/V block in use, cached or held by running requests.",
        double(s.kv_bytes_in_use));
  p.Add("promptcache_cache_pinned_bytes", "gauge",
        "Bytes of pinned cached blocks, as the pin quotas count them.",
        double(s.cache_pinned_bytes));
  p.Add("promptcache_cache_pin_quota_bytes", "gauge", "The pin quota (--pin-ram).",
        double(s.pin_ram_bytes));
  p.Add("promptcache_cache_pins_limited_total", "counter",
        "Pins cut short by the pin quota or a tenant's (--pin-ram, --pin-ram-tenant).",
        double(s.pins_limited));
  p.Add("promptcache_cache_evictions_total", "counter", "Cached blocks evicted from RAM.",
        s.evictions);
  p.Add("promptcache_cache_disk_writes_total", "counter", "Cache entries written to disk.",
        s.disk_writes);
  p.Add("promptcache_cache_disk_loads_total", "counter", "Cache entries loaded from disk.",
        s.disk_loads);
  p.Add("promptcache_cache_disk_errors_total", "counter",
        "Cache files skipped as corrupt, foreign, unreadable or not regular files.", s.disk_errors);
}

// The remote tier (Redis) in the families of its own, labelled like the cache bytes.
void AddRemoteTier(Page& p, const RemoteTierStats& r) {
  const std::string t = "tier=\"remote\"";
  auto family = [&](const char* name, const char* type, const char* help, double v) {
    p.Header(name, type, help);
    p.Sample(name, t, v);
  };
  family("promptcache_cache_tier_hits_total", "counter",
         "Blocks found in a cache tier (remote: values read, checked or not).", double(r.hits));
  family("promptcache_cache_tier_misses_total", "counter",
         "Blocks asked of a cache tier and not found there (or not asked: it was down).",
         double(r.misses));
  family("promptcache_cache_tier_loads_total", "counter",
         "Blocks loaded into RAM from a cache tier (checked and used).", double(r.loads));
  family("promptcache_cache_tier_errors_total", "counter",
         "Failed connects and commands of a cache tier, timeouts included.", double(r.errors));
  family("promptcache_cache_tier_invalid_total", "counter",
         "Values a cache tier held that failed their checks (foreign, corrupt) and were skipped.",
         double(r.invalid));
  family("promptcache_cache_tier_writes_total", "counter", "Blocks written to a cache tier.",
         double(r.writes));
  family("promptcache_cache_tier_dropped_total", "counter",
         "Writes to a cache tier dropped (queue full, tier down or refusing).", double(r.dropped));
  family("promptcache_cache_tier_up", "gauge",
         "1 while the last write to a cache tier went through.", r.connected ? 1.0 : 0.0);
  family("promptcache_cache_tier_deadline_misses_total", "counter",
         "Calls to a cache tier cut short by their deadline (--cache-redis-deadline).",
         double(r.deadline_misses));
  family("promptcache_cache_tier_breaker_open", "gauge",
         "1 while a cache tier is not asked (its circuit breaker is open, or probing).",
         r.breaker_open ? 1.0 : 0.0);
  family("promptcache_cache_tier_breaker_opens_total", "counter",
         "Times a cache tier's circuit breaker opened after failed or late calls.",
         double(r.breaker_opens));
  family("promptcache_cache_tier_skipped_total", "counter",
         "Lookups not sent to a cache tier while its breaker was open (misses).",
         double(r.skipped));
}

// The engine thread: requests active and queued, and its step's heartbeat.
void AddEngine(Page& p, const EngineStats& s) {
  p.Add("promptcache_requests_active", "gauge", "Requests being served.", s.active);
  p.Add("promptcache_engine_step_seconds", "gauge",
        "How long the engine thread's current step (or task between steps) has run; 0 while "
        "it waits for work.",
        s.step_seconds);
  p.Add("promptcache_engine_step_max_seconds", "gauge",
        "The longest engine step (or task) of the last minute or two.", s.step_max_seconds);
  p.Add("promptcache_requests_queued", "gauge", "Requests waiting for a free slot.", s.queued);
  p.Add("promptcache_requests_fetching", "gauge",
        "Requests whose prefix is being read from the remote tier (each holds a slot).",
        s.fetching);
}

void AddConnections(Page& p, const ConnectionStats& c) {
  p.Add("promptcache_http_connections", "gauge", "Connections being served.", c.open);
  p.Add("promptcache_http_connections_refused_total", "counter",
        "Connections refused (503) beyond --max-connections or --max-connections-per-client.",
        c.refused);
  p.Add("promptcache_http_connections_refused_per_client_total", "counter",
        "Of them, refused beyond --max-connections-per-client (one client address's share).",
        c.refused_per_client);
  p.Add("promptcache_http_request_timeouts_total", "counter",
        "Requests whose headers or body missed --header-timeout or --body-timeout (408).",
        c.timed_out);
}

void AddTtft(Page& p, const HistogramSnapshot& ttft) {
  const char* h = "promptcache_time_to_first_token_seconds";
  p.Header(h, "histogram", "Time from submission to the first generated token.");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kTtftBucketsSeconds.size(); ++i) {
    cumulative += ttft.buckets[i];
    p.Sample(std::string(h) + "_bucket", "le=\"" + Num(kTtftBucketsSeconds[i]) + "\"",
             double(cumulative));
  }
  p.Sample(std::string(h) + "_bucket", "le=\"+Inf\"", double(ttft.count));
  p.Sample(std::string(h) + "_sum", "", ttft.sum);
  p.Sample(std::string(h) + "_count", "", double(ttft.count));
}

void AddResponses(Page& p, const std::map<int, uint64_t>& responses) {
  p.Header("promptcache_http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, n] : responses) {
    p.Sample("promptcache_http_responses_total", "code=\"" + std::to_string(status) + "\"",
             double(n));
  }
}

}  // namespace

void ServerMetrics::ObserveTtft(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < kTtftBucketsSeconds.size(); ++i) {
    if (seconds <= kTtftBucketsSeconds[i]) {
      ++ttft_.buckets[i];
      break;
    }
  }
  ++ttft_.count;
  ttft_.sum += seconds;
}

void ServerMetrics::CountResponse(int http_status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_[http_status];
}

void ServerMetrics::ObserveTenant(const std::string& tenant, const CompletionResult& r) {
  std::lock_guard<std::mutex> lock(mu_);
  TenantCounters& c = tenants_[tenant];
  c.requests++;
  c.prompt_tokens += r.prompt_tokens;
  c.cached_tokens += r.cached_tokens;
  c.generated_tokens += r.completion_tokens();
}

TenantCounters ServerMetrics::CountsOf(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? TenantCounters{} : it->second;
}

HistogramSnapshot ServerMetrics::Ttft() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ttft_;
}

std::map<int, uint64_t> ServerMetrics::Responses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return responses_;
}

std::string FormatTenantMetrics(const TenantCounters& c, const std::string& model) {
  Page p = InfoPage(model);
  // Every family of a tenant's page is a counter: {name, help, value}.
  const struct {
    const char* name;
    const char* help;
    uint64_t value;
  } counters[] = {
      {"promptcache_requests_total", "This tenant's completion requests answered.", c.requests},
      {"promptcache_prompt_tokens_total", "Prompt tokens of this tenant's requests.",
       c.prompt_tokens},
      {"promptcache_cached_tokens_total",
       "Prompt tokens of this tenant's requests whose K/V came from the prefix cache.",
       c.cached_tokens},
      {"promptcache_computed_tokens_total",
       "Prompt tokens of this tenant's requests computed (not cached).",
       c.prompt_tokens - std::min(c.prompt_tokens, c.cached_tokens)},
      {"promptcache_generated_tokens_total", "Tokens generated for this tenant.",
       c.generated_tokens}};
  for (const auto& f : counters) p.Add(f.name, "counter", f.help, double(f.value));
  return p.Take();
}

std::string FormatMetrics(const EngineStats& s, const HistogramSnapshot& ttft,
                          const std::map<int, uint64_t>& responses, const std::string& model,
                          const ConnectionStats& c) {
  Page p = InfoPage(model);
  AddRequests(p, s);
  AddCache(p, s);
  if (s.remote.enabled) AddRemoteTier(p, s.remote);
  AddFidelity(p, s.fidelity);
  AddEngine(p, s);
  AddConnections(p, c);
  AddTtft(p, ttft);
  AddResponses(p, responses);
  return p.Take();
}

}  // namespace promptcache
