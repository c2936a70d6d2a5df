#include "server/server_context.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/log.h"
#include "model/model.h"

namespace promptcache {

ServerContext::ServerContext(Engine* engine, ServerOptions options, const GuardedHttpServer* http)
    : engine_(engine),
      options_(std::move(options)),
      http_(http),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      encoder_(engine->model().tokenizer(), engine->model().chat_template(),
               engine->options().special_tokens_in_text) {
  const Model& model = engine_->model();
  context_ =
      engine_->options().context > 0 ? engine_->options().context : model.config().context_length;
  model_id_ = std::filesystem::path(engine_->options().model_path).stem().string();
  model_name_ = model.config().name;
  fingerprint_ = "fp_" + model.fingerprint().substr(0, 12);
  limits_.max_tokens_limit = options_.max_tokens_limit;
  encoder_.set_segment_cut({options_.segment_separator, engine_->options().segment_min_tokens});
  if (std::optional<std::string> warning = encoder_.chat_template().Warning()) {
    PC_LOG_WARN("%s", warning->c_str());
  }
}

ConnectionStats ServerContext::connections() const {
  ConnectionStats c;
  c.open = http_->open_connections();
  c.refused = http_->refused_connections();
  c.refused_per_client = http_->refused_per_client();
  c.timed_out = http_->timed_out_requests();
  return c;
}

std::optional<ApiError> ServerContext::CheckModel(const std::string& name) const {
  if (name == model_id_ || (!model_name_.empty() && name == model_name_)) return std::nullopt;
  const std::vector<std::string>& aliases = options_.aliases;
  if (std::find(aliases.begin(), aliases.end(), name) != aliases.end()) return std::nullopt;
  return MakeError(404,
                   "the model '" + name + "' does not exist; this server serves '" + model_id_ +
                       "'" + (model_name_.empty() ? "" : " (also called '" + model_name_ + "')"),
                   "invalid_request_error", "model_not_found", "model");
}

size_t ServerContext::PromptLimit() const {
  size_t limit = size_t(std::max(0, context_ - 1));
  if (options_.max_prompt_tokens > 0) limit = std::min(limit, size_t(options_.max_prompt_tokens));
  return limit;
}

ApiError ServerContext::PromptTooLong(const Status& st, const std::string& param) const {
  if (options_.max_prompt_tokens > 0 && options_.max_prompt_tokens < context_) {
    return ApiError::BadRequest(st.message() + ", more than this server's limit of " +
                                    std::to_string(options_.max_prompt_tokens) +
                                    " (--max-prompt-tokens)",
                                param, "prompt_too_long");
  }
  return ApiError::BadRequest("this model's maximum context length is " + std::to_string(context_) +
                                  " tokens, but " + st.message(),
                              param, "context_length_exceeded");
}

ApiError ServerContext::PromptError(const Status& st, const std::string& param) const {
  return st.code() == StatusCode::kOutOfRange ? PromptTooLong(st, param) : FromStatus(st, param);
}

void ServerContext::Observe(const std::string& tenant, const CompletionResult& r) {
  if (!r.tokens.empty()) metrics_.ObserveTtft(r.ttft_ms / 1000.0);
  metrics_.ObserveTenant(tenant, r);
}

uint64_t ServerContext::Track(std::shared_ptr<RequestHandle> handle) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  running_[id] = std::move(handle);
  if (stopping_) running_[id]->Cancel();
  return id;
}

void ServerContext::Untrack(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(id);
}

void ServerContext::CancelAll() {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, handle] : running_) handle->Cancel();
}

bool ServerContext::AnyRunning() {
  std::lock_guard<std::mutex> lock(mu_);
  return !running_.empty();
}

}  // namespace promptcache
