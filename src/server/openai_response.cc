#include "server/openai_response.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

// Generated text is valid UTF-8 by the engine's contract; replacing rather than throwing keeps a
// broken piece from ever turning into an exception here.
std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson NullIfEmpty(const std::string& s) { return s.empty() ? ojson() : ojson(s); }

ojson Usage(const CompletionResult& r) {
  const int completion = static_cast<int>(r.tokens.size());
  ojson u;
  u["prompt_tokens"] = r.prompt_tokens;
  u["completion_tokens"] = completion;
  u["total_tokens"] = r.prompt_tokens + completion;
  u["prompt_tokens_details"] = {{"cached_tokens", r.cached_tokens}};
  return u;
}

double PerSecond(double count, double ms) { return ms > 0 ? count * 1000.0 / ms : 0.0; }

ojson Timings(const CompletionResult& r) {
  const int generated = static_cast<int>(r.tokens.size());
  ojson t;
  t["queue_ms"] = r.queue_ms;
  t["prompt_ms"] = r.prompt_ms;
  t["ttft_ms"] = r.ttft_ms;
  t["generation_ms"] = r.generation_ms;
  t["prompt_tokens"] = r.prompt_tokens;
  t["cached_tokens"] = r.cached_tokens;
  t["computed_tokens"] = r.computed_tokens;
  t["prompt_tokens_per_second"] = PerSecond(r.computed_tokens, r.prompt_ms);
  t["generated_tokens"] = generated;
  t["generation_tokens_per_second"] = PerSecond(generated, r.generation_ms);
  if (r.modular) {
    // cached_tokens are the tokens reused from the schema's modules; prompt_ms is the sum of
    // the three phases.
    t["schema"] = r.schema;
    t["reused_tokens"] = r.cached_tokens;
    t["encoded_tokens"] = r.encoded_tokens;
    t["gather_ms"] = r.gather_ms;
    if (r.recompute_candidates > 0) {
      t["recompute_candidates"] = r.recompute_candidates;
      t["recomputed_tokens"] = r.recomputed_tokens;
      t["recompute_ms"] = r.recompute_ms;
    }
    t["encode_ms"] = r.encode_ms;
    t["prefill_ms"] = r.prefill_ms;
  }
  return t;
}

const char* ObjectName(ApiKind kind, bool chunk) {
  if (kind == ApiKind::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

ojson Envelope(const ResponseMeta& meta, bool chunk) {
  ojson j;
  j["id"] = meta.id;
  j["object"] = ObjectName(meta.kind, chunk);
  j["created"] = meta.created;
  j["model"] = meta.model;
  j["system_fingerprint"] = NullIfEmpty(meta.system_fingerprint);
  return j;
}

// One streamed choice: a chat delta or a completion's text.
ojson StreamChoice(ApiKind kind, const ojson& delta, const std::string& text,
                   const ojson& finish_reason) {
  ojson c;
  c["index"] = 0;
  if (kind == ApiKind::kChat) {
    c["delta"] = delta;
  } else {
    c["text"] = text;
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = finish_reason;
  return c;
}

std::string Chunk(const ResponseMeta& meta, ojson choice, bool include_usage) {
  ojson j = Envelope(meta, true);
  j["choices"] = ojson::array({std::move(choice)});
  // With include_usage, OpenAI sends "usage": null on every chunk but the last.
  if (include_usage) j["usage"] = nullptr;
  return SseEvent(Dump(j));
}

ojson ErrorObject(const ApiError& e) {
  ojson err;
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = NullIfEmpty(e.param);
  err["code"] = NullIfEmpty(e.code);
  return ojson{{"error", err}};
}

}  // namespace

std::string ErrorBody(const ApiError& error) { return Dump(ErrorObject(error)); }

std::string CompletionBody(const ResponseMeta& meta, const CompletionResult& result) {
  ojson j = Envelope(meta, false);
  ojson choice;
  choice["index"] = 0;
  if (meta.kind == ApiKind::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", result.text}};
  } else {
    choice["text"] = result.text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = result.finish_reason;
  j["choices"] = ojson::array({std::move(choice)});
  j["usage"] = Usage(result);
  j["timings"] = Timings(result);
  return Dump(j);
}

std::string SseEvent(const std::string& json_text) { return "data: " + json_text + "\n\n"; }

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string StreamRoleChunk(const ResponseMeta& meta, bool include_usage) {
  return Chunk(meta, StreamChoice(meta.kind, {{"role", "assistant"}, {"content", ""}}, "", nullptr),
               include_usage);
}

std::string StreamTextChunk(const ResponseMeta& meta, const std::string& text, bool include_usage) {
  return Chunk(meta, StreamChoice(meta.kind, {{"content", text}}, text, nullptr), include_usage);
}

std::string StreamFinishChunk(const ResponseMeta& meta, const CompletionResult& result,
                              bool include_usage) {
  ojson j = Envelope(meta, true);
  j["choices"] =
      ojson::array({StreamChoice(meta.kind, ojson::object(), "", ojson(result.finish_reason))});
  if (include_usage) j["usage"] = nullptr;
  j["timings"] = Timings(result);
  return SseEvent(Dump(j));
}

std::string StreamUsageChunk(const ResponseMeta& meta, const CompletionResult& result) {
  ojson j = Envelope(meta, true);
  j["choices"] = ojson::array();
  j["usage"] = Usage(result);
  return SseEvent(Dump(j));
}

std::string StreamErrorEvent(const ApiError& error) { return SseEvent(ErrorBody(error)); }

}  // namespace promptcache
