// The server's own routes: GET /v1/models (OpenAI's model list, and /v1/models/{id}), /health
// (the engine thread's heartbeat) and /metrics (Prometheus text).
#include "model/model.h"
#include "server/json_fields.h"
#include "server/routes.h"

namespace promptcache {

using ojson = nlohmann::ordered_json;

void HandleModels(Call& call) {
  const ServerContext& server = call.server;
  const Engine& engine = call.engine();
  ojson model;
  model["id"] = server.model_id();
  model["object"] = "model";
  model["created"] = server.created();
  model["owned_by"] = "promptcache";
  model["meta"] = {{"name", server.model_name()},
                   {"context_length", server.context()},
                   {"vocab_size", engine.model().tokenizer().vocab_size()},
                   {"chat_format", server.encoder().chat_template().FormatName()},
                   {"fingerprint", engine.model().fingerprint()},
                   {"cache_block_tokens", engine.options().block_size},
                   {"kv_type", KvTypeName(engine.options().kv_type)},
                   {"kv_bytes_per_token",
                    engine.model()
                        .MakeKvLayout(engine.options().kv_type, engine.options().block_size)
                        .bytes_per_token()}};
  if (call.req.matches.size() > 1) {  // GET /v1/models/{id}
    const std::string name = call.PathParam();
    if (std::optional<ApiError> err = server.CheckModel(name)) return call.Fail(*err);
    if (name != server.model_id() && name != server.model_name()) model["id"] = name;  // an alias
    return call.SendJson(model);
  }
  ojson data = ojson::array({model});
  for (const std::string& alias : server.options().aliases) {  // the same model, another name
    if (alias == server.model_id()) continue;
    model["id"] = alias;
    data.push_back(model);
  }
  call.SendJson(ojson{{"object", "list"}, {"data", std::move(data)}});
}

// The engine thread's heartbeat: a piece of work running past --stall-timeout means requests
// are not moving, whatever the process otherwise looks like.
void HandleHealth(Call& call) {
  const EngineStats s = call.engine().Stats();
  const double stall_seconds = call.server.options().stall_seconds;
  const bool stalled = s.step_seconds > stall_seconds;
  if (stalled) call.res.set_header("Retry-After", "1");
  call.SendJson(ojson{{"status", stalled ? "stalled" : "ok"},
                      {"active", s.active},
                      {"queued", s.queued},
                      {"step_seconds", s.step_seconds},
                      {"stall_timeout_seconds", stall_seconds}},
                stalled ? 503 : 200);
}

// With --api-keys a tenant's key reads its own counters only; the whole page (every tenant's
// traffic and the cache's state) is the --api-key holder's, or public with --metrics-public.
void HandleMetrics(Call& call) {
  ServerContext& server = call.server;
  const char* kType = "text/plain; version=0.0.4; charset=utf-8";
  const std::string tenant = server.options().metrics_public ? "" : call.tenant();
  if (!tenant.empty()) {
    return call.Send(FormatTenantMetrics(server.metrics().CountsOf(tenant), server.model_id()),
                     kType);
  }
  call.Send(FormatMetrics(call.engine().Stats(), server.metrics().Ttft(),
                          server.metrics().Responses(), server.model_id(), server.connections()),
            kType);
}

}  // namespace promptcache
