#include "engine/engine_impl.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <limits>

#include "core/hash.h"
#include "core/log.h"
#include "kv/redis_tier.h"
#include "engine/engine_slot.h"
#include "sampling/logprobs.h"
#include "engine/savings.h"

namespace promptcache {
namespace {

// Prompt-token log-probabilities kept for cached prefixes (about 100 bytes each without
// alternatives).
constexpr size_t kLogprobMemoEntries = size_t(1) << 18;

void AddRun(std::vector<SourceRun>* runs, TokenSource source, int length) {
  if (length <= 0) return;
  if (!runs->empty() && runs->back().source == source) {
    runs->back().length += length;
  } else {
    runs->push_back({source, length});
  }
}

// A modular prompt's sources by position: the gathered pieces found cached (`reused`, one flag
// per gather in stage order) are module tokens, everything else is computed. A stage's tokens
// are marked after its gathers, so the token drop_last recomputes counts as computed.
std::vector<SourceRun> ModularSources(const ModularPrefill& pf, const SchemaLayout& layout,
                                      const std::vector<bool>& reused) {
  std::vector<TokenSource> src(pf.positions.size(), TokenSource::kComputed);
  auto mark = [&](int pos, TokenSource source) {
    auto it = std::lower_bound(pf.positions.begin(), pf.positions.end(), pos);
    if (it != pf.positions.end() && *it == pos) src[it - pf.positions.begin()] = source;
  };
  size_t k = 0;
  for (const PrefillStage& stage : pf.stages) {
    for (const PrefillGather& g : stage.gather) {
      const bool hit = k < reused.size() && reused[k++];
      const int n = static_cast<int>(layout.Piece(g.ref).tokens.size());
      for (int i = 0; i < n && hit; ++i) mark(g.at + i, TokenSource::kModule);
    }
    for (const int pos : stage.positions) mark(pos, TokenSource::kComputed);
  }
  std::vector<SourceRun> runs;
  for (const TokenSource t : src) AddRun(&runs, t, 1);
  return runs;
}

// The cache's budget: what pins are a share of.
size_t CacheBudget(const EngineOptions& o) {
  return o.kv_ram_bytes > 0 ? std::min(o.cache_ram_bytes, o.kv_ram_bytes) : o.cache_ram_bytes;
}
size_t PinQuota(const EngineOptions& o) { return o.pin_ram_bytes.value_or(CacheBudget(o) / 4); }
size_t TenantPinQuota(const EngineOptions& o) {
  return o.tenant_pin_ram_bytes.value_or(PinQuota(o) / 4);
}

Status CheckPinQuotas(const EngineOptions& o) {
  auto mib = [](size_t b) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f MiB", double(b) / (1 << 20));
    return std::string(buf);
  };
  if (PinQuota(o) > CacheBudget(o)) {
    return InvalidArgument("the pin quota (--pin-ram, " + mib(PinQuota(o)) +
                           ") is more than the cache's budget (" + mib(CacheBudget(o)) +
                           ": the smaller of --cache-ram and --kv-ram)");
  }
  if (TenantPinQuota(o) > PinQuota(o)) {
    return InvalidArgument("the per-tenant pin quota (--pin-ram-tenant, " + mib(TenantPinQuota(o)) +
                           ") is more than the pin quota (--pin-ram, " + mib(PinQuota(o)) + ")");
  }
  if (!(o.pin_ttl_seconds >= 0)) return InvalidArgument("pin_ttl_seconds must be >= 0");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  if (options.parallel < 1) return InvalidArgument("parallel must be >= 1");
  if (options.max_queue < 0) return InvalidArgument("max_queue must be >= 0");
  if (options.block_size < 1 || options.batch_size < 1) {
    return InvalidArgument("block_size and batch_size must be >= 1");
  }
  if (!(options.module_recompute >= 0 && options.module_recompute <= 1)) {
    return InvalidArgument("module_recompute must be a share from 0 to 1");
  }
  PC_RETURN_IF_ERROR(CheckPinQuotas(options));
  PC_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(options.model_path));
  if (!options.chat_template.empty()) model->set_chat_template(options.chat_template);
  PC_RETURN_IF_ERROR(CheckContext(model->config(), options.context, options.allow_long_context));
  PC_RETURN_IF_ERROR(CheckKvType(options.kv_type, model->config().kv_dim()));
  model->UseContext(options.context > 0 ? options.context : model->config().context_length);
  const int trained = model->config().MaxContext();
  if (options.context > trained && trained > 0) {
    // llama.cpp warns too: positions past training are outside what the model has seen, and the
    // KV cache a sequence may use grows with the context.
    PC_LOG_WARN(
        "context %d is more than the %d tokens the model was trained with: quality past "
        "%d tokens is not what the model was trained for, and each sequence may hold "
        "%.1f MiB of K/V",
        options.context, trained, trained,
        double(options.context) *
            model->MakeKvLayout(options.kv_type, options.block_size).bytes_per_token() / (1 << 20));
  }
  std::unique_ptr<DiskTier> disk;
  if (!options.cache_dir.empty()) {
    const KvLayout layout = model->MakeKvLayout(options.kv_type, options.block_size);
    PC_ASSIGN_OR_RETURN(disk, DiskTier::Open(options.cache_dir, model->fingerprint(), layout,
                                             options.cache_disk_bytes));
  }
  std::unique_ptr<RemoteTier> remote;
  if (!options.cache_redis.empty()) {
    RedisOptions redis;
    redis.url = options.cache_redis;
    redis.timeout_ms = options.cache_redis_timeout_ms;
    redis.queue_bytes = options.cache_redis_queue_bytes;
    redis.deadline_ms = options.cache_redis_deadline_ms;
    PC_ASSIGN_OR_RETURN(remote, OpenRedisTier(redis));
  }
  auto engine =
      std::make_unique<EngineImpl>(options, std::move(model), std::move(disk), std::move(remote));
  engine->ReloadPersistedSchemas();
  return std::unique_ptr<Engine>(std::move(engine));
}

