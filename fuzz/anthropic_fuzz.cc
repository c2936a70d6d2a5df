// libFuzzer target for Anthropic's Messages API short of the engine: parses arbitrary bytes as a
// /v1/messages and a count_tokens body, renders every accepted request into tokens with
// stories260K's vocabulary (plain transcript) and the Llama-2 vocabulary with a ChatML template,
// and formats the message, its stream events and errors. Checks what must hold for any input: no
// exception or crash, accepted requests within their documented ranges (max_tokens, at most 4
// breakpoints inside their messages), errors with a 4xx status and a message, prompts in the
// vocabulary with pins inside them, and every body and event valid JSON.
//
// As openai_fuzz does, each input is tried as is and spliced into one of a few valid bodies.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/request_fuzz_support.h"
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/prompt_encoder.h"

namespace promptcache {
namespace {

using fuzzing::Check;
using fuzzing::CheckJson;
using fuzzing::Die;
using fuzzing::LoadOrDie;
using fuzzing::Vocab;

constexpr const char* kTemplates[] = {
    R"({"model":"m","max_tokens":16,"system":"You tell stories.","messages":[{"role":"user","content":"A cat."}],"temperature":0.7,"top_p":0.9,"top_k":5,"stop_sequences":["\n","The end"],"stream":true,"metadata":{"user_id":"u"}})",
    R"({"model":"m","max_tokens":4,"system":[{"type":"text","text":"abc","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"d"}],"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}]},{"role":"assistant","content":"c"},{"role":"user","content":"e"}]})",
    R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":{"type":"auto"},"thinking":{"type":"disabled"},"service_tier":"auto"})",
    R"({"model":"m","max_tokens":3,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"The sky."},"title":"t","context":"c","citations":{"enabled":false},"cache_control":{"type":"ephemeral"}},{"type":"document","source":{"type":"content","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}},{"type":"text","text":"q"}]}]})",
    R"({"model":"m","max_tokens":64,"cache_control":{"type":"ephemeral","ttl":"5m"},"messages":[{"role":"user","content":"x"}],"output_config":{"effort":"high","format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string","enum":["x","y"]}},"required":["a"]}}},"speed":"fast","inference_geo":"us"})",
    R"({"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"pc1-0"},{"type":"redacted_thinking","data":"x"},{"type":"text","text":"a"}]},{"role":"user","content":"r"}]})",
};

const std::vector<Vocab>& Vocabs() {
  static const std::vector<Vocab>* vocabs = [] {
    auto* v = new std::vector<Vocab>();
    v->push_back(LoadOrDie("models/stories260K.gguf", ""));
    v->push_back(LoadOrDie("tokenizers/ggml-vocab-llama-spm.gguf", fuzzing::kChatMl));
    return v;
  }();
  return *vocabs;
}

// "event: NAME\ndata: JSON\n\n", one or more.
void CheckEvents(const std::string& sse) {
  size_t at = 0;
  Check(!sse.empty(), "events");
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    Check(end != std::string::npos, "events end with a blank line");
    const std::string ev = sse.substr(at, end - at);
    const size_t nl = ev.find('\n');
    Check(ev.rfind("event: ", 0) == 0 && nl != std::string::npos, "an event line");
    Check(ev.compare(nl + 1, 6, "data: ") == 0, "a data line");
    CheckJson(ev.substr(nl + 7), "event data is JSON");
    at = end + 2;
  }
}

void CheckError(const std::optional<ApiError>& e) {
  fuzzing::CheckApiError(*e, ApiFlavour::kAnthropic);
  CheckEvents(MessagesErrorEvent(*e));
}

void CheckPrompt(const AnthropicRequest& r, const Vocab& v) {
  Result<AnthropicPrompt> p = BuildMessagesPrompt(*v.encoder, r, 0.5);
  if (!p.ok()) {
    Check(p.status().code() == StatusCode::kInvalidArgument, "prompt errors are InvalidArgument");
    return;
  }
  Check(!p->tokens.empty(), "a non-empty prompt");
  for (int32_t t : p->tokens) Check(t >= 0 && t < v.tok->vocab_size(), "token in the vocabulary");
  Check(p->pins.size() <= r.breakpoints.size(), "a pin per breakpoint at most");
  for (const CompletionRequest::TimedPin& pin : p->pins) {
    Check(pin.tokens > 0 && pin.tokens <= static_cast<int>(p->tokens.size()), "pin in the prompt");
    Check(pin.ttl_seconds == 150 || pin.ttl_seconds == 1800, "scaled TTL");
  }
}

void CheckResponses(const AnthropicRequest& r) {
  CompletionResult result;
  result.text = r.messages.back().content;
  result.finish_reason = r.max_tokens % 2 ? "stop" : "length";
  result.prompt_tokens = r.max_tokens;
  result.cached_tokens = r.max_tokens / 2;
  result.pinned_tokens = r.max_tokens / 3;
  const StopInfo stop = StopOf(result, result.text + "tail", r.stop_sequences);
  const MessagesUsage u = UsageOf(result);
  Check(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens ==
            result.prompt_tokens,
        "usage adds up");
  CheckJson(MessageBody({"msg_x", r.model}, result, stop), "message body is JSON");
  CheckEvents(MessageStartEvent({"msg_x", r.model}, result.prompt_tokens) +
              ContentBlockStartEvent() + PingEvent() + TextDeltaEvent(result.text) +
              MessageEndEvents(result, stop));
}

void Exercise(std::string_view body) {
  RequestLimits limits;
  limits.max_tokens_limit = 4096;
  AnthropicRequest r;
  if (std::optional<ApiError> e = ParseMessagesRequest(body, limits, &r)) {
    CheckError(e);
  } else {
    Check(r.sampling.Validate().ok(), "accepted sampling parameters are valid");
    Check(r.max_tokens >= 1 && r.max_tokens <= 4096, "max_tokens range");
    Check(!r.messages.empty(), "messages");
    Check(r.breakpoints.size() <= kMaxCacheBreakpoints, "at most 4 breakpoints");
    for (const AnthropicBreakpoint& b : r.breakpoints) {
      Check(b.message < r.messages.size() && b.content_end <= r.messages[b.message].content.size(),
            "breakpoint inside its message");
    }
    for (const ApiMessage& m : r.messages) {
      Check(m.role == "system" || m.role == "user" || m.role == "assistant", "known role");
    }
    for (const Vocab& v : Vocabs()) CheckPrompt(r, v);
    CheckResponses(r);
  }
  if (std::optional<ApiError> e = ParseCountTokensRequest(body, &r)) CheckError(e);
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  promptcache::fuzzing::ExerciseAsIsAndSpliced(data, size, promptcache::kTemplates,
                                               promptcache::Exercise);
  return 0;
}
