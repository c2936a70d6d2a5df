#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <limits>

#include "core/hash.h"
#include "core/log.h"
#include "core/stop_thread.h"
#include "engine/create_engine.h"
#include "engine/engine_impl.h"
#include "engine/engine_slot.h"
#include "kv/redis_tier.h"
#include "sampling/logprobs.h"

namespace promptcache {
namespace {

// Prompt-token log-probabilities kept for cached prefixes (about 100 bytes each without
// alternatives).
constexpr size_t kLogprobMemoEntries = size_t(1) << 18;

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

// A static pool: every sequence's whole context, allocated at start.
int64_t StaticBlocks(const EngineOptions& o, int context) {
  return int64_t(o.parallel) * ((context + o.block_size - 1) / o.block_size);
}

Status CheckOptions(const EngineOptions& options) {
  if (options.parallel < 1) return InvalidArgument("parallel must be >= 1");
  if (options.max_queue < 0) return InvalidArgument("max_queue must be >= 0");
  if (options.block_size < 1 || options.batch_size < 0) {
    return InvalidArgument("block_size must be >= 1 and batch_size >= 0");
  }
  if (!(options.module_recompute >= 0 && options.module_recompute <= 1)) {
    return InvalidArgument("module_recompute must be a share from 0 to 1");
  }
  if (!(options.segment_recompute >= 0 && options.segment_recompute <= 1)) {
    return InvalidArgument("segment_recompute must be a share from 0 to 1");
  }
  if (options.segment_min_tokens < 1 || options.segment_border_tokens < 0) {
    return InvalidArgument("segment_min_tokens must be >= 1 and segment_border_tokens >= 0");
  }
  if (options.fidelity_sample < 0) return InvalidArgument("fidelity_sample must be >= 0");
  if (options.cache_redis_readers < 1 || options.cache_redis_readers > kMaxReadConnections) {
    return InvalidArgument("cache_redis_readers must be between 1 and " +
                           std::to_string(kMaxReadConnections));
  }
  return CheckPinQuotas(options);
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  PC_RETURN_IF_ERROR(CheckOptions(options));
  PC_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(options.model_path));
  return CreateEngine(options, std::move(model));
}

Result<std::unique_ptr<Engine>> CreateEngine(EngineOptions options, std::unique_ptr<Model> model,
                                             bool static_kv, std::unique_ptr<RemoteTier> remote) {
  PC_RETURN_IF_ERROR(CheckOptions(options));
  if (!options.chat_template.empty()) model->set_chat_template(options.chat_template);
  PC_RETURN_IF_ERROR(CheckContext(model->config(), options.context, options.allow_long_context));
  PC_RETURN_IF_ERROR(CheckKvType(options.kv_type, model->config().kv_dim()));
  model->UseContext(options.context > 0 ? options.context : model->config().context_length);
  if (options.batch_size == 0) options.batch_size = model->DefaultBatchSize();
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
  if (remote == nullptr && !options.cache_redis.empty()) {
    RedisOptions redis;
    redis.url = options.cache_redis;
    redis.timeout_ms = options.cache_redis_timeout_ms;
    redis.queue_bytes = options.cache_redis_queue_bytes;
    redis.deadline_ms = options.cache_redis_deadline_ms;
    redis.read_connections = options.cache_redis_readers;
    PC_ASSIGN_OR_RETURN(remote, OpenRedisTier(redis));
  }
  auto engine = std::make_unique<EngineImpl>(options, std::move(model), std::move(disk),
                                             std::move(remote), static_kv);
  engine->ReloadPersistedSchemas();
  return std::unique_ptr<Engine>(std::move(engine));
}

EngineImpl::EngineImpl(const EngineOptions& options, std::unique_ptr<Model> model,
                       std::unique_ptr<DiskTier> disk, std::unique_ptr<RemoteTier> remote,
                       bool static_kv)
    : options_(options),
      model_(std::move(model)),
      context_(options.context > 0 ? options.context : model_->config().context_length),
      pool_(options.threads),
      blocks_(model_->MakeKvLayout(options.kv_type, options.block_size),
              static_kv ? StaticBlocks(options, context_) : 0, static_kv),
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
  segments_ =
      std::make_unique<SegmentStore>(*model_, cache_.get(), &pool_, options.segment_encoding);
  if (cache_->remote() != nullptr) {
    fetcher_ = std::make_unique<RemoteFetcher>(cache_->remote(), options.cache_redis_deadline_ms,
                                               options.cache_redis_readers);
  }
  if (options.prefault_kv) {
    const size_t per_block = std::max<size_t>(1, blocks_.layout().bytes_per_token()) *
                             size_t(blocks_.layout().block_size);
    if (Status st = blocks_.Prefault(int64_t(co.ram_bytes / per_block)); !st.ok()) {
      PC_LOG_WARN("engine: prefaulting the K/V memory stopped early: %s", st.message().c_str());
    }
  }
  if (options.fidelity_sample > 0) {
    RunnerOptions ro;
    ro.context = context_;
    ro.kv_type = options.kv_type;
    ro.block_size = options.block_size;
    ro.batch_size = options.batch_size;
    ro.trim_sliding_kv = options.trim_sliding_kv;
    fidelity_ = std::make_unique<FidelitySampler>(*model_, ro, options.fidelity_sample,
                                                  [this] { return Idle(); });
  }
  thread_ = std::thread([this] { Loop(); });
}