EngineImpl::EngineImpl(const EngineOptions& options, std::unique_ptr<Model> model,
                       std::unique_ptr<DiskTier> disk, std::unique_ptr<RemoteTier> remote)
    : options_(options),
      model_(std::move(model)),
      context_(options.context > 0 ? options.context : model_->config().context_length),
      pool_(options.threads),
      blocks_(model_->MakeKvLayout(options.kv_type, options.block_size), 0, false),
      encoder_(*model_, context_, options_.special_tokens_in_text),
      memo_(std::make_unique<LogprobMemo>(kLogprobMemoEntries)) {
  BlockCacheOptions co;
  // Without the prefix cache, plain prompts neither look up nor insert prefixes; the budget still
  // holds the modules of loaded schemas, which are reused on request.
  co.ram_bytes = CacheBudget(options);
  pin_quota_ = PinQuota(options);
  tenant_pin_quota_ = TenantPinQuota(options);
  co.pin_bytes = pin_quota_;
  co.owner_pin_bytes = tenant_pin_quota_;
  co.max_pin_seconds = options.pin_ttl_seconds;
  stats_.pin_ram_bytes = pin_quota_;
  co.ttl_seconds = options.cache_ttl_seconds;
  co.min_tokens = options.cache_min_tokens;
  co.granularity = options.cache_granularity;
  co.remote_ttl_seconds = options.cache_redis_ttl_seconds;
  cache_ = std::make_unique<BlockCache>(&blocks_, model_->fingerprint(), co, std::move(disk),
                                        std::move(remote));
  store_ = std::make_unique<ModuleStore>(*model_, cache_.get(), &pool_, &scratch_,
                                         options.batch_size, options.module_shared_moves);
  if (options.prefault_kv) {
    const size_t per_block = std::max<size_t>(1, blocks_.layout().bytes_per_token()) *
                             size_t(blocks_.layout().block_size);
    if (Status st = blocks_.Prefault(int64_t(co.ram_bytes / per_block)); !st.ok()) {
      PC_LOG_WARN("engine: prefaulting the K/V memory stopped early: %s", st.message().c_str());
    }
  }
  thread_ = std::thread([this] { Loop(); });
}

EngineImpl::~EngineImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

BlockKey EngineImpl::NamespaceKey(const std::string& cache_namespace) const {
  if (cache_namespace.empty()) return {};
  Hasher128 h;
  h.Update(std::string_view("promptcache cache namespace"));
  h.Update(std::string_view(cache_namespace));
  uint64_t d[2];
  h.Digest(d);
  return {d[0], d[1] == 0 && d[0] == 0 ? 1 : d[1]};  // never the default's empty key
}

