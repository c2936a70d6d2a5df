// libFuzzer target for the server's request handling short of the engine: parses arbitrary bytes
// as a chat completion, a completion and a cache/tokenize body; turns every accepted request
// into tokens with stories260K's vocabulary (plain transcript) and the Llama-2 vocabulary with a
// ChatML template; and formats responses and stream chunks from the request's text. Checks what
// must hold for any input: no exception or crash, accepted requests within their documented
// ranges, errors with a 4xx status and a message, prompts in the vocabulary with pins inside
// them, and every body and SSE event valid JSON. Tools: each accepted chat request also goes
// through ApplyToolChoice for every tool-call format, and its text is read for calls in each
// format (server/tool_calls.h) for the response and the stream's tool_calls chunks. Thinking:
// a Qwen3-like template renders chat_template_kwargs and reasoning_content, and the text is split
// into reasoning and answer whole and as a stream (server/reasoning.h), which must agree.
// Sampling: the accepted settings validate and draw an id of the vocabulary (DRY's breakers
// found in it).
//
// To reach deep into the parser without committed seeds, each input is tried twice: as is, and
// spliced into one of a few valid request bodies (the first byte picks the body, the second
// where the rest of the input overwrites it).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/request_fuzz_support.h"
#include "sampling/dry.h"
#include "sampling/sampler.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/prompt_encoder.h"
#include "server/reasoning.h"
#include "server/tool_request.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {
namespace {

using fuzzing::Check;
using fuzzing::CheckJson;
using fuzzing::Die;
using fuzzing::LoadOrDie;
using fuzzing::Vocab;

constexpr const char* kTemplates[] = {
    R"({"model":"m","messages":[{"role":"system","content":"You tell stories."},{"role":"user","content":"A cat."}],"max_tokens":16,"temperature":0.7,"top_p":0.9,"stop":["\n","The end"],"stream":true,"stream_options":{"include_usage":true}})",
    R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}]},{"role":"assistant","content":null},{"role":"user","content":"c"}],"seed":7,"n":1,"cache":{"pin":true}})",
    R"({"model":"m","prompt":"Once upon a time","max_tokens":8,"presence_penalty":0.5,"frequency_penalty":-1,"top_k":40,"min_p":0.05,"repeat_penalty":1.1,"ignore_eos":true})",
    R"({"model":"m","prompt":[1,403,407,261,378],"logprobs":null,"echo":false,"best_of":1,"suffix":null})",
    R"({"model":"m","prompt":[[1,2,3]],"max_completion_tokens":3,"response_format":{"type":"text"},"tools":[],"logit_bias":{}})",
    R"({"model":"m","prompt":"a","logit_bias":{"1":5,"511":-100,"0":100,"31999":0.5,"7":null},"temperature":0})",
    R"({"messages":[{"role":"developer","content":"x","cache_control":{"type":"ephemeral"}}],"add_generation_prompt":true,"pin":false})",
    R"({"content":"Hello \u00e9\u4e16 world","model":"m"})",
    R"({"model":"m","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"abcDEF123","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"abcDEF123","name":"get_weather","content":"<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":9}},"required":["city"]}}}],"tool_choice":"required"})",
    R"({"model":"m","messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":"4","reasoning_content":"Easy."},{"role":"user","content":"<think> a \\n</think>\\n\\n b"}],"chat_template_kwargs":{"enable_thinking":false,"x":[1,"y",null]},"reasoning_format":"deepseek","reasoning_effort":"low"})",
    R"({"model":"m","prompt":"a b a b a","typical_p":0.9,"top_n_sigma":1.5,"xtc_probability":0.5,"xtc_threshold":0.1,"min_keep":2,"dynatemp_range":0.3,"dynatemp_exponent":1.5,"mirostat":2,"mirostat_tau":4,"mirostat_eta":0.2,"dry_multiplier":0.8,"dry_base":1.75,"dry_allowed_length":2,"dry_penalty_last_n":-1,"dry_sequence_breakers":["\n","User:","\u00e9"]})",
    R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"doc","prompt_cache_breakpoint":{"mode":"explicit"}},{"type":"text","text":"q","prompt_cache_breakpoint":{"mode":"explicit"}}]}],"prompt_cache_options":{"mode":"explicit","ttl":"30m"},"prompt_cache_retention":"24h","max_tokens":2})",
    R"({"model":"m","messages":[{"role":"user","content":"Fix it."}],"prediction":{"type":"content","content":[{"type":"text","text":"int main() {\n"},{"type":"text","text":"  return 0;\n}"}]},"max_tokens":9})",
};

