// The routes over the engine's caches and schemas: /v1/cache (list, drop, save, load, pin, unpin,
// lookup, tree), /v1/schemas, /v1/bench/savings, and /tokenize and /detokenize, which read
// prompts as the cache routes do.
#include "server/http_server_impl.h"

namespace promptcache {

using server_internal::FromStatus;
using server_internal::ojson;

// Parses a prefix body and turns it into tokens; false after sending the error.
bool HttpServer::Impl::ReadPrefix(const httplib::Request& req, httplib::Response& res,
                                  PrefixRequest* r, BuiltPrompt* prompt, size_t max_tokens) {
  std::optional<ApiError> err = ParsePrefixRequest(req.body, r);
  if (!err && !r->model.empty()) err = CheckModel(r->model);
  if (err) {
    SendError(res, *err);
    return false;
  }
  Result<BuiltPrompt> built = encoder_.Build(*r, max_tokens);
  if (!built.ok()) {
    const std::string param = r->messages.empty() ? "prompt" : "messages";
    SendError(res, built.status().code() == StatusCode::kOutOfRange
                       ? PromptTooLong(built.status(), param)
                       : FromStatus(built.status(), param));
    return false;
  }
  *prompt = std::move(built).value();
  return true;
}

void HttpServer::Impl::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p)) return;
  SendJson(res,
           ojson{{"tokens", p.tokens}, {"count", p.tokens.size()}, {"pin_tokens", p.pin_tokens}});
}

void HttpServer::Impl::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;  // {"tokens": [ids]}
  std::optional<ApiError> err = ParsePrefixRequest(req.body, &r);
  if (!err && !r.prompt_is_tokens) {
    err = ApiError::BadRequest("'tokens' must be an array of token ids", "tokens");
  }
  if (err) return SendError(res, *err);
  Result<std::vector<int32_t>> ids = encoder_.FromPrompt("", r.prompt_tokens, true);
  if (!ids.ok()) return SendError(res, FromStatus(ids.status(), "tokens"));
  SendJson(res, ojson{{"content", engine_->model().tokenizer().Decode(*ids)}});
}

void HttpServer::Impl::HandleCacheTree(const httplib::Request&, httplib::Response& res) {
  SendJson(res, CacheTreeJson(engine_->ListCacheBlocks(), engine_->options().block_size,
                              engine_->model().tokenizer()));
}

// Every pin, for an operator: whose, how much, until when (admin only with --api-keys).
void HttpServer::Impl::HandlePinList(const httplib::Request&, httplib::Response& res) {
  ojson data = ojson::array();
  for (const PinInfo& p : engine_->ListPins()) {
    data.push_back(
        {{"key", p.key},
         {"namespace", p.namespace_key.empty() ? ojson() : ojson(p.namespace_key)},
         {"tenant", p.tenant.empty() ? ojson() : ojson(p.tenant)},
         {"tokens", p.tokens},
         {"bytes", p.bytes},
         {"counted_pins", p.counted_pins},
         {"expires_in_seconds", p.expires_in_seconds < 0 ? ojson() : ojson(p.expires_in_seconds)}});
  }
  const EngineStats s = engine_->Stats();
  SendJson(res, ojson{{"object", "list"},
                      {"data", std::move(data)},
                      {"pinned_bytes", s.cache_pinned_bytes},
                      {"pin_quota_bytes", s.pin_ram_bytes}});
}

// Lifts the pins of one chain (DELETE /v1/cache/pins/{key}) or every pin (DELETE
// /v1/cache/pins); the blocks stay cached, evictable as any.
void HttpServer::Impl::HandlePinDrop(const httplib::Request& req, httplib::Response& res) {
  const std::string key = req.matches.size() > 1 ? req.matches[1].str() : "";
  Result<int> n = engine_->Unpin(key);
  if (!n.ok()) return SendError(res, FromStatus(n.status(), "key"));
  SendJson(res, ojson{{"unpinned_blocks", *n}, {"key", key.empty() ? ojson() : ojson(key)}});
}