Status EngineImpl::ValidateRequest(const CompletionRequest& request) const {
  if (request.max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");
  if (request.n < 1 || request.n > kMaxChoices) {
    return InvalidArgument("n must be between 1 and " + std::to_string(kMaxChoices));
  }
  if (request.logprobs > kMaxTopLogprobs) {
    return InvalidArgument("logprobs must be at most " + std::to_string(kMaxTopLogprobs));
  }
  return request.sampling.Validate();
}

Result<std::shared_ptr<RequestHandle>> EngineImpl::Submit(CompletionRequest request) {
  if (request.prompt.empty()) return InvalidArgument("the prompt is empty");
  if (static_cast<int>(request.prompt.size()) >= context_) {
    return InvalidArgument("the prompt has " + std::to_string(request.prompt.size()) +
                           " tokens; the context size is " + std::to_string(context_));
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= model_->config().n_vocab) {
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  PC_RETURN_IF_ERROR(ValidateRequest(request));
  auto r = std::make_shared<Request>();
  r->req = std::move(request);
  return Enqueue(std::move(r));
}

Result<std::shared_ptr<RequestHandle>> EngineImpl::EnqueueModular(CompletionRequest request,
                                                                  Planned planned) {
  if (request.prompt_logprobs) {
    return InvalidArgument("prompt log-probabilities are for plain prompts, not modular ones");
  }
  auto r = std::make_shared<Request>();
  r->req = std::move(request);
  r->modular = std::make_unique<Planned>(std::move(planned));
  return Enqueue(std::move(r));
}

bool EngineImpl::Trims(const Request& r) const {
  // A modular prompt's prefill recomputes slots in place and gathers pieces between its stages;
  // it trims only once that is done, so its reservation covers the whole prefill.
  return options_.trim_sliding_kv && blocks_.layout().has_sliding() && !r.modular;
}

size_t EngineImpl::Reservation(const Request& r) const {
  const size_t prompt = r.modular ? r.modular->prefill.tokens.size() : r.req.prompt.size();
  // Choices share the prompt's blocks and each holds its own generated tokens.
  const size_t tokens = std::min<size_t>(
      size_t(context_) * size_t(std::max(1, r.req.n)),
      prompt + size_t(std::max(0, r.req.max_tokens)) * size_t(std::max(1, r.req.n)));
  const KvLayout& l = blocks_.layout();
  const size_t block = size_t(l.block_size);
  const size_t blocks = (tokens + block - 1) / block;
  if (!Trims(r)) return blocks * l.bytes_per_block();
  // Before each forward pass a trimming sequence holds sliding parts for the W - 1 positions
  // its next query still sees, then adds at most a batch of tokens: over at most two blocks
  // more than those tokens fill (a partial block at each end).
  const size_t live = (size_t(l.sliding_window) - 1 + options_.batch_size + block - 1) / block + 2;
  return blocks * l.global_bytes_per_block() + std::min(blocks, live) * l.sliding_bytes_per_block();
}

// The cache may keep what the running requests' reservations leave of kv_ram_bytes.
// New pins fit in what is left too (pins already held stay until they lapse).
void EngineImpl::UpdateCacheBudget() {
  if (options_.kv_ram_bytes == 0) return;
  const size_t left = options_.kv_ram_bytes > reserved_ ? options_.kv_ram_bytes - reserved_ : 0;
  const size_t budget = std::min(options_.cache_ram_bytes, left);
  cache_->SetRamBudget(budget);
  cache_->SetPinBudget(std::min(pin_quota_, budget), tenant_pin_quota_);
}

Result<std::shared_ptr<RequestHandle>> EngineImpl::Enqueue(std::shared_ptr<Request> r) {
  if (options_.kv_ram_bytes > 0) {
    // Pinned blocks cannot be evicted for it: a request fits only beside a full pin quota.
    const size_t need = Reservation(*r);
    const size_t room = options_.kv_ram_bytes > pin_quota_ ? options_.kv_ram_bytes - pin_quota_ : 0;
    if (need > room) {
      auto mib = [](size_t b) { return std::to_string((b + (1 << 20) - 1) >> 20); };
      return InvalidArgument("the request needs " + mib(need) +
                             " MiB of K/V (its prompt and max_tokens), more than the " + mib(room) +
                             " MiB the engine may use beside pinned prefixes (--kv-ram " +
                             mib(options_.kv_ram_bytes) + " MiB less the pin quota, --pin-ram)");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ >= options_.parallel + options_.max_queue) {
      stats_.requests_rejected++;
      return ResourceExhausted("the server is busy: " + std::to_string(in_flight_) +
                               " requests running or queued (limit " +
                               std::to_string(options_.parallel + options_.max_queue) + ")");
    }
    ++in_flight_;
    queue_.push_back(r);
    stats_.queued = static_cast<int>(queue_.size());
  }
  cv_.notify_all();
  return std::shared_ptr<RequestHandle>(r);
}

void EngineImpl::RunOnEngineThread(const std::function<void()>& fn) const {
  if (std::this_thread::get_id() == thread_.get_id()) {
    fn();
    return;
  }
  std::promise<void> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back([&] {
      fn();
      done.set_value();
    });
  }
  cv_.notify_all();
  done.get_future().wait();
}

void EngineImpl::Loop() {
  for (;;) {
    std::deque<std::function<void()>> tasks;
    std::vector<std::shared_ptr<Request>> admitted, cancelled;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || !tasks_.empty() || !active_.empty() || !queue_.empty(); });
      if (stop_ && active_.empty()) break;
      BeginWork();
      tasks.swap(tasks_);
      // In order of arrival; under kv_ram_bytes the first that does not fit waits for running
      // requests to finish (it always fits when none runs).
      // Requests whose client went away while they waited are answered without starting.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled) {
          cancelled.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      size_t reserving = reserved_ + pinned_bytes_;
      while (!queue_.empty() &&
             static_cast<int>(active_.size() + admitted.size()) < options_.parallel) {
        if (options_.kv_ram_bytes > 0) {
          const size_t need = Reservation(*queue_.front());
          if (!active_.empty() || !admitted.empty()) {
            if (reserving + need > options_.kv_ram_bytes) break;
          }
          reserving += need;
        }
        admitted.push_back(queue_.front());
        queue_.pop_front();
      }
      stats_.queued = static_cast<int>(queue_.size());
    }
    for (auto& r : cancelled) CancelQueued(*r);
    // Tasks are pieces of work of their own (a schema's module, a savings measurement): each
    // shows in the heartbeat apart from the step.
    for (auto& t : tasks) {
      t();
      EndWork();
      BeginWork();
    }
    // An exception here (an allocation that fails, above all) fails the requests it concerns;
    // escaping the engine thread, it would end the process.
    for (auto& r : admitted) {
      try {
        Admit(r);
      } catch (const std::exception& e) {
        const std::string why = std::string("the engine could not start the request: ") + e.what();
        auto it =
            std::find_if(active_.begin(), active_.end(), [&](const auto& s) { return s->r == r; });
        if (it != active_.end()) {
          Finish(**it, "error", Internal(why));
        } else {
          Abandon(*r, why);
        }
      }
    }
    if (!admitted.empty()) {  // /health and /metrics see them while their first step runs
      std::lock_guard<std::mutex> lock(mu_);
      stats_.active = static_cast<int>(std::count_if(active_.begin(), active_.end(),
                                                     [](const auto& s) { return !s->finished; }));
    }
    if (stop_) {
      for (auto& s : active_) Finish(*s, "cancelled");
    }
    try {
      Step();
    } catch (const std::exception& e) {
      for (auto& s : active_) {
        Finish(*s, "error", Internal(std::string("the engine failed computing: ") + e.what()));
      }
    }
    for (const auto& s : active_) {
      if (s->finished) reserved_ -= s->reserved;
    }
    active_.erase(std::remove_if(active_.begin(), active_.end(),
                                 [](const std::unique_ptr<Slot>& s) { return s->finished; }),
                  active_.end());
    UpdateCacheBudget();
    cache_->Maintain();
    UpdateStatsSnapshot();
    EndWork();
  }
  // A restarted engine finds what this one cached.
  if (cache_->disk() != nullptr) {
    if (Status st = cache_->SaveAll(); !st.ok())
      PC_LOG_WARN("saving the cache: %s", st.message().c_str());
  }
  // Blocks still queued for the remote tier go out before the process ends (the writer is
  // bounded by its timeout per batch, and drops everything while the store is down).
  if (cache_->remote() != nullptr) cache_->remote()->Flush();
  // Requests still queued at shutdown are answered, not left waiting.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : queue_) {
    std::lock_guard<std::mutex> rl(r->mu);
    r->result.status = Internal("the engine is shutting down");
    r->done = true;
    r->cv.notify_all();
  }
  queue_.clear();
}

