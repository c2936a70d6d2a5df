#include "server/openai_response.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "server/json_fields.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

ojson NullIfEmpty(const std::string& s) { return s.empty() ? ojson() : ojson(s); }

// The text of each choice (a result without choices has one, in its own fields).
std::vector<CompletionChoice> Choices(const CompletionResult& result) {
  std::vector<CompletionChoice> choices = result.choices;
  if (choices.empty()) choices.push_back({result.tokens, result.text, result.finish_reason, {}});
  return choices;
}

ojson Usage(const ResponseMeta& meta, const CompletionResult& r) {
  const int completion = r.completion_tokens();
  ojson u;
  u["prompt_tokens"] = r.prompt_tokens;
  u["completion_tokens"] = completion;
  u["total_tokens"] = r.prompt_tokens + completion;
  u["prompt_tokens_details"] = {{"cached_tokens", r.cached_tokens},
                                {"cache_write_tokens", r.cache_write_tokens()}};
  if (meta.kind == ApiKind::kChat) {
    int reasoning = 0;
    if (meta.reasoning.split && meta.token_bytes) {
      for (const CompletionChoice& c : Choices(r)) {
        const ReasoningSplit split = SplitReasoning(meta.reasoning, c.text);
        reasoning += ReasoningTokens(c.tokens, meta.token_bytes, split.reasoning_end);
      }
    }
    // Drafted tokens (a `prediction`'s, or the prompt's repeats) the model confirmed, and those
    // it did not: OpenAI's Predicted Outputs counts.
    u["completion_tokens_details"] = {
        {"reasoning_tokens", reasoning},
        {"accepted_prediction_tokens", r.accepted_draft_tokens},
        {"rejected_prediction_tokens", r.draft_tokens - r.accepted_draft_tokens}};
  }
  // A request that pinned (cache_control, "cache": {"pin": true}) learns how much, and whether
  // the pin quota cut it short (docs/server.md, "Explicit cache control").
  if (r.pinned_tokens > 0 || r.pin_limited) {
    u["pinned_tokens"] = r.pinned_tokens;
    u["pin_limited"] = r.pin_limited;
  }
  return u;
}

double PerSecond(double count, double ms) { return ms > 0 ? count * 1000.0 / ms : 0.0; }