EngineImpl::~EngineImpl() {
  StopAndJoin(mu_, stop_, cv_, thread_);
  fidelity_.reset();  // cancels the evaluation under way; drops those waiting
}

bool EngineImpl::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_ == 0 && queue_.empty() && tasks_.empty();
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

Status EngineImpl::CheckVocabulary(std::span<const int32_t> ids, const std::string& what) const {
  for (int32_t t : ids) {
    if (t < 0 || t >= model_->config().n_vocab) {
      return InvalidArgument(what + "token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  return Status::Ok();
}

Status EngineImpl::ValidateRequest(const CompletionRequest& request) const {
  if (request.max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");
  if (request.n < 1 || request.n > kMaxChoices) {
    return InvalidArgument("n must be between 1 and " + std::to_string(kMaxChoices));
  }
  if (request.logprobs > kMaxTopLogprobs) {
    return InvalidArgument("logprobs must be at most " + std::to_string(kMaxTopLogprobs));
  }
  if (request.segment_recompute &&
      !(*request.segment_recompute >= 0 && *request.segment_recompute <= 1)) {
    return InvalidArgument("segment_recompute must be a share from 0 to 1");
  }
  int end = 0;
  for (const PromptSegment& g : request.segments) {
    if (g.begin < end || g.end <= g.begin || g.end > static_cast<int>(request.prompt.size())) {
      return InvalidArgument(
          "segment [" + std::to_string(g.begin) + ", " + std::to_string(g.end) +
          ") is not a non-empty range of the prompt after the segment before it");
    }
    end = g.end;
  }
  PC_RETURN_IF_ERROR(CheckVocabulary(request.prediction, "prediction "));
  if (request.recompute_each_step && request.prompt_logprobs) {
    return InvalidArgument("recompute_each_step does not report prompt log-probabilities");
  }
  PC_RETURN_IF_ERROR(request.sampling.Validate());
  const int n_vocab = model_->config().n_vocab;
  for (const LogitBias& b : request.sampling.logit_bias) {
    if (b.token >= n_vocab) {
      return InvalidArgument("logit_bias token " + std::to_string(b.token) +
                             " is outside the vocabulary of " + std::to_string(n_vocab) +
                             " tokens");
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<RequestHandle>> EngineImpl::Submit(CompletionRequest request) {
  if (request.prompt.empty()) return InvalidArgument("the prompt is empty");
  if (static_cast<int>(request.prompt.size()) >= context_) {
    return InvalidArgument("the prompt has " + std::to_string(request.prompt.size()) +
                           " tokens; the context size is " + std::to_string(context_));
  }
  PC_RETURN_IF_ERROR(CheckVocabulary(request.prompt, ""));
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
  if (!request.segments.empty()) {
    return InvalidArgument("segments are for plain prompts, not modular ones");
  }
  if (request.recompute_each_step) {
    return InvalidArgument("recompute_each_step is for plain prompts, not modular ones");
  }
  auto r = std::make_shared<Request>();
  r->req = std::move(request);
  r->modular = std::make_unique<Planned>(std::move(planned));
  return Enqueue(std::move(r));
}

bool EngineImpl::UsesPrefixCache(const Request& r) const {
  return options_.prefix_cache && !r.modular && !r.req.recompute_each_step;
}

Result<std::shared_ptr<RequestHandle>> EngineImpl::Enqueue(std::shared_ptr<Request> r) {
  if (options_.kv_ram_bytes > 0) {
    // Pinned blocks cannot be evicted for it: a request fits only beside a full pin quota.
    const size_t need = Reservation(*r);
    const size_t room = options_.kv_ram_bytes > pin_quota_ ? options_.kv_ram_bytes - pin_quota_ : 0;
    if (need > room) {
      auto mib = [](size_t b) { return std::to_string((b + (1 << 20) - 1) >> 20); };
      const char* what =
          r->embedding ? "its inputs, a batch at a time" : "its prompt and max_tokens";
      return InvalidArgument("the request needs " + mib(need) + " MiB of K/V (" + what +
                             "), more than the " + mib(room) +
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
  stats_.segment_lookups = segment_counters_.lookups;
  stats_.segment_hits = segment_counters_.hits;
  stats_.segment_tokens_reused = segment_counters_.tokens_reused;
  stats_.segment_stores = segment_counters_.stores;
  stats_.in_flight_segment_waits = segment_counters_.in_flight_waits;
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
  if (fidelity_) s.fidelity = fidelity_->Stats();
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

}  // namespace promptcache