void HttpServer::Impl::HandleCacheList(const httplib::Request&, httplib::Response& res) {
  ojson data = ojson::array();
  for (const CacheEntryInfo& e : engine_->ListCache()) {
    data.push_back({{"key", e.key},
                    {"tokens", e.tokens},
                    {"in_ram", e.in_ram},
                    {"on_disk", e.on_disk},
                    {"pinned", e.pinned},
                    {"idle_seconds", e.idle_seconds}});
  }
  SendJson(res, ojson{{"object", "list"}, {"data", std::move(data)}});
}

void HttpServer::Impl::HandleCacheDrop(const httplib::Request& req, httplib::Response& res) {
  const std::string key = req.matches.size() > 1 ? req.matches[1].str() : "";
  // ?force=true: pinned entries go too (the operator's way to reclaim what pins hold).
  const std::string force = req.get_param_value("force");
  if (!force.empty() && force != "true" && force != "false") {
    return SendError(res, ApiError::BadRequest("'force' must be true or false", "force"));
  }
  if (Status st = engine_->DropCache(key, force == "true"); !st.ok()) {
    return SendError(res, FromStatus(st, "key"));
  }
  SendJson(res, ojson{{"deleted", true}, {"key", key.empty() ? ojson() : ojson(key)}});
}

void HttpServer::Impl::HandleCacheSave(const httplib::Request&, httplib::Response& res) {
  if (Status st = engine_->SaveCache(); !st.ok()) return SendError(res, FromStatus(st));
  SendJson(res, ojson{{"saved", true}});
}

void HttpServer::Impl::HandleCacheLoad(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p, PromptLimit())) return;
  if (static_cast<int>(p.tokens.size()) >= context_) {
    return SendError(res,
                     ApiError::BadRequest("the prefix has " + std::to_string(p.tokens.size()) +
                                              " tokens, the context is " + std::to_string(context_),
                                          r.messages.empty() ? "prompt" : "messages",
                                          "context_length_exceeded"));
  }
  const std::string ns = Namespace(req, r.cache_salt);
  Result<int> cached = engine_->WarmPrefix(p.tokens, ns);
  if (!cached.ok()) return SendError(res, FromStatus(cached.status()));
  PinOutcome pin;
  if (r.pin) {
    if (Status st = engine_->PinPrefix(p.tokens, true, ns, Tenant(req).value_or(""), &pin);
        !st.ok()) {
      return SendError(res, FromStatus(st));
    }
  }
  ojson out{{"prompt_tokens", p.tokens.size()}, {"cached_tokens", *cached}, {"pinned", r.pin}};
  if (r.pin) {
    out["pinned_tokens"] = pin.tokens;
    out["pin_limited"] = pin.limited;
  }
  SendJson(res, out);
}

void HttpServer::Impl::HandleCachePin(const httplib::Request& req, httplib::Response& res,
                                      bool pinned) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p, PromptLimit())) return;
  // A chat prefix with a cache_control breakpoint pins up to it; otherwise the whole prefix.
  std::vector<int32_t> tokens = p.tokens;
  if (p.pin_tokens > 0) tokens.resize(p.pin_tokens);
  PinOutcome o;
  if (Status st = engine_->PinPrefix(tokens, pinned, Namespace(req, r.cache_salt),
                                     Tenant(req).value_or(""), &o);
      !st.ok()) {
    return SendError(res, FromStatus(st));
  }
  ojson out{{"tokens", tokens.size()}, {"pinned", pinned}};
  if (pinned) {
    // Past the pin quota the prefix is pinned as far as it fits, and the answer says so.
    out["pinned_tokens"] = o.tokens;
    out["pin_limited"] = o.limited;
  }
  SendJson(res, out);
}

// A router's view: how many leading tokens of the prompt each tier holds, computing nothing.
void HttpServer::Impl::HandleCacheLookup(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;
  if (!ParsePrefixRequest(req.body, &r) && !r.prompt_is_tokens && r.messages.empty() &&
      LooksLikePml(r.prompt_text)) {
    return LookupModular(r, res);
  }
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p, PromptLimit())) return;
  const CacheTierCounts c = engine_->LookupCache(p.tokens, Namespace(req, r.cache_salt));
  const EngineStats s = engine_->Stats();
  SendJson(res, ojson{{"prompt_tokens", p.tokens.size()},
                      {"cached_tokens", c.reusable},
                      {"tiers", ojson{{"ram", c.ram}, {"disk", c.disk}, {"remote", c.remote}}},
                      {"block_tokens", engine_->options().block_size},
                      {"active", s.active},
                      {"queued", s.queued}});
}