void EngineImpl::Admit(std::shared_ptr<Request> r) {
  // The remote tier's lookups run here, on the engine thread: bounded in all, so that a slow
  // store holds up the other requests' steps no longer than this.
  RemoteBudget remote_budget(options_.cache_redis_deadline_ms);
  auto s = std::make_unique<Slot>(r, &blocks_, model_->tokenizer(), r->req.sampling);
  if (r->req.grammar) s->constraint = std::make_unique<GrammarConstraint>(r->req.grammar, Trie());
  s->admitted = Clock::now();
  s->result.queue_ms = MsBetween(s->r->submitted, s->admitted);
  if (s->r->modular) {
    if (!AdmitModular(*s)) return;
  } else {
    s->tokens = s->r->req.prompt;
    s->n_prompt = static_cast<int>(s->tokens.size());
    s->result.prompt_tokens = s->n_prompt;
    std::vector<BlockOrigin> origins;
    if (options_.prefix_cache) {
      s->result.cached_tokens = cache_->LookupPrefix(
          s->tokens, s->n_prompt - 1, &s->seq, NamespaceKey(s->r->req.cache_namespace), &origins);
    }
    if (s->r->req.prompt_logprobs) ReusePromptLogprobs(*s);
    s->result.computed_tokens = s->n_prompt - s->result.cached_tokens;
    const int bs = options_.block_size;
    for (const BlockOrigin o : origins) {
      AddRun(&s->result.sources,
             o == BlockOrigin::kDisk     ? TokenSource::kDisk
             : o == BlockOrigin::kRemote ? TokenSource::kRemote
                                         : TokenSource::kRam,
             bs);
    }
    AddRun(&s->result.sources, TokenSource::kComputed, s->result.computed_tokens);
    for (int i = s->seq.size(); i < s->n_prompt; ++i) {
      s->fill_tokens.push_back(s->tokens[i]);
      s->fill_pos.push_back(i);
    }
    s->next_pos = s->n_prompt;
  }
  s->prefill_start = Clock::now();
  if (options_.kv_ram_bytes > 0) s->reserved = Reservation(*s->r);
  active_.push_back(std::move(s));
  if (options_.kv_ram_bytes > 0) {
    reserved_ += active_.back()->reserved;
    UpdateCacheBudget();
    cache_->Maintain();  // room for it: cached blocks beyond what is left are evicted now
  }
}

bool EngineImpl::AdmitModular(Slot& s) {
  const SchemaLayout& layout = s.r->modular->schema->For(s.r->modular->positions);
  const ModularPrefill& pf = s.r->modular->prefill;
  s.tokens = pf.tokens;
  s.n_prompt = static_cast<int>(s.tokens.size());
  s.next_pos = pf.end;
  CompletionResult& res = s.result;
  res.modular = true;
  res.schema = layout.name;
  res.prompt_tokens = s.n_prompt;
  GatherStats gs;
  bool last_reused = false, dropped = false;
  BlendStats bs;
  std::vector<bool> reused;  // per gathered piece, in stage order: found cached
  if (s.r->modular->recompute > 0) {
    if (Status st = GatherBlended(s, layout, &gs, &bs, &last_reused, &dropped, &reused); !st.ok()) {
      Finish(s, "error", st);
      return false;
    }
  }
  for (size_t k = 0; k < pf.stages.size() && s.r->modular->recompute <= 0; ++k) {
    const PrefillStage& stage = pf.stages[k];
    KvSequence held(&blocks_);
    KvSequence* target = k == 0 ? &s.seq : &held;
    for (const PrefillGather& g : stage.gather) {
      const int before = gs.reused_tokens;
      if (Status st = store_->Gather(layout, g, target, &gs); !st.ok()) {
        Finish(s, "error", st);
        return false;
      }
      last_reused = gs.reused_tokens > before;
      reused.push_back(last_reused);
    }
    if (stage.drop_last) {
      target->Truncate(target->size() - 1);
      dropped = true;
    }
    if (k > 0) s.gathers.push_back({static_cast<int>(s.fill_tokens.size()), std::move(held)});
    s.fill_tokens.insert(s.fill_tokens.end(), stage.tokens.begin(), stage.tokens.end());
    s.fill_pos.insert(s.fill_pos.end(), stage.positions.begin(), stage.positions.end());
  }
  res.cached_tokens =
      std::max(0, gs.reused_tokens - (dropped && last_reused ? 1 : 0) - bs.recomputed);
  res.computed_tokens = s.n_prompt - res.cached_tokens;
  res.sources = ModularSources(pf, layout, reused);
  res.recompute_candidates = bs.candidates;
  res.recomputed_tokens = bs.recomputed;
  res.recompute_ms = bs.ms;
  res.encoded_tokens = gs.encoded_tokens;
  res.encode_ms = gs.encode_ms;
  res.gather_ms = std::max(0.0, MsBetween(s.admitted, Clock::now()) - gs.encode_ms);
  return true;
}