const std::vector<Vocab>& Vocabs() {
  static const std::vector<Vocab>* vocabs = [] {
    auto* v = new std::vector<Vocab>();
    v->push_back(LoadOrDie("models/stories260K.gguf", ""));
    // A tool-use template (Qwen2.5-like): tools, tool calls and results are rendered.
    v->push_back(
        LoadOrDie("tokenizers/ggml-vocab-llama-spm.gguf",
                  "{% for t in tools %}{{ t | tojson }}{% endfor %}{% for m in messages "
                  "%}{{ m.role }}: {{ m.content }}{% for c in m.tool_calls %}<tool_call>{{ "
                  "c.function | tojson }}</tool_call>{% endfor %}\n{% endfor %}"));
    v->push_back(LoadOrDie("tokenizers/ggml-vocab-llama-spm.gguf", fuzzing::kChatMl));
    // A thinking template (Qwen3-like): enable_thinking, reasoning_content, both tags.
    v->push_back(
        LoadOrDie("tokenizers/ggml-vocab-llama-spm.gguf",
                  "{% for m in messages %}{{ m.role }}: {% if m.reasoning_content %}<think>{{ "
                  "m.reasoning_content }}</think>{% endif %}{{ m.content }}\n{% endfor %}{% if "
                  "add_generation_prompt %}assistant: {% if enable_thinking is defined and not "
                  "enable_thinking %}<think></think>{% endif %}{% endif %}"));
    return v;
  }();
  return *vocabs;
}

void CheckSse(const std::string& event) {
  Check(event.rfind("data: ", 0) == 0 && event.size() >= 8 &&
            event.compare(event.size() - 2, 2, "\n\n") == 0,
        "SSE framing");
  const std::string body = event.substr(6, event.size() - 8);
  Check(body.find('\n') == std::string::npos, "one line per SSE event");
  CheckJson(body, "SSE event is JSON");
}

void CheckError(const std::optional<ApiError>& e) {
  fuzzing::CheckApiError(*e, ApiFlavour::kOpenAi);
}

void CheckPrompt(const Result<BuiltPrompt>& p, const Tokenizer& tok) {
  if (!p.ok()) {
    Check(p.status().code() == StatusCode::kInvalidArgument, "prompt errors are InvalidArgument");
    return;
  }
  Check(!p->tokens.empty(), "a non-empty prompt");
  for (int32_t t : p->tokens) Check(t >= 0 && t < tok.vocab_size(), "token in the vocabulary");
  Check(p->pin_tokens >= -1 && p->pin_tokens <= static_cast<int>(p->tokens.size()),
        "pin within the prompt");
}

// The stream splitter, fed `text` in pieces of 1 to 7 bytes (their sizes from the text), releases
// what SplitReasoning finds in the whole.
void CheckReasoningSplit(std::string_view text) {
  for (const ReasoningMode mode :
       {ReasoningMode{true, false}, ReasoningMode{true, true}, ReasoningMode{false, false}}) {
    const ReasoningSplit whole = SplitReasoning(mode, text);
    Check(whole.reasoning_end <= text.size(), "reasoning ends within the text");
    ReasoningSplitter splitter(mode);
    std::string reasoning, content;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min<size_t>(1 + static_cast<uint8_t>(text[at]) % 7, text.size() - at);
      ReasoningSplitter::Delta d = splitter.Add(text.substr(at, n));
      reasoning += d.reasoning;
      content += d.content;
      at += n;
    }
    ReasoningSplitter::Delta d = splitter.Finish();
    Check(reasoning + d.reasoning == whole.reasoning, "streamed reasoning equals the whole's");
    Check(content + d.content == whole.content, "streamed content equals the whole's");
    Check(splitter.has_reasoning() == whole.has_reasoning, "streamed has_reasoning");
    Check(mode.split || whole.content == text, "unsplit: all content");
  }
}

