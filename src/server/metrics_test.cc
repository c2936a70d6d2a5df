#include "server/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

namespace promptcache {
namespace {

// sample name with labels -> value, from the exposition text; checks every line's syntax.
std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_NE(line[0], '#') << line;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

TEST(Metrics, EngineStatsAndRatios) {
  EngineStats s;
  s.requests = 10;
  s.requests_failed = 1;
  s.requests_rejected = 2;
  s.prompt_tokens = 1000;
  s.cached_tokens = 640;
  s.shared_in_flight_tokens = 480;
  s.in_flight_segment_waits = 6;
  s.generated_tokens = 77;
  s.cache_hits = 3;
  s.cache_lookups = 4;
  s.cache_ram_bytes = 123456;
  s.cache_disk_bytes = 789;
  s.evictions = 5;
  s.active = 2;
  s.queued = 1;
  s.fetching = 4;
  const auto m =
      Samples(FormatMetrics(s, {}, {{200, 9}, {400, 2}}, "stories260K", ConnectionStats{7, 3, 11}));
  EXPECT_EQ(m.at("promptcache_requests_total"), "10");
  EXPECT_EQ(m.at("promptcache_requests_failed_total"), "1");
  EXPECT_EQ(m.at("promptcache_requests_rejected_total"), "2");
  EXPECT_EQ(m.at("promptcache_prompt_tokens_total"), "1000");
  EXPECT_EQ(m.at("promptcache_cached_tokens_total"), "640");
  EXPECT_EQ(m.at("promptcache_computed_tokens_total"), "360");
  EXPECT_EQ(m.at("promptcache_prefix_shared_in_flight_tokens_total"), "480");
  EXPECT_EQ(m.at("promptcache_in_flight_segment_waits_total"), "6");
  EXPECT_EQ(m.at("promptcache_generated_tokens_total"), "77");
  EXPECT_EQ(m.at("promptcache_cache_hits_total"), "3");
  EXPECT_EQ(m.at("promptcache_cache_hit_ratio"), "0.75");
  EXPECT_EQ(m.at("promptcache_cached_token_ratio"), "0.64");
  EXPECT_EQ(m.at("promptcache_cache_bytes{tier=\"ram\"}"), "123456");
  EXPECT_EQ(m.at("promptcache_cache_bytes{tier=\"disk\"}"), "789");
  EXPECT_EQ(m.at("promptcache_cache_evictions_total"), "5");
  EXPECT_EQ(m.at("promptcache_requests_active"), "2");
  EXPECT_EQ(m.at("promptcache_requests_queued"), "1");
  EXPECT_EQ(m.at("promptcache_requests_fetching"), "4");
  EXPECT_EQ(m.at("promptcache_http_responses_total{code=\"400\"}"), "2");
  EXPECT_EQ(m.at("promptcache_info{model=\"stories260K\"}"), "1");
  EXPECT_EQ(m.at("promptcache_http_connections"), "7");
  EXPECT_EQ(m.at("promptcache_http_connections_refused_total"), "3");
  EXPECT_EQ(m.at("promptcache_http_request_timeouts_total"), "11");
}

// The remote tier's families (AddRemoteTier) are on the page only while the tier is configured,
// each with the tier="remote" label and its own field. (Mutations: dropping the `enabled` check,
// or giving breaker_opens the value of deadline_misses, fail this.)
TEST(Metrics, RemoteTierFamiliesOnlyWhileConfigured) {
  EngineStats s;
  const std::string off = FormatMetrics(s, {}, {}, "m", ConnectionStats{});
  EXPECT_EQ(off.find("tier=\"remote\""), std::string::npos);
  EXPECT_EQ(off.find("promptcache_cache_tier_"), std::string::npos);
  RemoteTierStats& r = s.remote;
  r.enabled = true;
  r.connected = true;
  r.hits = 1, r.misses = 2, r.loads = 3, r.errors = 4, r.invalid = 5, r.writes = 6;
  r.dropped = 7, r.deadline_misses = 8, r.breaker_opens = 9, r.skipped = 10;
  const auto m = Samples(FormatMetrics(s, {}, {}, "m", ConnectionStats{}));
  const std::pair<const char*, const char*> expected[] = {
      {"hits_total", "1"},
      {"misses_total", "2"},
      {"loads_total", "3"},
      {"errors_total", "4"},
      {"invalid_total", "5"},
      {"writes_total", "6"},
      {"dropped_total", "7"},
      {"up", "1"},
      {"deadline_misses_total", "8"},
      {"breaker_open", "0"},
      {"breaker_opens_total", "9"},
      {"skipped_total", "10"},
  };
  for (const auto& [name, value] : expected) {
    const std::string key = std::string("promptcache_cache_tier_") + name + "{tier=\"remote\"}";
    ASSERT_TRUE(m.count(key)) << key;
    EXPECT_EQ(m.at(key), value) << key;
  }
}

TEST(Metrics, NoLookupsGiveZeroRatio) {
  const auto m = Samples(FormatMetrics(EngineStats(), {}, {}, "x"));
  EXPECT_EQ(m.at("promptcache_cache_hit_ratio"), "0");
  EXPECT_EQ(m.at("promptcache_time_to_first_token_seconds_count"), "0");
}

// --fidelity-sample: ratios pool the steps of both kinds; NaN before the first sample.
TEST(Metrics, FidelityPoolsStepsOfBothKinds) {
  const auto none = Samples(FormatMetrics(EngineStats(), {}, {}, "x"));
  EXPECT_EQ(none.at("promptcache_fidelity_samples_total"), "0");
  EXPECT_EQ(none.at("promptcache_fidelity_top1_margin_aware"), "NaN");
  EXPECT_EQ(none.at("promptcache_fidelity_first_token_kl_mean"), "NaN");
  EngineStats s;
  FidelityStats& f = s.fidelity;
  f.modules = {.samples = 1, .steps = 16, .agreements = 12, .margin_steps = 10,
               .margin_agreements = 9, .first_token_kl_sum = 0.5, .first_token_kl_max = 0.5};
  f.segments = {.samples = 3, .steps = 48, .agreements = 36, .margin_steps = 30,
                .margin_agreements = 27, .first_token_kl_sum = 0.3, .first_token_kl_max = 0.25};
  f.dropped = 2;
  f.pending = 1;
  const auto m = Samples(FormatMetrics(s, {}, {}, "x"));
  EXPECT_EQ(m.at("promptcache_fidelity_samples_total"), "4");
  EXPECT_EQ(m.at("promptcache_fidelity_dropped_total"), "2");
  EXPECT_EQ(m.at("promptcache_fidelity_pending"), "1");
  EXPECT_EQ(m.at("promptcache_fidelity_top1_margin_aware"), "0.9");  // 36 / 40
  EXPECT_EQ(m.at("promptcache_fidelity_top1"), "0.75");               // 48 / 64
  EXPECT_EQ(m.at("promptcache_fidelity_first_token_kl_mean"), "0.2");  // 0.8 / 4
  EXPECT_EQ(m.at("promptcache_fidelity_first_token_kl_max"), "0.5");
}

TEST(Metrics, TtftHistogramIsCumulative) {
  ServerMetrics sm;
  sm.ObserveTtft(0.003);   // first bucket
  sm.ObserveTtft(0.005);   // bucket bounds are inclusive
  sm.ObserveTtft(0.2);     // le 0.25
  sm.ObserveTtft(1000.0);  // only +Inf
  const auto m = Samples(FormatMetrics(EngineStats(), sm.Ttft(), {}, "x"));
  const std::string h = "promptcache_time_to_first_token_seconds";
  EXPECT_EQ(m.at(h + "_bucket{le=\"0.005\"}"), "2");
  EXPECT_EQ(m.at(h + "_bucket{le=\"0.1\"}"), "2");
  EXPECT_EQ(m.at(h + "_bucket{le=\"0.25\"}"), "3");
  EXPECT_EQ(m.at(h + "_bucket{le=\"60\"}"), "3");
  EXPECT_EQ(m.at(h + "_bucket{le=\"+Inf\"}"), "4");
  EXPECT_EQ(m.at(h + "_count"), "4");
  EXPECT_EQ(m.at(h + "_sum"), "1000.208");
}

TEST(Metrics, EveryFamilyHasHelpAndType) {
  const std::string text = FormatMetrics(EngineStats(), {}, {{200, 1}}, "a\"b");
  std::istringstream in(text);
  std::string line, last_type;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      last_type = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(last_type, 0), 0u) << line << " follows TYPE " << last_type;
    }
  }
  EXPECT_NE(text.find("model=\"a\\\"b\""), std::string::npos) << "label values are escaped";
}