Status EngineImpl::GatherBlended(Slot& s, const SchemaLayout& layout, GatherStats* gs,
                                 BlendStats* bs, bool* last_reused, bool* dropped,
                                 std::vector<bool>* reused) {
  const ModularPrefill& pf = s.r->modular->prefill;
  std::vector<int> slots;  // the candidates, in blocks s.seq owns
  std::vector<int32_t> tokens;
  std::vector<int> computed_slots;  // tokens computed here, before the last stage
  std::vector<int32_t> computed_tokens;
  for (size_t k = 0; k < pf.stages.size(); ++k) {
    const PrefillStage& stage = pf.stages[k];
    for (const PrefillGather& g : stage.gather) {
      const int before = gs->reused_tokens, base = s.seq.size();
      // Candidates go into blocks of this sequence's own: Blend rewrites them in place.
      PC_RETURN_IF_ERROR(store_->Gather(layout, g, &s.seq, gs, /*own=*/!g.exact));
      if (!g.exact) {
        const std::vector<int32_t>& piece = layout.Piece(g.ref).tokens;
        for (size_t i = 0; i < piece.size(); ++i) {
          slots.push_back(base + static_cast<int>(i));
          tokens.push_back(piece[i]);
        }
      }
      *last_reused = gs->reused_tokens > before;
      reused->push_back(*last_reused);
    }
    if (stage.drop_last) {
      s.seq.Truncate(s.seq.size() - 1);
      *dropped = true;
      if (!slots.empty() && slots.back() == s.seq.size()) {
        slots.pop_back();
        tokens.pop_back();
      }
    }
    if (k + 1 < pf.stages.size()) {
      for (size_t i = 0; i < stage.tokens.size(); ++i) {
        computed_slots.push_back(s.seq.size() + static_cast<int>(i));
        computed_tokens.push_back(stage.tokens[i]);
      }
      PC_RETURN_IF_ERROR(store_->Compute(stage.tokens, stage.positions, &s.seq, nullptr));
    } else {
      s.fill_tokens = stage.tokens;
      s.fill_pos = stage.positions;
    }
  }
  return Blend(*model_, &s.seq, slots, tokens, computed_slots, computed_tokens,
               s.r->modular->recompute, options_.batch_size, &pool_, &scratch_, bs);
}

bool EngineImpl::Step() {
  std::vector<BatchToken> batch;
  // The rows of logits, in batch order: a slot's next token (pos -1), or a prompt position
  // whose logits give the next prompt token's log-probability.
  struct Row {
    Slot* slot;
    int pos;
  };
  std::vector<Row> wants_logits;
  // Decode first: one token for every sequence that is generating.
  for (auto& sp : active_) {
    Slot& s = *sp;
    if (s.finished) continue;
    if (s.r->cancelled) {
      Finish(s, "cancelled");
      continue;
    }
    if (s.pending >= 0) {
      batch.push_back({s.pending, s.next_pos++, &s.seq, true});
      wants_logits.push_back({&s, -1});
    }
  }
  // Then prefill chunks, oldest request first, while the batch has room.
  for (auto& sp : active_) {
    Slot& s = *sp;
    if (s.finished || s.pending >= 0 || s.r->cancelled) continue;
    const int room = options_.batch_size - static_cast<int>(batch.size());
    if (room <= 0) break;
    // Cached blocks that come before the next tokens join the sequence first; a token attends
    // to what its sequence held before the batch, so a stage's tokens wait for the next step.
    while (!s.gathers.empty() && s.gathers.front().before == s.filled) {
      Slot::Gather& g = s.gathers.front();
      s.seq.AppendSegment(g.held, 0, g.held.size());
      s.gathers.pop_front();
    }
    const int total = static_cast<int>(s.fill_tokens.size());
    const int stop = s.gathers.empty() ? total : s.gathers.front().before;
    const int n = std::min(room, stop - s.filled);
    const bool scored = s.r->req.prompt_logprobs;
    for (int i = s.filled; i < s.filled + n; ++i) {
      const bool last = i + 1 == total;
      batch.push_back({s.fill_tokens[i], s.fill_pos[i], &s.seq, last || scored});
      if (last || scored) wants_logits.push_back({&s, last ? -1 : s.fill_pos[i]});
    }
    s.filled += n;
  }
  if (batch.empty()) return false;
  std::vector<float> logits(wants_logits.size() * size_t(model_->config().n_vocab));
  Status st = model_->Forward(batch, logits.data(), &pool_, &scratch_);
  if (!st.ok()) {
    PC_LOG_ERROR("forward pass failed: %s", st.message().c_str());
    for (auto& sp : active_) {
      if (!sp->finished) Finish(*sp, "error", st);
    }
    return true;
  }
  for (size_t i = 0; i < wants_logits.size(); ++i) {
    Slot& s = *wants_logits[i].slot;
    const float* row = logits.data() + i * model_->config().n_vocab;
    if (wants_logits[i].pos >= 0) {
      if (!s.finished) HandlePromptRow(s, wants_logits[i].pos, row);
      continue;
    }
    s.pending = -1;
    // The request's callbacks are the caller's code: one that throws fails its request, not the
    // engine thread (and with it the process).
    try {
      HandleLogits(s, row);
    } catch (const std::exception& e) {
      Finish(s, "error", Internal(std::string("the request's callback threw: ") + e.what()));
    } catch (...) {
      Finish(s, "error", Internal("the request's callback threw"));
    }
  }
  for (auto& sp : active_) TrimSliding(*sp);
  return true;
}

