// `promptcache serve`: the OpenAI-compatible HTTP server (src/server) in front of an Engine with
// the prefix cache. Prints "listening on http://HOST:PORT" on stderr once it accepts
// connections (with --port 0, the port it picked), and stops cleanly on SIGINT or SIGTERM:
// running requests are cancelled and, with --cache-dir, the cache is saved to disk.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "core/log.h"
#include "ops/targets.h"
#include "promptcache/engine.h"
#include "server/http_server.h"
#include "server/tenants.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// What this process may still take: the kernel's MemAvailable, and under a cgroup (v2 or v1)
// with a memory limit, that limit less what the cgroup uses, whichever is less.
size_t AvailableMemoryBytes() {
  size_t available = SIZE_MAX;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    while (std::fgets(line, sizeof(line), f)) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        available = size_t(kib) * 1024;
        break;
      }
    }
    std::fclose(f);
  }
  auto read_number = [](const char* path, unsigned long long* out) {
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) return false;
    const bool ok = std::fscanf(f, "%llu", out) == 1;  // "max" (no limit) does not parse
    std::fclose(f);
    return ok;
  };
  unsigned long long limit = 0, used = 0;
  if ((read_number("/sys/fs/cgroup/memory.max", &limit) &&
       read_number("/sys/fs/cgroup/memory.current", &used)) ||
      (read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) &&
       read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", &used))) {
    if (limit > used) available = std::min(available, size_t(limit - used));
  }
  return available == SIZE_MAX ? size_t(1) << 30 : available;
}

class ServeCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    AddModelOptions(sub);
    AddServingOptions(sub);
    AddMemoryOptions(sub);
    AddCacheOptions(sub);
    AddAccessOptions(sub);
    AddLimitOptions(sub);
    AddReuseOptions(sub);
    AddTextOptions(sub);
  }

  int Execute() override {
    if (verbose_) SetLogLevel(LogLevel::kDebug);
    if (Status st = Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(isa_); !st.ok()) return Fail(st);
    if (Status st = ResolveAccess(); !st.ok()) return Fail(st);
    if (Status st = ResolveEngineOptions(); !st.ok()) return Fail(st);

    // Signals are taken by a dedicated thread (AwaitSignals): blocked here, before any thread
    // exists, so that every engine and HTTP thread inherits the mask.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    Result<std::unique_ptr<Engine>> engine = Engine::Create(engine_);
    if (!engine.ok()) return Fail(engine.status());
    PrintBounds((*engine)->Stats(), kv_ram_given_->count() == 0);
    int exit_code = 0;
    {
      HttpServer server(engine->get(), server_);
      if (Status st = server.Bind(); !st.ok()) return Fail(st);
      const bool v6 = server_.host.find(':') != std::string::npos;
      std::fprintf(stderr, "promptcache: serving %s (%s kernels); listening on http://%s%s%s:%d\n",
                   server.model_id().c_str(), OpsActiveTargetName().c_str(), v6 ? "[" : "",
                   server_.host.c_str(), v6 ? "]" : "", server.port());
      std::fflush(stderr);
      std::atomic<bool> done{false};
      std::thread waiter([&] { AwaitSignals(signals, server, **engine, done); });
      Status st = server.Run();
      done = true;
      waiter.join();
      if (!st.ok()) exit_code = Fail(st);
    }
    // Destroying the engine finishes its thread and, with --cache-dir, saves the cache.
    engine->reset();
    std::fprintf(stderr, "promptcache: stopped\n");
    return exit_code;
  }

 private:
  // The API key (or $PROMPTCACHE_API_KEY), the tenants' keys file and the cache secret.
  Status ResolveAccess() {
    if (server_.api_key.empty()) {
      if (const char* key = std::getenv("PROMPTCACHE_API_KEY")) server_.api_key = key;
    }
    if (!api_keys_file_.empty()) {
      Result<std::map<std::string, std::string>> keys = ReadApiKeysFile(api_keys_file_);
      if (!keys.ok()) return keys.status();
      server_.api_keys = std::move(*keys);
    }
    if (!cache_secret_.empty()) {
      if (cache_secret_.size() < 16) {
        return InvalidArgument("--cache-secret: 16 characters at least");
      }
      server_.cache_secret = cache_secret_;
    } else {
      std::string where;
      Result<std::string> secret = LoadCacheSecret(cache_secret_file_, engine_.cache_dir, &where);
      if (!secret.ok()) return secret.status();
      server_.cache_secret = std::move(*secret);
      PC_LOG_DEBUG("cache namespaces keyed by the secret in %s", where.c_str());
    }
    return Status::Ok();
  }

  // The engine's and server's options from what the flags hold (sizes in MiB, names, files).
  Status ResolveEngineOptions() {
    engine_.kv_type = *ParseKvType(kv_type_);
    engine_.pooling = *ParsePooling(pooling_);
    engine_.module_positions = *ParsePmlPositions(positions_);
    engine_.module_shared_moves = moved_keys_ == "shared";
    // The engine's segment capability is always on: a request may ask for segments
    // ("cache_segments": true) on a server started without --segment-cache, which only sets
    // the default. A prompt without segments is served as before.
    engine_.segment_cache = true;
    engine_.segment_encoding =
        segment_encoding_ == "alone" ? SegmentEncoding::kAlone : SegmentEncoding::kInContext;
    if (recompute_given_->count() > 0) engine_.segment_recompute = engine_.module_recompute;
    server_.segment_separator = *UnescapeC(segment_separator_);
    server_.max_body_bytes = static_cast<size_t>(max_body_bytes_);
    engine_.cache_ram_bytes = size_t(cache_ram_mib_ * double(kMiB));
    const bool kv_ram_default = kv_ram_given_->count() == 0;
    // Running requests' K/V is always bounded unless the operator says otherwise: by half of
    // what the machine (or the container) has available at start.
    engine_.kv_ram_bytes =
        kv_ram_default ? AvailableMemoryBytes() / 2 : size_t(kv_ram_mib_ * double(kMiB));
    if (pin_ram_given_->count() > 0) engine_.pin_ram_bytes = size_t(pin_ram_mib_ * double(kMiB));
    if (pin_ram_tenant_given_->count() > 0) {
      engine_.tenant_pin_ram_bytes = size_t(pin_ram_tenant_mib_ * double(kMiB));
    }
    engine_.cache_disk_bytes = size_t(cache_disk_mib_ * double(kMiB));
    engine_.cache_redis_queue_bytes = size_t(cache_redis_queue_mib_ * double(kMiB));
    engine_.prefix_cache = !no_prefix_cache_;
    draft_.Apply(&engine_);
    Result<std::string> chat_template = ReadChatTemplateFile(chat_template_path_);
    if (!chat_template.ok()) return chat_template.status();
    engine_.chat_template = std::move(*chat_template);
    engine_.trim_sliding_kv = !no_trim_sliding_;
    return Status::Ok();
  }

  // The signal thread: on SIGINT or SIGTERM stops the server, saves the cache, then waits for
  // the open connections up to --shutdown-timeout (a second signal exits at once); returns
  // when `done` (the server stopped) or after shutting down.
  void AwaitSignals(const sigset_t& signals, HttpServer& server, Engine& engine,
                    const std::atomic<bool>& done) {
    const timespec poll{0, 200 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&signals, nullptr, &poll);
      if (sig == SIGINT || sig == SIGTERM) {
        PC_LOG_INFO("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
        server.Stop();
        // Save the cache now: connections still sending half a request keep the HTTP layer
        // waiting up to its read timeout, longer than an orchestrator's grace period.
        if (!engine_.cache_dir.empty()) {
          if (Status saved = engine.SaveCache(); !saved.ok()) {
            PC_LOG_WARN("saving the cache: %s", saved.message().c_str());
          }
        }
        // Then wait for the open connections, up to --shutdown-timeout; a second signal
        // ends the wait at once.
        const auto give_up =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(shutdown_timeout_);
        while (!done) {
          const int again = sigtimedwait(&signals, nullptr, &poll);
          const bool late = std::chrono::steady_clock::now() >= give_up;
          if (again == SIGINT || again == SIGTERM || late) {
            std::fprintf(stderr,
                         "promptcache: %s; exiting without waiting for open "
                         "connections\n",
                         late ? "shutdown timeout" : "second signal");
            std::fflush(stderr);
            std::_Exit(late ? 0 : 1);
          }
        }
        return;
      }
    }
  }

  // Options: the model, its context and KV type, the kernels.
  void AddModelOptions(CLI::App* sub) {
    sub->add_option("-m,--model", engine_.model_path, "GGUF model file")->required();
    sub->add_option(
        "-t,--threads", engine_.threads,
        "compute threads (default: one per physical core this process may run on, within its CPU "
        "quota)");
    sub->add_option("-c,--context", engine_.context,
                    "context size per request in tokens (default: the model's)");
    sub->add_flag("--allow-long-context", engine_.allow_long_context,
                  "accept a context beyond what the model was trained for");
    sub->add_option(
           "--kv-type", kv_type_,
           "KV cache storage: f16, f32, q8_0 (half of f16's bytes) or q4_0 (about a quarter); "
           "q8_0/q4_0 need a head size that is a multiple of 32")
        ->default_val("f16");
    sub->add_option("--pooling", pooling_,
                    "embeddings' pooling (/v1/embeddings, /api/embed): mean, last or cls; "
                    "default: the model file's {arch}.pooling_type, else mean");
    AddIsaOption(sub, &isa_);
  }

  // Options: where it listens, and how many requests it serves at once and in what steps.
  void AddServingOptions(CLI::App* sub) {
    sub->add_option("--host", server_.host, "address to listen on")->default_val("127.0.0.1");
    sub->add_option("--port", server_.port, "port (0: any free port)")->default_val(8080);
    sub->add_option("--parallel", engine_.parallel, "requests served at once")->default_val(4);
    sub->add_option("--max-queue", engine_.max_queue,
                    "requests waiting beyond --parallel; more get 503")
        ->default_val(64);
    sub->add_option("--batch-size", engine_.batch_size, "prefill tokens per forward pass")
        ->default_val(512);
    sub->add_option("--block-size", engine_.block_size,
                    "tokens per KV block: the prefix cache's granularity of reuse")
        ->default_val(16);
    draft_.Register(sub);
  }

  // Options: K/V memory: the bound on all of it, the cache's and the pins' shares, and their
  // timing.
  void AddMemoryOptions(CLI::App* sub) {
    kv_ram_given_ =
        sub->add_option("--kv-ram", kv_ram_mib_,
                        "MiB for all K/V, running requests and cached prefixes together: each "
                        "request reserves its prompt plus max_tokens; one that does not fit waits, "
                        "one that never could gets a 400 (default: half of the memory available at "
                        "start, MemAvailable or the cgroup's limit; 0: no bound)")
            ->check(CLI::Range(0.0, 1048576.0));
    sub->add_option("--cache-ram", cache_ram_mib_, "RAM for cached prefixes, MiB")
        ->default_val(1024);
    pin_ram_given_ =
        sub->add_option(
               "--pin-ram", pin_ram_mib_,
               "MiB pinned prefixes may hold in all (default: a quarter of --cache-ram, or of "
               "--kv-ram when smaller); a pin past it stops at the last block that fits")
            ->check(CLI::Range(0.0, 1048576.0));
    pin_ram_tenant_given_ =
        sub->add_option("--pin-ram-tenant", pin_ram_tenant_mib_,
                        "MiB one tenant's pins (--api-keys) may hold (default: a quarter of "
                        "--pin-ram)")
            ->check(CLI::Range(0.0, 1048576.0));
    sub->add_option("--pin-ttl", engine_.pin_ttl_seconds,
                    "seconds a pin lasts without being used or renewed: cache.pin, chat "
                    "cache_control and /v1/cache/pin pins lapse then; /v1/messages cache_control "
                    "TTLs are cut to it")
        ->default_val(3600.0)
        ->check(CLI::Range(0.001, 2592000.0));
    sub->add_option("--stall-timeout", server_.stall_seconds,
                    "seconds one engine step (or task between steps) may take before /health "
                    "answers 503")
        ->default_val(30.0)
        ->check(CLI::Range(0.001, 86400.0));
    sub->add_flag("--kv-prefault", engine_.prefault_kv,
                  "fault in --cache-ram of K/V memory at start, so that the first long prefix "
                  "loaded from disk or Redis does not wait for fresh pages (held from then on)");
  }

  // Options: the prefix cache and its disk and Redis tiers.
  void AddCacheOptions(CLI::App* sub) {
    sub->add_option("--cache-ttl", engine_.cache_ttl_seconds,
                    "drop cached prefixes idle this long, seconds (0: never)");
    sub->add_option("--cache-min-tokens", engine_.cache_min_tokens,
                    "do not cache prompts shorter than this (OpenAI: 1024)");
    sub->add_option("--cache-granularity", engine_.cache_granularity,
                    "cache prefixes in multiples of this many tokens (OpenAI: 128; 0: a block)");
    sub->add_option("--cache-dir", engine_.cache_dir,
                    "disk tier: evicted prefixes go here and survive restarts");
    sub->add_option("--cache-disk", cache_disk_mib_, "disk tier budget, MiB")->default_val(4096);
    sub->add_option("--cache-redis", engine_.cache_redis,
                    "remote tier shared by replicas: redis://[:PASSWORD@]HOST[:PORT][/DB]");
    sub->add_option("--cache-redis-timeout", engine_.cache_redis_timeout_ms,
                    "ms a Redis connect or command may take before it counts as a miss")
        ->default_val(100);
    sub->add_option("--cache-redis-deadline", engine_.cache_redis_deadline_ms,
                    "ms a request's Redis lookups may take in all before the rest is computed "
                    "(the engine waits for them)")
        ->default_val(1000);
    sub->add_option("--cache-redis-readers", engine_.cache_redis_readers,
                    "requests whose Redis lookups are read at once, each on a connection of its "
                    "own (1: one after another)")
        ->default_val(4);
    sub->add_option("--cache-redis-ttl", engine_.cache_redis_ttl_seconds,
                    "expiry of the blocks written to Redis, seconds (pinned prefixes: none)")
        ->default_val(86400);
    sub->add_option("--cache-redis-queue", cache_redis_queue_mib_,
                    "MiB of blocks waiting to be written to Redis; more are dropped")
        ->default_val(256);
    sub->add_flag("--no-prefix-cache", no_prefix_cache_,
                  "compute every prompt from scratch (for comparisons)");
    sub->add_flag("--no-trim-sliding", no_trim_sliding_,
                  "keep the K/V of sliding-window layers that no later token can see (default: "
                  "released once the window has passed; for comparisons)");
  }

  // Options: API keys, tenants' cache secret, shutdown and /metrics access.
  void AddAccessOptions(CLI::App* sub) {
    sub->add_option("--api-key", server_.api_key,
                    "require 'Authorization: Bearer KEY' (default: $PROMPTCACHE_API_KEY)");
    sub->add_option("--api-keys", api_keys_file_,
                    "tenants' keys: a file of 'KEY [TENANT]' lines; each tenant's prefixes are "
                    "cached apart (--api-key remains the admin key)");
    sub->add_option("--cache-secret", cache_secret_,
                    "secret keying tenants' cache namespaces (replicas sharing --cache-redis need "
                    "the same; default: DIR/cache-secret under --cache-dir, else random)");
    sub->add_option("--cache-secret-file", cache_secret_file_,
                    "read --cache-secret from the first line of this file");
    sub->add_option("--shutdown-timeout", shutdown_timeout_,
                    "seconds SIGTERM/SIGINT waits for open connections after saving the cache; "
                    "a second signal exits at once")
        ->default_val(10.0)
        ->check(CLI::Range(0.0, 3600.0));
    sub->add_flag("--metrics-public", server_.metrics_public,
                  "serve /metrics without the API key (it shows request counts and cache use)");
  }

  // Options: bounds on request bodies, prompts, max_tokens and connections.
  void AddLimitOptions(CLI::App* sub) {
    sub->add_option("--max-body-bytes", max_body_bytes_,
                    "largest request body, 1024 to 1 GiB (default 8 MiB)")
        ->default_val(int64_t(8) << 20);
    sub->add_option("--max-prompt-tokens", server_.max_prompt_tokens,
                    "largest prompt in tokens (0: the context)");
    sub->add_option("--max-tokens-limit", server_.max_tokens_limit,
                    "largest max_tokens a request may ask for (0: the context)");
    sub->add_option("--max-connections", server_.transport.max_connections,
                    "connections served at once, each on its own thread; one more gets a 503")
        ->default_val(512)
        ->check(CLI::Range(1, 65536));
    sub->add_option("--max-connections-per-client", server_.transport.max_connections_per_client,
                    "connections one client address may hold at once (0: half of "
                    "--max-connections; behind a proxy, raise it to --max-connections)")
        ->default_val(0)
        ->check(CLI::Range(0, 65536));
    sub->add_option("--header-timeout", server_.transport.header_timeout_s,
                    "seconds a request's line and headers may take to arrive, in total")
        ->default_val(10.0)
        ->check(CLI::Range(0.1, 3600.0));
    sub->add_option("--body-timeout", server_.transport.body_timeout_s,
                    "seconds a request's body may take to arrive, in total")
        ->default_val(60.0)
        ->check(CLI::Range(0.1, 3600.0));
    sub->add_option("--idle-timeout", server_.transport.idle_timeout_s,
                    "seconds a kept-alive connection waits for its next request before the "
                    "server closes it (announced in Keep-Alive)")
        ->default_val(5.0)
        ->check(CLI::Range(1.0, 3600.0));
  }

  // Options: modular prompts and segments: positions, moved keys, recompute, fidelity sampling.
  void AddReuseOptions(CLI::App* sub) {
    sub->add_option("--positions", positions_,
                    "where modular prompts' tokens sit unless a request says: schema (reserved "
                    "positions, gaps where modules are left out) or contiguous (end to end from "
                    "0, as the same text sent plainly; cached keys re-rotated)")
        ->default_val("schema");
    sub->add_option("--moved-keys", moved_keys_,
                    "how cached keys reach the positions contiguous mode moves them to: copy (into "
                    "fresh blocks, keys rotated) or shared (no copy: attention rotates the queries "
                    "that read them)")
        ->default_val("shared")
        ->check(CLI::IsMember({"copy", "shared"}));
    recompute_given_ =
        sub->add_option("--recompute", engine_.module_recompute,
                        "share (0 to 1) of a modular prompt's cached tokens encoded without part "
                        "of its context, and of reused segments' tokens, that is recomputed with "
                        "it (CacheBlend; requests may override; unset: 0 for modules, 0.15 for "
                        "segments)")
            ->default_val(0.0)
            ->check(CLI::Range(0.0, 1.0));
    sub->add_flag("--segment-cache", server_.segment_cache,
                  "cut every chat and completion prompt into segments (messages, content parts, "
                  "documents between --segment-separator) reused wherever they appear, unless a "
                  "request says \"cache_segments\": false (docs/server.md \"Segments\")");
    sub->add_option("--segment-min-tokens", engine_.segment_min_tokens,
                    "segments shorter than this are not looked up nor stored")
        ->default_val(64);
    sub->add_option("--segment-separator", segment_separator_,
                    "a delimiter between documents that also cuts a text into segments, with C "
                    "escapes (\"\\n\\n---\\n\\n\"); empty: none");
    sub->add_option("--segment-border", engine_.segment_border_tokens,
                    "first tokens of every reused segment always recomputed")
        ->default_val(4);
    sub->add_option("--segment-encoding", segment_encoding_,
                    "what a stored segment attended to: in-context (the request that stored it) "
                    "or alone (computed again after BOS)")
        ->default_val("in-context");
    sub->add_option("--fidelity-sample", engine_.fidelity_sample,
                    "evaluate one request in N among those that reused approximate K/V (schema "
                    "modules, segments) against the full recompute, in the background after it "
                    "answered and only while the server is idle; /metrics promptcache_fidelity_* "
                    "(0: off)")
        ->default_val(0)
        ->check(CLI::Range(0, 1000000));
  }

  // Options: special tokens, chat template, names, CORS, logging.
  void AddTextOptions(CLI::App* sub) {
    sub->add_flag("--special", engine_.special_tokens_in_text,
                  "trust clients: special-token spellings (<|im_end|>, </s>) in chat messages, "
                  "prompts, PML arguments and new text become special tokens (default: they "
                  "stay text; only templates and schemas write special tokens)");
    sub->add_option("--chat-template", chat_template_path_,
                    "Jinja chat template file to use instead of the model's "
                    "tokenizer.chat_template");
    sub->add_option("--alias", server_.aliases,
                    "another name the server answers to in a request's \"model\" (repeatable; "
                    "listed by /v1/models)");
    sub->add_option("--cors", server_.cors_origins,
                    "let browser pages from this origin (scheme://host[:port], or *) call the API: "
                    "CORS headers and preflights (repeatable; default: no CORS headers)");
    // Tests only: cache_control TTLs ("5m", "1h") times this, so that expiry takes seconds.
    sub->add_option("--cache-control-ttl-scale", server_.cache_control_ttl_scale)
        ->group("")
        ->check(CLI::Range(1e-6, 1.0));
    sub->add_flag("-v,--verbose", verbose_, "log every request");
  }

  // The memory bounds in force, on stderr before the listening line: the default --kv-ram
  // depends on the machine.
  void PrintBounds(const EngineStats& stats, bool kv_ram_default) const {
    const double mib = double(kMiB);
    std::string kv = "unbounded (--kv-ram 0)";
    if (engine_.kv_ram_bytes > 0) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%.0f MiB (--kv-ram%s)", double(engine_.kv_ram_bytes) / mib,
                    kv_ram_default ? ", default: half of the memory available" : "");
      kv = buf;
    }
    const size_t cache = engine_.kv_ram_bytes > 0
                             ? std::min(engine_.cache_ram_bytes, engine_.kv_ram_bytes)
                             : engine_.cache_ram_bytes;
    std::fprintf(stderr,
                 "promptcache: K/V memory %s; cached prefixes %.1f MiB; pins %.1f MiB in all "
                 "(--pin-ram), each lasting %g s unused (--pin-ttl)\n",
                 kv.c_str(), double(cache) / mib, double(stats.pin_ram_bytes) / mib,
                 engine_.pin_ttl_seconds);
  }

  Status Validate() const {
    if (engine_.threads < 0 || engine_.threads > 1024) {
      return InvalidArgument("--threads must be between 0 and 1024");
    }
    if (engine_.context < 0) return InvalidArgument("--context must be >= 0");
    if (Result<PmlPositions> p = ParsePmlPositions(positions_); !p.ok()) {
      return InvalidArgument("--positions: " + p.status().message());
    }
    PC_RETURN_IF_ERROR(ParseKvType(kv_type_).status());
    Result<Pooling> pooling = ParsePooling(pooling_);
    if (!pooling.ok()) return InvalidArgument("--pooling: " + pooling.status().message());
    if (*pooling == Pooling::kNone) {
      return InvalidArgument(
          "--pooling: none (a vector per token) is not served: mean, last or cls");
    }
    if (server_.port < 0 || server_.port > 65535) {
      return InvalidArgument("--port must be between 0 and 65535");
    }
    if (engine_.parallel < 1) return InvalidArgument("--parallel must be >= 1");
    for (const std::string& alias : server_.aliases) {
      if (alias.empty()) return InvalidArgument("--alias: a name must not be empty");
    }
    for (const std::string& origin : server_.cors_origins) {
      if (origin != "*" && origin.rfind("http://", 0) != 0 && origin.rfind("https://", 0) != 0) {
        return InvalidArgument("--cors: '" + origin +
                               "' is not an origin (scheme://host[:port]) nor *");
      }
    }
    if (engine_.segment_min_tokens < 1) {
      return InvalidArgument("--segment-min-tokens must be >= 1");
    }
    if (engine_.segment_border_tokens < 0) {
      return InvalidArgument("--segment-border must be >= 0");
    }
    if (segment_encoding_ != "in-context" && segment_encoding_ != "alone") {
      return InvalidArgument("--segment-encoding must be in-context or alone, not '" +
                             segment_encoding_ + "'");
    }
    if (Result<std::string> sep = UnescapeC(segment_separator_); !sep.ok()) {
      return InvalidArgument("--segment-separator: " + sep.status().message());
    }
    if (engine_.max_queue < 0) return InvalidArgument("--max-queue must be >= 0");
    if (engine_.batch_size < 1) return InvalidArgument("--batch-size must be >= 1");
    if (engine_.block_size < 1 || engine_.block_size > 1024) {
      return InvalidArgument("--block-size must be between 1 and 1024");
    }
    if (!(cache_ram_mib_ >= 0) || !(cache_disk_mib_ >= 0)) {
      return InvalidArgument("--cache-ram and --cache-disk must be >= 0");
    }
    if (!(engine_.cache_ttl_seconds >= 0)) return InvalidArgument("--cache-ttl must be >= 0");
    if (engine_.cache_redis_timeout_ms < 1 || engine_.cache_redis_timeout_ms > 60000) {
      return InvalidArgument("--cache-redis-timeout must be between 1 and 60000 ms");
    }
    if (engine_.cache_redis_deadline_ms < 1 || engine_.cache_redis_deadline_ms > 60000) {
      return InvalidArgument("--cache-redis-deadline must be between 1 and 60000 ms");
    }
    if (engine_.cache_redis_readers < 1 || engine_.cache_redis_readers > 32) {
      return InvalidArgument("--cache-redis-readers must be between 1 and 32");
    }
    if (engine_.cache_redis_ttl_seconds < 0)
      return InvalidArgument("--cache-redis-ttl must be >= 0");
    if (!(cache_redis_queue_mib_ >= 1)) return InvalidArgument("--cache-redis-queue must be >= 1");
    if (engine_.cache_min_tokens < 0 || engine_.cache_granularity < 0) {
      return InvalidArgument("--cache-min-tokens and --cache-granularity must be >= 0");
    }
    if (max_body_bytes_ < 1024 || max_body_bytes_ > (int64_t(1) << 30)) {
      return InvalidArgument("--max-body-bytes must be between 1024 and 1073741824 (1 GiB)");
    }
    if (server_.max_prompt_tokens < 0 || server_.max_tokens_limit < 0) {
      return InvalidArgument("--max-prompt-tokens and --max-tokens-limit must be >= 0");
    }
    return Status::Ok();
  }

  EngineOptions engine_;
  DraftFlags draft_;
  std::string chat_template_path_;
  ServerOptions server_;
  std::string isa_;
  std::string kv_type_ = "f16";
  std::string pooling_ = "default";
  std::string positions_ = "schema";
  std::string moved_keys_ = "shared";
  std::string segment_separator_, segment_encoding_ = "in-context";
  CLI::Option* recompute_given_ = nullptr;
  int64_t max_body_bytes_ = int64_t(8) << 20;
  double kv_ram_mib_ = 0, pin_ram_mib_ = 0, pin_ram_tenant_mib_ = 0;
  CLI::Option *kv_ram_given_ = nullptr, *pin_ram_given_ = nullptr, *pin_ram_tenant_given_ = nullptr;
  double shutdown_timeout_ = 10;
  std::string api_keys_file_, cache_secret_, cache_secret_file_;
  double cache_ram_mib_ = 1024, cache_disk_mib_ = 4096, cache_redis_queue_mib_ = 256;
  bool no_prefix_cache_ = false, no_trim_sliding_ = false, verbose_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeServeCommand() { return std::make_unique<ServeCommand>(); }

}  // namespace promptcache::cli