ojson Timings(const CompletionResult& r) {
  const int generated = r.completion_tokens();
  ojson t;
  t["queue_ms"] = r.queue_ms;
  if (r.remote_ms > 0) t["remote_ms"] = r.remote_ms;
  t["prompt_ms"] = r.prompt_ms;
  t["ttft_ms"] = r.ttft_ms;
  t["generation_ms"] = r.generation_ms;
  t["prompt_tokens"] = r.prompt_tokens;
  t["cached_tokens"] = r.cached_tokens;
  t["computed_tokens"] = r.computed_tokens;
  t["prompt_tokens_per_second"] = PerSecond(r.computed_tokens, r.prompt_ms);
  // Shared in flight: the cached tokens another request's prefill computed, and the part of
  // prompt_ms spent waiting for them.
  if (r.shared_tokens > 0 || r.wait_ms > 0) {
    t["shared_tokens"] = r.shared_tokens;
    t["wait_ms"] = r.wait_ms;
  }
  t["generated_tokens"] = generated;
  t["generation_tokens_per_second"] = PerSecond(generated, r.generation_ms);
  if (r.grammar_ms > 0) t["grammar_ms"] = r.grammar_ms;
  // Speculative decoding, named as llama.cpp's server names them.
  if (r.draft_tokens > 0) {
    t["draft_n"] = r.draft_tokens;
    t["draft_n_accepted"] = r.accepted_draft_tokens;
  }
  if (r.segment_lookups > 0) {
    // Segments: reused tokens are those of the cache map's "segment" runs, less the recomputed.
    int reused = 0;
    for (const SourceRun& run : r.sources) {
      if (run.source == TokenSource::kSegment) reused += run.length;
    }
    t["segment_lookups"] = r.segment_lookups;
    t["segment_hits"] = r.segment_hits;
    t["segment_stores"] = r.segment_stores;
    t["segment_tokens_reused"] = std::max(0, reused - r.recomputed_tokens);
    t["recomputed_tokens"] = r.recomputed_tokens;
    t["border_recomputed"] = r.border_recomputed;
  }
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

// A token's text as JSON can carry it: invalid UTF-8 (a piece of a character) replaced.
std::string TokenString(const ResponseMeta& meta, int32_t id) {
  return meta.token_text ? meta.token_text(id) : std::to_string(id);
}

// One streamed choice: a chat delta or a completion's text.
ojson StreamChoice(ApiKind kind, const ojson& delta, const std::string& text,
                   const ojson& finish_reason, int index = 0) {
  ojson c;
  c["index"] = index;
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

uint64_t Fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
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

int ReasoningTokens(const std::vector<int32_t>& tokens,
                    const std::function<std::string(int32_t)>& token_bytes, size_t reasoning_end) {
  int n = 0;
  size_t offset = 0;
  for (const int32_t t : tokens) {
    if (offset >= reasoning_end) break;
    ++n;
    offset += token_bytes(t).size();
  }
  return n;
}

ojson TokenLogprobJson(const std::string& token_bytes, float logprob) {
  ojson bytes = ojson::array();
  for (unsigned char c : token_bytes) bytes.push_back(int(c));
  return {{"token", token_bytes}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}

ojson TokenLogprobWithTop(const TokenLogprob& lp,
                          const std::function<std::string(int32_t)>& token_bytes) {
  ojson entry = TokenLogprobJson(token_bytes(lp.token), lp.logprob);
  ojson top = ojson::array();
  for (const auto& [id, x] : lp.top) top.push_back(TokenLogprobJson(token_bytes(id), x));
  entry["top_logprobs"] = std::move(top);
  return entry;
}

ojson LogprobsJson(const ResponseMeta& meta, const std::vector<TokenLogprob>& lps,
                   size_t text_offset, const std::vector<TokenLogprob>* prompt) {
  if (meta.kind == ApiKind::kChat) {
    ojson content = ojson::array();
    const auto text = [&meta](int32_t id) { return TokenString(meta, id); };
    for (const TokenLogprob& lp : lps) content.push_back(TokenLogprobWithTop(lp, text));
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  ojson tokens = ojson::array(), values = ojson::array(), tops = ojson::array(),
        offsets = ojson::array();
  // Echo: the prompt's text is its decoded tokens, which drop SentencePiece's dummy-prefix space;
  // the tokens' pieces drop it too, so that text[text_offset[i]:] starts with tokens[i].
  size_t skip = 0;
  if (prompt != nullptr) {
    size_t bytes = 0;
    for (int32_t id : meta.prompt_tokens) bytes += TokenString(meta, id).size();
    if (bytes > meta.prompt_text.size()) skip = bytes - meta.prompt_text.size();
  }
  auto add = [&](int32_t id, const TokenLogprob* lp) {
    std::string text = TokenString(meta, id);
    if (skip > 0) {
      const size_t cut = std::min(skip, text.size());
      text.erase(0, cut);
      skip -= cut;
    }
    tokens.push_back(text);
    offsets.push_back(text_offset);
    text_offset += text.size();
    if (lp == nullptr) {
      values.push_back(nullptr);
      tops.push_back(nullptr);
      return;
    }
    values.push_back(lp->logprob);
    ojson top = ojson::object();
    for (const auto& [tid, x] : lp->top) top[TokenString(meta, tid)] = x;
    tops.push_back(std::move(top));
  };
  if (prompt != nullptr) {
    for (size_t i = 0; i < meta.prompt_tokens.size(); ++i) {
      add(meta.prompt_tokens[i], i == 0 || i > prompt->size() ? nullptr : &(*prompt)[i - 1]);
    }
  }
  for (const TokenLogprob& lp : lps) add(lp.token, &lp);
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(values)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

std::string ToolCallId(const ResponseMeta& meta, int choice, int call) {
  const std::string seed = meta.id + "/" + std::to_string(choice) + "/" + std::to_string(call);
  uint64_t h = Fnv1a(seed);
  if (meta.tool_format == ToolCallFormat::kMistral) {
    static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id;
    for (int i = 0; i < 9; ++i, h /= 62) id += kAlnum[h % 62];
    return id;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(h),
                static_cast<unsigned long long>(Fnv1a(seed, h) & 0xffffffffull));
  return "call_" + std::string(buf);
}

ojson ToolCallsJson(const ResponseMeta& meta, int choice, const std::vector<ToolCall>& calls) {
  ojson out = ojson::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    out.push_back({{"id", ToolCallId(meta, choice, static_cast<int>(k))},
                   {"type", "function"},
                   {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}});
  }
  return out;
}

std::string CompletionBody(const ResponseMeta& meta, const CompletionResult& result) {
  ojson j = Envelope(meta, false);
  const std::vector<CompletionChoice> choices = Choices(result);
  j["choices"] = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const CompletionChoice& c = choices[i];
    ojson choice;
    choice["index"] = i;
    std::string finish_reason = c.finish_reason;
    if (meta.kind == ApiKind::kChat) {
      // The answer without the thinking, read for calls; its content is the text itself, but for
      // a format's marker before it (Functionary).
      const ReasoningSplit split = SplitReasoning(meta.reasoning, c.text);
      const ParsedOutput parsed = ParseToolCalls(meta.tool_format, split.content);
      choice["message"] = {
          {"role", "assistant"}, {"content", parsed.content}, {"refusal", nullptr}};
      if (split.has_reasoning) choice["message"]["reasoning_content"] = split.reasoning;
      if (!parsed.calls.empty()) {
        const bool blank = parsed.content.find_first_not_of(" \t\r\n") == std::string::npos;
        choice["message"]["content"] = blank ? ojson() : ojson(parsed.content);
        choice["message"]["tool_calls"] = ToolCallsJson(meta, static_cast<int>(i), parsed.calls);
        finish_reason = "tool_calls";
      }
    } else {
      choice["text"] = meta.echo ? meta.prompt_text + c.text : c.text;
    }
    choice["logprobs"] = meta.logprobs ? LogprobsJson(meta, c.logprobs, 0,
                                                      meta.echo ? &result.prompt_logprobs : nullptr)
                                       : ojson();
    choice["finish_reason"] = finish_reason;
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = Usage(meta, result);
  j["timings"] = Timings(result);
  return Dump(j);
}

std::string SseEvent(const std::string& json_text) { return "data: " + json_text + "\n\n"; }

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string StreamRoleChunk(const ResponseMeta& meta, bool include_usage, int index) {
  return Chunk(
      meta, StreamChoice(meta.kind, {{"role", "assistant"}, {"content", ""}}, "", nullptr, index),
      include_usage);
}

std::string StreamTextChunk(const ResponseMeta& meta, const std::string& text, bool include_usage,
                            int index, const std::vector<TokenLogprob>* logprobs,
                            size_t text_offset) {
  ojson c = StreamChoice(meta.kind, {{"content", text}}, text, nullptr, index);
  if (logprobs != nullptr) c["logprobs"] = LogprobsJson(meta, *logprobs, text_offset);
  return Chunk(meta, std::move(c), include_usage);
}

std::string StreamReasoningChunk(const ResponseMeta& meta, const std::string& text,
                                 bool include_usage, int index) {
  return Chunk(meta, StreamChoice(meta.kind, {{"reasoning_content", text}}, "", nullptr, index),
               include_usage);
}

std::string StreamFinishChunk(const ResponseMeta& meta, const CompletionResult& result,
                              bool include_usage) {
  const std::vector<CompletionChoice> choices = Choices(result);
  const size_t n = choices.size();
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    ojson j = Envelope(meta, true);
    std::string reason = choices[i].finish_reason;
    if (meta.kind == ApiKind::kChat &&
        !ParseToolCalls(meta.tool_format, SplitReasoning(meta.reasoning, choices[i].text).content)
             .calls.empty()) {
      reason = "tool_calls";
    }
    j["choices"] = ojson::array(
        {StreamChoice(meta.kind, ojson::object(), "", ojson(reason), static_cast<int>(i))});
    if (include_usage) j["usage"] = nullptr;
    if (i + 1 == n) j["timings"] = Timings(result);
    out += SseEvent(Dump(j));
  }
  return out;
}

std::string StreamToolCallChunks(const ResponseMeta& meta, const std::vector<ToolCall>& calls,
                                 bool include_usage, int index) {
  std::string out;
  for (size_t k = 0; k < calls.size(); ++k) {
    const ojson head = {{"index", k},
                        {"id", ToolCallId(meta, index, static_cast<int>(k))},
                        {"type", "function"},
                        {"function", {{"name", calls[k].name}, {"arguments", ""}}}};
    out += Chunk(
        meta, StreamChoice(meta.kind, {{"tool_calls", ojson::array({head})}}, "", nullptr, index),
        include_usage);
    // The arguments in two pieces (cut between ASCII bytes), as a client must be able to join.
    const std::string& args = calls[k].arguments;
    size_t cut = args.size() / 2;
    while (cut > 0 && static_cast<unsigned char>(args[cut]) >= 0x80) --cut;
    for (const std::string& piece : {args.substr(0, cut), args.substr(cut)}) {
      if (piece.empty()) continue;
      const ojson part = {{"index", k}, {"function", {{"arguments", piece}}}};
      out += Chunk(
          meta, StreamChoice(meta.kind, {{"tool_calls", ojson::array({part})}}, "", nullptr, index),
          include_usage);
    }
  }
  return out;
}

std::string StreamUsageChunk(const ResponseMeta& meta, const CompletionResult& result) {
  ojson j = Envelope(meta, true);
  j["choices"] = ojson::array();
  j["usage"] = Usage(meta, result);
  return SseEvent(Dump(j));
}

std::string StreamErrorEvent(const ApiError& error) { return SseEvent(ErrorBody(error)); }

}  // namespace promptcache