void CheckResponses(const ApiRequest& r) {
  ResponseMeta meta;
  meta.kind = r.kind;
  meta.id = "x";
  meta.model = r.model;
  CompletionResult result;
  result.text = r.kind == ApiKind::kChat ? r.messages.back().content : r.prompt_text;
  result.finish_reason = "stop";
  result.tokens = r.prompt_tokens;
  CheckJson(CompletionBody(meta, result), "completion body is JSON");
  CheckSse(StreamRoleChunk(meta, r.include_usage));
  CheckSse(StreamTextChunk(meta, result.text, r.include_usage));
  CheckSse(StreamFinishChunk(meta, result, r.include_usage));
  CheckSse(StreamUsageChunk(meta, result));
  if (r.kind != ApiKind::kChat) return;
  CheckReasoningSplit(result.text);
  CheckReasoningSplit("<think>" + result.text);  // inside the thinking, whatever the text
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kMistral,
        ToolCallFormat::kFunctionaryV32, ToolCallFormat::kFunctionaryV31,
        ToolCallFormat::kFireFunction, ToolCallFormat::kCommandRPlus, ToolCallFormat::kCommandR7B,
        ToolCallFormat::kDeepSeekR1}) {
    meta.tool_format = f;
    CheckJson(CompletionBody(meta, result), "completion body with tools is JSON");
    CheckSse(StreamFinishChunk(meta, result, r.include_usage));
    const ParsedOutput parsed = ParseToolCalls(f, result.text);
    const std::string_view text = result.text;
    Check(!parsed.calls.empty() || parsed.content == text.substr(ToolContentBegin(f, text)),
          "no calls: the text is content");
    Check(ToolCallStart(f, result.text) <= result.text.size(), "tool call start in the text");
    const std::string chunks = StreamToolCallChunks(meta, parsed.calls, r.include_usage, 0);
    for (size_t at = 0; at < chunks.size();) {
      const size_t end = chunks.find("\n\n", at);
      Check(end != std::string::npos, "tool call chunks framed");
      CheckSse(chunks.substr(at, end + 2 - at));
      at = end + 2;
    }
    ApiRequest copy = r;
    if (std::optional<ApiError> e = ApplyToolChoice(f, &copy)) CheckError(e);
  }
}

// An accepted request's sampling settings are valid and sample: DRY's breakers found in the
// vocabulary (as the route does), then a draw after a history that repeats itself.
void CheckSampling(const ApiRequest& r, const Tokenizer& tok) {
  SamplingParams sampling = r.sampling;
  sampling.logit_bias.clear();  // its ids are CheckLogitBias's
  if (sampling.dry_multiplier > 0) sampling.dry_breakers = DryBreakerSequences(tok, r.dry_breakers);
  for (const std::vector<int32_t>& seq : sampling.dry_breakers) {
    Check(!seq.empty(), "a breaker sequence has tokens");
    for (int32_t t : seq) Check(t >= 0 && t < tok.vocab_size(), "breaker token id");
  }
  Check(sampling.Validate().ok(), "accepted sampling settings validate");
  Sampler sampler(sampling);
  const int32_t n = tok.vocab_size();
  std::vector<float> logits(n);
  for (int32_t i = 0; i < n; ++i) logits[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;
  const std::vector<int32_t> history = {1, 2, 3, 1, 2, 3, 1, 2};
  for (int step = 0; step < 2; ++step) {
    const int32_t t = sampler.Sample(logits.data(), n, history);
    Check(t >= 0 && t < n, "a sampled id is in the vocabulary");
  }
}

void Exercise(std::string_view body) {
  RequestLimits limits;
  limits.max_tokens_limit = 4096;
  for (ApiKind kind : {ApiKind::kChat, ApiKind::kCompletion}) {
    ApiRequest r;
    std::optional<ApiError> e = kind == ApiKind::kChat ? ParseChatRequest(body, limits, &r)
                                                       : ParseCompletionRequest(body, limits, &r);
    if (e) {
      CheckError(e);
      continue;
    }
    fuzzing::CheckAcceptedRequest(r, kind, limits.max_tokens_limit);
    for (const Vocab& v : Vocabs()) {
      CheckPrompt(v.encoder->Build(r), *v.tok);
      // logit_bias ids: in the vocabulary, or the route's 400 naming the field.
      const std::optional<ApiError> bias = CheckLogitBias(r.sampling, v.tok->vocab_size());
      bool inside = true;
      for (const LogitBias& b : r.sampling.logit_bias)
        inside = inside && b.token < v.tok->vocab_size();
      Check(inside == !bias, "CheckLogitBias refuses exactly the ids outside the vocabulary");
      if (bias) Check(bias->http_status == 400 && bias->param == "logit_bias", "logit_bias 400");
      // A prediction's tokens (drafts) are the vocabulary's, and no more than its bytes.
      const std::vector<int32_t> guesses = v.tok->EncodeContinuation(r.prediction);
      Check(guesses.size() <= r.prediction.size(), "a prediction's tokens are at most its bytes");
      for (int32_t t : guesses) Check(t >= 0 && t < v.tok->vocab_size(), "prediction token id");
      CheckSampling(r, *v.tok);
    }
    CheckResponses(r);
  }
  PrefixRequest p;
  if (std::optional<ApiError> e = ParsePrefixRequest(body, &p)) {
    CheckError(e);
  } else {
    for (const Vocab& v : Vocabs()) CheckPrompt(v.encoder->Build(p), *v.tok);
  }
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  promptcache::fuzzing::ExerciseAsIsAndSpliced(data, size, promptcache::kTemplates,
                                               promptcache::Exercise);
  return 0;
}
