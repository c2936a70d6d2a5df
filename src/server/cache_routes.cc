// The routes over the engine's prefix cache: /v1/cache (list, drop, save, tree: an operator's),
// /v1/cache/load, pin, unpin and lookup (any caller's, in its own namespace), and
// /v1/cache/pins. ReadPrefix, the prompt these routes read, serves the tokenizer routes too.
#include "model/model.h"
#include "server/cache_response.h"
#include "server/json_fields.h"
#include "server/routes.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

// A PML prompt: which of its cached pieces each tier holds (modules are not namespaced).
void LookupModular(Call& call, const PrefixRequest& r) {
  if (!r.model.empty()) {
    if (std::optional<ApiError> err = call.server.CheckModel(r.model)) return call.Fail(*err);
  }
  Result<PmlPrompt> prompt = ParsePrompt(r.prompt_text, "prompt");
  if (!prompt.ok()) return call.Fail(prompt.status(), "prompt");
  Result<CacheTierCounts> c = call.engine().LookupPrompt(*prompt);
  if (!c.ok()) return call.Fail(c.status(), "prompt");
  const EngineStats s = call.engine().Stats();
  call.SendJson(ojson{{"prompt_tokens", c->prompt_tokens},
                      {"cached_tokens", c->reusable},
                      {"tiers", ojson{{"ram", c->ram}, {"disk", c->disk}, {"remote", c->remote}}},
                      {"modular", true},
                      {"block_tokens", call.engine().options().block_size},
                      {"active", s.active},
                      {"queued", s.queued}});
}

}  // namespace

bool ReadPrefix(Call& call, PrefixRequest* r, BuiltPrompt* prompt, size_t max_tokens, bool lookup) {
  std::optional<ApiError> err = ParsePrefixRequest(call.req.body, r);
  if (!err && !r->model.empty()) err = call.server.CheckModel(r->model);
  if (err) {
    call.Fail(*err);
    return false;
  }
  // Only the lookup cuts a prompt into segments (as a completion of it would be cut).
  const bool segments = lookup && call.server.Segments(r->cache_segments);
  Result<BuiltPrompt> built = call.server.encoder().Build(*r, max_tokens, segments);
  if (!built.ok()) {
    const std::string param = r->messages.empty() ? "prompt" : "messages";
    call.Fail(call.server.PromptError(built.status(), param));
    return false;
  }
  *prompt = std::move(built).value();
  return true;
}

void HandleCacheTree(Call& call) {
  Engine& engine = call.engine();
  call.SendJson(CacheTreeJson(engine.ListCacheBlocks(), engine.options().block_size,
                              engine.model().tokenizer()));
}

// Every pin, for an operator: whose, how much, until when (admin only with --api-keys).
void HandlePinList(Call& call) {
  ojson data = ojson::array();
  for (const PinInfo& p : call.engine().ListPins()) {
    data.push_back(
        {{"key", p.key},
         {"namespace", p.namespace_key.empty() ? ojson() : ojson(p.namespace_key)},
         {"tenant", p.tenant.empty() ? ojson() : ojson(p.tenant)},
         {"tokens", p.tokens},
         {"bytes", p.bytes},
         {"counted_pins", p.counted_pins},
         {"expires_in_seconds", p.expires_in_seconds < 0 ? ojson() : ojson(p.expires_in_seconds)}});
  }
  const EngineStats s = call.engine().Stats();
  call.SendJson(ojson{{"object", "list"},
                      {"data", std::move(data)},
                      {"pinned_bytes", s.cache_pinned_bytes},
                      {"pin_quota_bytes", s.pin_ram_bytes}});
}

// Lifts the pins of one chain (DELETE /v1/cache/pins/{key}) or every pin (DELETE
// /v1/cache/pins); the blocks stay cached, evictable as any.
void HandlePinDrop(Call& call) {
  const std::string key = call.PathParam();
  Result<int> n = call.engine().Unpin(key);
  if (!n.ok()) return call.Fail(n.status(), "key");
  call.SendJson(ojson{{"unpinned_blocks", *n}, {"key", key.empty() ? ojson() : ojson(key)}});
}

void HandleCacheList(Call& call) {
  ojson data = ojson::array();
  for (const CacheEntryInfo& e : call.engine().ListCache()) {
    data.push_back({{"key", e.key},
                    {"tokens", e.tokens},
                    {"in_ram", e.in_ram},
                    {"on_disk", e.on_disk},
                    {"pinned", e.pinned},
                    {"idle_seconds", e.idle_seconds}});
  }
  call.SendJson(ojson{{"object", "list"}, {"data", std::move(data)}});
}