// A tenant's page holds its own counters only, under the names of the server's page.
TEST(Metrics, TenantPagesAreTheirOwn) {
  ServerMetrics sm;
  CompletionResult r;
  r.prompt_tokens = 100;
  r.cached_tokens = 64;
  r.tokens = {1, 2, 3};
  sm.ObserveTenant("alice", r);
  sm.ObserveTenant("alice", r);
  sm.ObserveTenant("bob", r);
  auto alice = Samples(FormatTenantMetrics(sm.CountsOf("alice"), "m"));
  EXPECT_EQ(alice.at("promptcache_requests_total"), "2");
  EXPECT_EQ(alice.at("promptcache_prompt_tokens_total"), "200");
  EXPECT_EQ(alice.at("promptcache_cached_tokens_total"), "128");
  EXPECT_EQ(alice.at("promptcache_computed_tokens_total"), "72");
  EXPECT_EQ(alice.at("promptcache_generated_tokens_total"), "6");
  EXPECT_EQ(alice.count("promptcache_cache_bytes{tier=\"ram\"}"), 0u);
  auto carol = Samples(FormatTenantMetrics(sm.CountsOf("carol"), "m"));
  EXPECT_EQ(carol.at("promptcache_requests_total"), "0");
}

TEST(Metrics, CountsResponses) {
  ServerMetrics sm;
  sm.CountResponse(200);
  sm.CountResponse(200);
  sm.CountResponse(503);
  EXPECT_EQ(sm.Responses().at(200), 2u);
  EXPECT_EQ(sm.Responses().at(503), 1u);
}

}  // namespace
}  // namespace promptcache
