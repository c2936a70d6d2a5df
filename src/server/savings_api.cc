#include "server/savings_api.h"

#include <algorithm>

#include "kv/kv_cache.h"
#include "engine/savings.h"

namespace promptcache {

using ojson = nlohmann::ordered_json;

Result<ojson> MeasureSavings(Engine& engine, const SavingsRequest& request) {
  const int context = engine.model().config().context_length;
  const int max_tokens =
      context > 1 ? std::min(request.max_tokens, context - 1) : request.max_tokens;
  PC_ASSIGN_OR_RETURN(const std::vector<GenerationTiming> generation,
                      engine.MeasureGeneration(max_tokens));
  PC_ASSIGN_OR_RETURN(const std::vector<TtftTiming> ttft, MeasureTtft(engine, request.max_prompt));
  ojson out{{"object", "bench.savings"}};
  ojson& g = out["generation"] = ojson::array();
  for (const GenerationTiming& t : generation) {
    g.push_back(
        {{"tokens", t.tokens}, {"with_cache_ms", t.with_cache_ms}, {"no_cache_ms", t.no_cache_ms}});
  }
  ojson& f = out["ttft"] = ojson::array();
  for (const TtftTiming& t : ttft) {
    f.push_back({{"prompt_tokens", t.prompt_tokens},
                 {"cold_ms", t.cold_ms},
                 {"prefix_hit_ms", t.prefix_hit_ms},
                 {"modules_ms", t.modules_ms},
                 {"modules_prompt_tokens", t.modules_prompt_tokens}});
  }
  ojson& b = out["kv_bytes_per_token"] = ojson::object();
  for (const KvTypeBytes& t : KvBytesByType(engine.model())) b[t.type] = t.bytes_per_token;
  out["kv_type"] = KvTypeName(engine.options().kv_type);
  return out;
}

}  // namespace promptcache
