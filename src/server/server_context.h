// What every route handler reads of the server it runs in (server-internal): the engine, the
// options, the model's names, the prompt encoder, the metrics and the running requests. One
// ServerContext lives as long as the HttpServer, which waits for its connections before it goes,
// so streams may keep a pointer to it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "promptcache/engine.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/prompt_encoder.h"
#include "server/response_store.h"

namespace promptcache {

class ServerContext {
 public:
  // `engine` must outlive it; `http` is the transport whose connections /metrics counts.
  ServerContext(Engine* engine, ServerOptions options, const GuardedHttpServer* http);

  Engine& engine() const { return *engine_; }
  const ServerOptions& options() const { return options_; }
  int context() const { return context_; }  // tokens per request
  const std::string& model_id() const { return model_id_; }
  const std::string& model_name() const { return model_name_; }
  const std::string& fingerprint() const { return fingerprint_; }  // "fp_" + 12 hex digits
  int64_t created() const { return created_; }                     // Unix seconds
  const PromptEncoder& encoder() const { return encoder_; }
  // Whether a request's prompt is cut into segments: what it asked ("cache_segments"), else the
  // server's --segment-cache; never when the engine's segment cache is off.
  bool Segments(std::optional<bool> asked) const {
    return engine_->options().segment_cache && asked.value_or(options_.segment_cache);
  }
  const RequestLimits& limits() const { return limits_; }
  ServerMetrics& metrics() { return metrics_; }
  ConnectionStats connections() const;

  // nullopt when `name` is this server's model (its file's stem, general.name or an --alias).
  std::optional<ApiError> CheckModel(const std::string& name) const;
  // The longest prompt a request may have: one token less than the context, and
  // --max-prompt-tokens (prompts surely longer are refused before they are tokenized).
  size_t PromptLimit() const;
  // The error for a prompt PromptEncoder refused as surely longer than PromptLimit(), named as
  // the length checks name it (the context, or --max-prompt-tokens).
  ApiError PromptTooLong(const Status& st, const std::string& param) const;
  // The error for a prompt PromptEncoder could not build: PromptTooLong for one too long
  // (kOutOfRange), else the status itself.
  ApiError PromptError(const Status& st, const std::string& param) const;

  // Counts a finished request for the metrics, the server's and its tenant's.
  void Observe(const std::string& tenant, const CompletionResult& r);
  // Running requests, so that Stop() can cancel them; Track cancels at once while stopping.
  uint64_t Track(std::shared_ptr<RequestHandle> handle);
  void Untrack(uint64_t id);
  bool stopping() const { return stopping_.load(); }
  // The server is stopping: every running request is cancelled, and those tracked later too.
  void CancelAll();
  bool AnyRunning();  // some request is still tracked
  // One /v1/bench/savings measurement at a time: two would time each other's work.
  std::mutex& savings_mu() { return savings_mu_; }
  // The Responses API's stored responses (previous_response_id, GET /v1/responses/{id}).
  ResponseStore& responses() { return responses_; }

 private:
  Engine* engine_;
  ServerOptions options_;
  const GuardedHttpServer* http_;
  int context_ = 0;
  std::string model_id_, model_name_, fingerprint_;
  int64_t created_ = 0;
  PromptEncoder encoder_;
  RequestLimits limits_;
  ServerMetrics metrics_;
  std::atomic<bool> stopping_{false};
  std::mutex savings_mu_;
  // At most 1000 responses and 64 MiB of their JSON; the least recently used go first.
  ResponseStore responses_{1000, size_t(64) << 20};
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<RequestHandle>> running_;
};

}  // namespace promptcache