void HandleCacheDrop(Call& call) {
  const std::string key = call.PathParam();
  // ?force=true: pinned entries go too (the operator's way to reclaim what pins hold).
  const std::string force = call.req.get_param_value("force");
  if (!force.empty() && force != "true" && force != "false") {
    return call.Fail(ApiError::BadRequest("'force' must be true or false", "force"));
  }
  if (Status st = call.engine().DropCache(key, force == "true"); !st.ok()) {
    return call.Fail(st, "key");
  }
  call.SendJson(ojson{{"deleted", true}, {"key", key.empty() ? ojson() : ojson(key)}});
}

void HandleCacheSave(Call& call) {
  if (Status st = call.engine().SaveCache(); !st.ok()) return call.Fail(st);
  call.SendJson(ojson{{"saved", true}});
}

void HandleCacheLoad(Call& call) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(call, &r, &p, call.server.PromptLimit())) return;
  const int context = call.server.context();
  if (static_cast<int>(p.tokens.size()) >= context) {
    return call.Fail(ApiError::BadRequest("the prefix has " + std::to_string(p.tokens.size()) +
                                              " tokens, the context is " + std::to_string(context),
                                          r.messages.empty() ? "prompt" : "messages",
                                          "context_length_exceeded"));
  }
  const std::string ns = call.Namespace(r.cache_salt);
  Result<int> cached = call.engine().WarmPrefix(p.tokens, ns);
  if (!cached.ok()) return call.Fail(cached.status());
  PinOutcome pin;
  if (r.pin) {
    if (Status st = call.engine().PinPrefix(p.tokens, true, ns, call.tenant(), &pin); !st.ok()) {
      return call.Fail(st);
    }
  }
  ojson out{{"prompt_tokens", p.tokens.size()}, {"cached_tokens", *cached}, {"pinned", r.pin}};
  if (r.pin) {
    out["pinned_tokens"] = pin.tokens;
    out["pin_limited"] = pin.limited;
  }
  call.SendJson(out);
}

namespace {

void PinOrUnpin(Call& call, bool pinned) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(call, &r, &p, call.server.PromptLimit())) return;
  // A chat prefix with a cache_control breakpoint pins up to it; otherwise the whole prefix.
  std::vector<int32_t> tokens = p.tokens;
  if (p.pin_tokens > 0) tokens.resize(p.pin_tokens);
  PinOutcome o;
  if (Status st =
          call.engine().PinPrefix(tokens, pinned, call.Namespace(r.cache_salt), call.tenant(), &o);
      !st.ok()) {
    return call.Fail(st);
  }
  ojson out{{"tokens", tokens.size()}, {"pinned", pinned}};
  if (pinned) {
    // Past the pin quota the prefix is pinned as far as it fits, and the answer says so.
    out["pinned_tokens"] = o.tokens;
    out["pin_limited"] = o.limited;
  }
  call.SendJson(out);
}

}  // namespace

void HandleCachePin(Call& call) { PinOrUnpin(call, true); }
void HandleCacheUnpin(Call& call) { PinOrUnpin(call, false); }

// A router's view: how many leading tokens of the prompt each tier holds, computing nothing.
void HandleCacheLookup(Call& call) {
  PrefixRequest r;
  if (!ParsePrefixRequest(call.req.body, &r) && !r.prompt_is_tokens && r.messages.empty() &&
      LooksLikePml(r.prompt_text)) {
    return LookupModular(call, r);
  }
  BuiltPrompt p;
  if (!ReadPrefix(call, &r, &p, call.server.PromptLimit(), /*lookup=*/true)) return;
  const CacheTierCounts c =
      call.engine().LookupCache(p.tokens, call.Namespace(r.cache_salt), p.segments);
  const EngineStats s = call.engine().Stats();
  call.SendJson(ojson{{"prompt_tokens", p.tokens.size()},
                      {"cached_tokens", c.reusable},
                      {"segment_tokens", c.segments},
                      {"tiers", ojson{{"ram", c.ram}, {"disk", c.disk}, {"remote", c.remote}}},
                      {"block_tokens", call.engine().options().block_size},
                      {"active", s.active},
                      {"queued", s.queued}});
}

}  // namespace promptcache
