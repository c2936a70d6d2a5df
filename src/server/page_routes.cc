// The web page (GET / and /ui/*, its files compiled in: server/web_ui.h) and the measurement it
// shows, POST /v1/bench/savings (server/savings_api.h; admin only with --api-keys: it holds the
// engine and loads schemas).
#include "server/json_fields.h"
#include "server/routes.h"
#include "server/savings_api.h"
#include "server/web_ui.h"

namespace promptcache {

using ojson = nlohmann::ordered_json;

void HandleWeb(Call& call) {
  const std::string& path = call.req.path;
  // What the page needs before its first API call: whether to ask for the key (so that it never
  // meets a 401 it did not expect).
  if (path == "/ui/config.json") {
    const ServerOptions& o = call.server.options();
    return call.SendJson(ojson{{"api_key_required", !o.api_key.empty() || !o.api_keys.empty()}});
  }
  const WebAsset* asset = FindWebAsset(path);
  if (asset == nullptr) {
    return call.Fail(
        MakeError(404, "unknown URL: GET " + path, "invalid_request_error", "unknown_url"));
  }
  // Everything the page loads comes from this server: no other origin may be reached from it.
  call.res.set_header("Content-Security-Policy",
                      "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:");
  call.res.set_header("X-Content-Type-Options", "nosniff");
  call.res.set_header("Cache-Control", "no-cache");
  call.Send(std::string(asset->body), std::string(asset->content_type));
}

void HandleSavings(Call& call) {
  SavingsRequest r;
  if (std::optional<ApiError> err = ParseSavingsBody(call.req.body, &r)) return call.Fail(*err);
  // One run at a time: two would time each other's work.
  std::unique_lock<std::mutex> running(call.server.savings_mu(), std::try_to_lock);
  if (!running.owns_lock()) {
    call.res.set_header("Retry-After", "5");
    return call.Fail(MakeError(429, "a savings measurement is already running; retry when it ends",
                               "rate_limit_error", "savings_busy"));
  }
  Result<ojson> out = MeasureSavings(call.engine(), r);
  if (!out.ok()) return call.Fail(out.status());
  call.SendJson(*out);
}

}  // namespace promptcache