void EngineImpl::TrimSliding(Slot& s) {
  if (s.finished || !options_.trim_sliding_kv || !blocks_.layout().has_sliding()) return;
  const int total = static_cast<int>(s.fill_tokens.size());
  if (s.r->modular && (s.filled < total || !s.gathers.empty())) return;
  // The sequence only moves forward: its next query is the next prefill token's, or the token
  // to decode next.
  const int32_t next = s.filled < total ? s.fill_pos[s.filled] : s.next_pos;
  const int dead = s.seq.SlidingDeadTokens(next);
  if (dead <= s.released) return;
  // While the sequence still holds those blocks whole, the cache takes them (and a full
  // reference): a later prompt sharing this prefix finds its last window complete, however far
  // this request runs past it.
  if (options_.prefix_cache && !s.r->modular) {
    cache_->InsertPrefix(std::span<const int32_t>(s.tokens).first(dead), s.seq,
                         NamespaceKey(s.r->req.cache_namespace));
  }
  s.seq.ReleaseSliding(dead);
  s.released = dead;
}

void EngineImpl::HandleLogits(Slot& s, const float* logits) {
  const CompletionRequest& req = s.r->req;
  const bool first = s.result.tokens.empty();
  if (first) {
    s.first_token = Clock::now();
    s.result.prompt_ms = MsBetween(s.admitted, s.first_token);
    s.result.prefill_ms = MsBetween(s.prefill_start, s.first_token);
    s.result.ttft_ms = MsBetween(s.r->submitted, s.first_token);
  }
  const int n_vocab = model_->config().n_vocab;
  if (req.on_logits) req.on_logits(std::span<const float>(logits, n_vocab));
  if (first && s.choice == 0 && req.prompt_logprobs && req.on_piece) {
    // A stream gets the prompt's log-probabilities first, as a piece of choice -1.
    if (!req.on_piece(TextPiece{-1, "", s.result.prompt_logprobs})) {
      s.r->cancelled = true;
      return Finish(s, "cancelled");
    }
  }
  if (first && s.choice == 0 && req.n > 1 && !s.r->forked) {
    ForkChoices(s);
    // The new choices sample their first token from these logits too.
    for (size_t i = active_.size() - (req.n - 1); i < active_.size(); ++i) {
      HandleLogits(*active_[i], logits);
    }
  }
  if (req.max_tokens == 0) return Finish(s, "length");
  const int32_t next =
      s.constraint ? SampleConstrained(s, logits) : s.sampler.Sample(logits, n_vocab, s.tokens);
  if (next < 0) {
    // The grammar's own reason when its recognizer outgrew its bounds (grammar/token_mask.h).
    if (!s.constraint->error().ok()) return Finish(s, "error", s.constraint->error());
    return Finish(s, "error",
                  InvalidArgument("the grammar allows no token of the model's vocabulary here"));
  }
  if (s.constraint) {
    if (trie_->IsEnd(next)) return Finish(s, "stop");
    const Clock::time_point t = Clock::now();
    s.constraint->Accept(next);
    s.r->grammar_ms += MsBetween(t, Clock::now());
  }
  if (!req.ignore_eos && model_->tokenizer().IsEndOfGeneration(next)) return Finish(s, "stop");
  s.tokens.push_back(next);
  s.result.tokens.push_back(next);
  if (req.logprobs >= 0) {
    s.logprobs.push_back(ComputeLogprob(logits, n_vocab, next, std::min(req.logprobs, n_vocab)));
    if (req.on_piece) s.unsent.push_back(s.logprobs.back());
  }
  bool stopped = false;
  const std::string piece = s.stream.Push(next, &stopped);
  if (!piece.empty() && !Emit(s, piece)) {
    s.r->cancelled = true;
    return Finish(s, "cancelled");
  }
  if (stopped) return Finish(s, "stop");
  if (s.constraint && s.constraint->Finished()) return Finish(s, "stop");
  if (static_cast<int>(s.result.tokens.size()) >= req.max_tokens || s.next_pos + 1 >= context_) {
    return Finish(s, "length");
  }
  s.pending = next;
}

void EngineImpl::Finish(Slot& s, const std::string& reason, Status status) {
  if (s.finished) return;
  s.finished = true;
  CompletionResult& res = s.result;
  res.status = status;
  res.finish_reason = reason;
  const std::string rest = reason == "length" ? s.stream.Finish() : std::string();
  if (!rest.empty() || !s.unsent.empty()) {
    try {
      Emit(s, rest);
    } catch (...) {
      res.status = Internal("the request's callback threw");
      res.finish_reason = "error";
    }
  }
  res.text = s.stream.text();
  if (!res.tokens.empty()) res.generation_ms = MsBetween(s.first_token, Clock::now());
  // Whatever this sequence computed stays reusable, also when the client went away.
  if (options_.prefix_cache && status.ok() && !s.r->modular) {
    const BlockKey ns = NamespaceKey(s.r->req.cache_namespace);
    cache_->InsertPrefix(std::span<const int32_t>(s.tokens).first(s.seq.size()), s.seq, ns);
    const int pin =
        s.r->req.pin_tokens < 0 ? s.n_prompt : std::min(s.r->req.pin_tokens, s.n_prompt);
    const std::string& tenant = s.r->req.tenant;
    bool limited = false;
    if (pin > 0 && s.choice == 0) {
      res.pinned_tokens = cache_->PinPrefix(std::span<const int32_t>(s.tokens).first(pin), true, ns,
                                            tenant, &limited);
      res.pin_limited |= limited;
    }
    for (const CompletionRequest::TimedPin& p : s.r->req.timed_pins) {
      if (s.choice != 0 || p.tokens <= 0) continue;
      const auto pinned = std::span<const int32_t>(s.tokens).first(std::min(p.tokens, s.n_prompt));
      res.pinned_tokens = std::max(
          res.pinned_tokens, cache_->PinPrefixFor(pinned, p.ttl_seconds, ns, tenant, &limited));
      res.pin_limited |= limited;
    }
  }
  s.seq.Clear();
  s.gathers.clear();
  Request& r = *s.r;
  r.choices[s.choice] = {res.tokens, res.text, res.finish_reason, std::move(s.logprobs)};
  if (s.choice == 0) {
    r.base = std::move(res);
  } else if (!res.status.ok() && r.failure.ok()) {
    r.failure = res.status;
  }
  if (--r.open > 0) return;
  CompleteRequest(r);
}