void HttpServer::Impl::HandleSavings(const httplib::Request& req, httplib::Response& res) {
  SavingsRequest r;
  if (std::optional<ApiError> err = ParseSavingsBody(req.body, &r)) return SendError(res, *err);
  // One run at a time: two would time each other's work.
  std::unique_lock<std::mutex> running(savings_mu_, std::try_to_lock);
  if (!running.owns_lock()) {
    res.set_header("Retry-After", "5");
    return SendError(res, server_internal::MakeError(
                              429, "a savings measurement is already running; retry when it ends",
                              "rate_limit_error", "savings_busy"));
  }
  Result<ojson> out = MeasureSavings(*engine_, r);
  if (!out.ok()) return SendError(res, FromStatus(out.status()));
  SendJson(res, *out);
}

// A PML prompt: which of its cached pieces each tier holds (modules are not namespaced).
void HttpServer::Impl::LookupModular(const PrefixRequest& r, httplib::Response& res) {
  if (!r.model.empty()) {
    if (std::optional<ApiError> err = CheckModel(r.model)) return SendError(res, *err);
  }
  Result<PmlPrompt> prompt = ParsePrompt(r.prompt_text, "prompt");
  if (!prompt.ok()) return SendError(res, FromStatus(prompt.status(), "prompt"));
  Result<CacheTierCounts> c = engine_->LookupPrompt(*prompt);
  if (!c.ok()) return SendError(res, FromStatus(c.status(), "prompt"));
  const EngineStats s = engine_->Stats();
  SendJson(res, ojson{{"prompt_tokens", c->prompt_tokens},
                      {"cached_tokens", c->reusable},
                      {"tiers", ojson{{"ram", c->ram}, {"disk", c->disk}, {"remote", c->remote}}},
                      {"modular", true},
                      {"block_tokens", engine_->options().block_size},
                      {"active", s.active},
                      {"queued", s.queued}});
}

// Schema text from a client may not name files (src attributes): it could read the server's.
void HttpServer::Impl::HandleSchemaLoad(const httplib::Request& req, httplib::Response& res) {
  std::string xml;
  if (std::optional<ApiError> err = ParseSchemaBody(req.body, &xml)) return SendError(res, *err);
  SchemaLoadOptions o;
  o.allow_src = false;
  Result<SchemaInfo> info = engine_->LoadSchemaText(xml, "request", o);
  if (!info.ok()) return SendError(res, FromStatus(info.status(), "schema"));
  SendSchema(res, *info);
}

void HttpServer::Impl::HandleSchemaList(const httplib::Request&, httplib::Response& res) {
  res.status = 200;
  res.set_content(SchemaListBody(engine_->ListSchemas()), "application/json");
}

void HttpServer::Impl::HandleSchemaGet(const httplib::Request& req, httplib::Response& res) {
  Result<SchemaInfo> info = engine_->GetSchema(req.matches[1].str());
  if (!info.ok()) return SendError(res, FromStatus(info.status(), "name"));
  SendSchema(res, *info);
}

void HttpServer::Impl::HandleSchemaDrop(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1].str();
  if (Status st = engine_->DropSchema(name); !st.ok()) {
    return SendError(res, FromStatus(st, "name"));
  }
  res.status = 200;
  res.set_content(SchemaDeletedBody(name), "application/json");
}

void HttpServer::Impl::SendSchema(httplib::Response& res, const SchemaInfo& info) {
  // A DELETE between the two engine calls leaves no layout: the schema is gone (404).
  Result<std::shared_ptr<const SchemaLayout>> layout = engine_->GetSchemaLayout(info.name);
  if (!layout.ok()) return SendError(res, FromStatus(layout.status(), "name"));
  res.status = 200;
  res.set_content(SchemaBody(info, **layout), "application/json");
}

}  // namespace promptcache