void EngineImpl::Abandon(Request& r, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.done) return;  // Admit finished it before it threw
    r.result.status = Internal(why);
    r.result.finish_reason = "error";
    r.done = true;
  }
  r.cv.notify_all();
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  stats_.requests++;
  stats_.requests_failed++;
}

void EngineImpl::CancelQueued(Request& r) {
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.done) return;
    r.result.finish_reason = "cancelled";
    r.result.prompt_tokens = static_cast<int>(r.req.prompt.size());
    r.result.queue_ms = MsBetween(r.submitted, Clock::now());
    r.done = true;
  }
  r.cv.notify_all();
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  stats_.requests++;
  stats_.requests_cancelled++;
}

namespace {
int64_t SteadyNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

void EngineImpl::BeginWork() { busy_since_ns_ = std::max<int64_t>(1, SteadyNs(Clock::now())); }

void EngineImpl::EndWork() {
  const int64_t since = busy_since_ns_.exchange(0);
  if (since == 0) return;
  const Clock::time_point now = Clock::now();
  const double ms = double(SteadyNs(now) - since) / 1e6;
  // The longest piece of the current minute and of the one before: "recent" without a queue.
  if (now - step_window_ > std::chrono::seconds(60)) {
    step_max_prev_ms_ = step_max_ms_.load();
    step_max_ms_ = 0;
    step_window_ = now;
  }
  if (ms > step_max_ms_) step_max_ms_ = ms;
}

void EngineImpl::UpdateStatsSnapshot() {
  const BlockCacheStats c = cache_->Stats();
  int active = 0;
  for (auto& s : active_) active += !s->finished;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.cache_hits = c.hits;
  stats_.cache_lookups = c.lookups;
  stats_.evictions = c.evictions + c.expirations;
  stats_.disk_writes = c.disk_writes;
  stats_.disk_loads = c.disk_loads;
  stats_.disk_errors = c.disk_errors;
  stats_.cache_ram_bytes = c.ram_bytes;
  stats_.cache_disk_bytes = c.disk_bytes;
  stats_.remote.enabled = c.has_remote;
  stats_.remote.loads = c.remote_loads;
  stats_.kv_bytes_in_use = blocks_.bytes_in_use();
  stats_.kv_bytes_peak = blocks_.peak_bytes_in_use();
  stats_.cache_pinned_bytes = pinned_bytes_ = c.pinned_bytes;
  stats_.pin_ram_bytes = pin_quota_;
  stats_.pins_limited = c.pins_limited;
  stats_.active = active;
}

EngineStats EngineImpl::Stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  if (const int64_t since = busy_since_ns_.load(); since != 0) {
    s.step_seconds = std::max(0.0, double(SteadyNs(Clock::now()) - since) / 1e9);
  }
  s.step_max_seconds =
      std::max({step_max_ms_.load(), step_max_prev_ms_.load(), s.step_seconds * 1000}) / 1000;
  // The remote tier's counters move on its writer thread too, also while the engine sleeps.
  if (const RemoteTier* remote = cache_->remote()) {
    const RemoteStats r = remote->Stats();
    s.remote.enabled = true;
    s.remote.connected = r.connected;
    s.remote.hits = r.hits;
    s.remote.misses = r.misses;
    s.remote.errors = r.errors;
    s.remote.writes = r.writes;
    s.remote.dropped = r.dropped;
    s.remote.invalid = r.invalid;
    s.remote.deadline_misses = r.deadline_misses;
    s.remote.breaker_opens = r.breaker_opens;
    s.remote.skipped = r.skipped;
    s.remote.breaker_open = r.breaker_open;
  }
  return s;
}

std::vector<CacheEntryInfo> EngineImpl::ListCache() const {
  std::vector<CacheEntryInfo> out;
  RunOnEngineThread([&] {
    for (const CachedPrefixInfo& p : cache_->List()) {
      out.push_back({p.key.Hex(), p.tokens, p.in_ram, p.on_disk, p.pinned, p.idle_seconds});
    }
  });
  return out;
}

std::vector<CacheBlockInfo> EngineImpl::ListCacheBlocks() const {
  std::vector<CacheBlockInfo> out;
  RunOnEngineThread([&] {
    for (CachedBlockInfo& b : cache_->ListBlocks()) {
      out.push_back({b.key.Hex(), b.parent.empty() ? "" : b.parent.Hex(), b.depth,
                     std::move(b.tokens), b.on_disk, b.pinned, b.prefix, b.hits, b.idle_seconds,
                     b.in_ram});
    }
  });
  return out;
}

Status EngineImpl::PinPrefix(const std::vector<int32_t>& tokens, bool pinned,
                             const std::string& cache_namespace, const std::string& tenant,
                             PinOutcome* out) {
  PinOutcome o;
  const BlockKey ns = NamespaceKey(cache_namespace);
  bool found = true;
  RunOnEngineThread([&] {
    o.tokens = cache_->PinPrefix(tokens, pinned, ns, tenant, &o.limited);
    // A pin the quota stopped at its first block still found the prefix cached.
    if (o.tokens == 0 && !o.limited) found = false;
    UpdateStatsSnapshot();
  });
  if (out != nullptr) *out = o;
  if (!found) return NotFound("no cached prefix of these tokens");
  return Status::Ok();
}

Status EngineImpl::DropCache(const std::string& key, bool force) {
  Status st;
  RunOnEngineThread([&] {
    st = cache_->Drop(key, force);
    UpdateStatsSnapshot();
  });
  return st;
}

std::vector<PinInfo> EngineImpl::ListPins() const {
  std::vector<PinInfo> out;
  RunOnEngineThread([&] {
    for (const PinnedPrefixInfo& p : cache_->ListPins()) {
      out.push_back({p.key.Hex(), p.ns.empty() ? "" : p.ns.Hex(), p.owner, p.tokens, p.bytes,
                     p.counted, p.expires_in_seconds});
    }
  });
  return out;
}

Result<int> EngineImpl::Unpin(const std::string& key) {
  Result<int> n = 0;
  RunOnEngineThread([&] {
    n = cache_->Unpin(key);
    UpdateStatsSnapshot();
  });
  return n;
}

Status EngineImpl::SaveCache() {
  Status st;
  RunOnEngineThread([&] {
    st = cache_->SaveAll();
    UpdateStatsSnapshot();
  });
  return st;
}

Result<std::vector<GenerationTiming>> EngineImpl::MeasureGeneration(int max_tokens) {
  if (max_tokens < 1 || max_tokens + 1 > context_) {
    return InvalidArgument("max_tokens must be between 1 and " + std::to_string(context_ - 1));
  }
  SessionOptions so;
  so.threads = options_.threads;
  so.context = max_tokens + 1;
  so.kv_type = options_.kv_type;
  std::unique_ptr<Session> session;
  RunOnEngineThread([&] { session = std::make_unique<Session>(*model_, so); });
  // One forward pass per task, on the engine thread between steps: requests wait for each (so
  // that the timing is not shared with them) but never for more than one pass of at most
  // max_tokens tokens.
  std::vector<GenerationTiming> out;
  for (const int len : SavingsLengths(max_tokens, 16, 8)) {
    GenerationTiming t{len, 0, 0};
    for (const bool use_cache : {true, false}) {
      GenerationTimer timer(session.get(), len, use_cache);
      Result<bool> more = true;
      while (more.ok() && *more) RunOnEngineThread([&] { more = timer.Step(); });
      if (!more.ok()) return more.status();
      (use_cache ? t.with_cache_ms : t.no_cache_ms) = timer.ms();
    }
    out.push_back(t);
  }
  RunOnEngineThread([&] { session.reset(); });
  return out;
}

CacheTierCounts EngineImpl::LookupCache(const std::vector<int32_t>& tokens,
                                        const std::string& cache_namespace) const {
  CacheTierCounts out;
  if (tokens.empty()) return out;
  const BlockKey ns = NamespaceKey(cache_namespace);
  const std::vector<BlockKey> keys = cache_->ChainKeys(tokens, ns);
  TierCounts local;
  RunOnEngineThread([&] { local = cache_->Probe(keys); });
  out.ram = local.ram;
  out.disk = local.disk;
  const int bs = blocks_.layout().block_size;
  // The remote tier is asked here, on the caller's thread: the engine never waits for it.
  if (RemoteTier* remote = cache_->remote()) {
    std::vector<std::string> names;
    for (const BlockKey& k : keys) names.push_back(cache_->RemoteKeyOf(ns, k));
    out.remote = remote->CountLeading(names) * bs;
  }
  // A lookup reads RAM and disk block by block, then the remote tier from where they end.
  const int usable = std::max(local.local, out.remote) / bs;
  const int limit = (static_cast<int>(tokens.size()) - 1) / bs;
  out.reusable = std::min(usable, limit) * bs;
  return out;
}

Result<int> EngineImpl::WarmPrefix(const std::vector<int32_t>& tokens,
                                   const std::string& cache_namespace) {
  const BlockKey ns = NamespaceKey(cache_namespace);
  if (tokens.empty()) return InvalidArgument("the prompt is empty");
  if (static_cast<int>(tokens.size()) > context_) return InvalidArgument("prompt over the context");
  for (int32_t t : tokens) {
    if (t < 0 || t >= model_->config().n_vocab) return InvalidArgument("token id out of range");
  }
  Status st;
  int cached = 0;
  // A batch per task, between the steps of running requests: a long prefix does not hold the
  // engine for the whole of its prefill. The sequence's references keep its blocks meanwhile.
  std::unique_ptr<KvSequence> seq;
  RunOnEngineThread([&] {
    seq = std::make_unique<KvSequence>(&blocks_);
    cached = cache_->LookupPrefix(tokens, static_cast<int>(tokens.size()), seq.get(), ns);
  });
  for (int b = cached; b < static_cast<int>(tokens.size()) && st.ok(); b += options_.batch_size) {
    RunOnEngineThread([&] {
      std::vector<BatchToken> batch;
      const int e = std::min<int>(tokens.size(), b + options_.batch_size);
      for (int i = b; i < e; ++i) batch.push_back({tokens[i], i, seq.get(), false});
      st = model_->Forward(batch, nullptr, &pool_, &scratch_);
    });
  }
  RunOnEngineThread([&] {
    if (st.ok()) cache_->InsertPrefix(tokens, *seq, ns);
    seq.reset();
    cache_->Maintain();
    UpdateStatsSnapshot();
  });
  if (!st.ok()) return st;
  return cached;
}

}  // namespace promptcache
