#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/json_fields.h"
#include "server/openai_request_parts.h"
#include "server/tool_request.h"

namespace promptcache {
namespace {

using openai_request::ReadDryBreakers;
using openai_request::ReadModular;
using openai_request::ReadSampling;
using openai_request::ReadStructuredOutput;

using json_fields::Contains;
using json_fields::Find;
using json_fields::Guarded;
using json_fields::json;
using json_fields::MaybeError;
using json_fields::ParseObject;
using json_fields::ReadBool;
using json_fields::ReadFloat;
using json_fields::ReadInt;
using json_fields::Unsupported;
using json_fields::WrongType;
using ojson = nlohmann::ordered_json;

// OpenAI accepts at most 4 stop sequences.
constexpr size_t kMaxStop = 4;

// A field this server does not implement: accepted only at its "off" value.
MaybeError RejectUnless(const json& obj, const char* key, bool off_value_ok,
                        const std::string& what) {
  const json* v = Find(obj, key);
  if (v == nullptr || off_value_ok) return std::nullopt;
  return Unsupported(key, what);
}

bool IsEmptyContainer(const json& v) { return (v.is_array() || v.is_object()) && v.empty(); }

// The fields each endpoint reads (RequestFieldSupport); the harmless ones are accepted and
// documented as having no effect here.
constexpr std::string_view kCommonFields[] = {
    "model", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "response_format",
    // Structured output: llama-server's and vLLM's fields.
    "grammar", "json_schema", "guided_json", "guided_choice",
    // Extensions.
    "top_k", "min_p", "repeat_penalty", "repeat_last_n", "ignore_eos", "cache", "cache_map",
    "schema", "modules", "pml", "positions", "recompute", "evaluate", "cache_segments",
    // llama-server's further samplers (sampling_request.cc).
    "typical_p", "top_n_sigma", "xtc_probability", "xtc_threshold", "min_keep", "dynatemp_range",
    "dynatemp_exponent", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base",
    "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
    // vLLM's: the prefix cache's namespace (server/tenants.h).
    "cache_salt",
    // OpenAI's prompt caching options (ReadPromptCacheOptions).
    "prompt_cache_options", "prompt_cache_retention"};
constexpr std::string_view kChatFields[] = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
    // Reasoning models (reasoning_request.cc): llama.cpp's and vLLM's, and OpenAI's effort.
    "reasoning_format", "chat_template_kwargs", "reasoning_effort",
    // Predicted Outputs (prediction_request.cc).
    "prediction"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "best_of"};
// Accepted only at the value that asks for nothing (ReadUnsupported). Chat reads "tools".
constexpr std::string_view kOffValueFields[] = {"tools", "functions"};
constexpr std::string_view kChatOffValueFields[] = {"function_call"};
constexpr std::string_view kIgnoredFields[] = {
    "user", "store", "metadata", "service_tier", "safety_identifier", "prompt_cache_key",
    "parallel_tool_calls",
    // llama-server: the prefix cache is always on, and reusing it does not change results.
    "cache_prompt"};

MaybeError CheckFields(const json& obj, ApiKind kind) {
  for (const auto& [key, value] : obj.items()) {
    if (value.is_null()) continue;  // null reads as "not given"
    if (RequestFieldSupport(kind, key) == FieldSupport::kRefused) {
      return Unsupported(key, "'" + key + "'");
    }
  }
  return std::nullopt;
}

MaybeError ReadChoicesAndLogprobs(const json& obj, ApiKind kind, ApiRequest* out) {
  std::optional<int64_t> v;
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "n", 1, kMaxChoices, &v));
  if (v) out->n = static_cast<int>(*v);
  if (kind == ApiKind::kChat) {
    bool logprobs = false;
    PC_RETURN_IF_API_ERROR(ReadBool(obj, "logprobs", &logprobs));
    v.reset();
    PC_RETURN_IF_API_ERROR(ReadInt(obj, "top_logprobs", 0, kMaxTopLogprobs, &v));
    if (v && !logprobs) {
      return ApiError::BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
    if (logprobs) out->logprobs = v ? static_cast<int>(*v) : 0;
    return std::nullopt;
  }
  v.reset();
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "logprobs", 0, kMaxTopLogprobs, &v));
  if (v) out->logprobs = static_cast<int>(*v);
  PC_RETURN_IF_API_ERROR(ReadBool(obj, "echo", &out->echo));
  // best_of = n picks every choice generated: the same as leaving it out.
  v.reset();
  PC_RETURN_IF_API_ERROR(ReadInt(obj, "best_of", 1, kMaxChoices, &v));
  if (v && *v != out->n) {
    return Unsupported("best_of", "'best_of' other than n");
  }
  return std::nullopt;
}

MaybeError ReadUnsupported(const json& obj, ApiKind kind) {
  const json* v = nullptr;
  v = Find(obj, "suffix");
  PC_RETURN_IF_API_ERROR(RejectUnless(obj, "suffix", v && v->is_string() && v->empty(), "suffix"));
  if (kind == ApiKind::kCompletion) {
    v = Find(obj, "tools");
    PC_RETURN_IF_API_ERROR(RejectUnless(obj, "tools", v && IsEmptyContainer(*v), "tools"));
  }
  // OpenAI's deprecated form of tools: refused, naming its successor.
  v = Find(obj, "functions");
  PC_RETURN_IF_API_ERROR(RejectUnless(obj, "functions", v && IsEmptyContainer(*v),
                                      "'functions' (deprecated; use 'tools')"));
  v = Find(obj, "function_call");
  PC_RETURN_IF_API_ERROR(RejectUnless(obj, "function_call",
                                      v && v->is_string() && (*v == "none" || *v == "auto"),
                                      "'function_call' (deprecated; use 'tool_choice')"));
  return std::nullopt;
}

// vLLM's cache_salt: a non-empty string; the server derives the cache namespace from it.
MaybeError ReadCacheSalt(const json& obj, std::string* out) {
  const json* v = Find(obj, "cache_salt");
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_string()) return WrongType("cache_salt", "a string", *v);
  *out = v->get<std::string>();
  if (out->empty() || out->size() > 1024) {
    return ApiError::BadRequest("'cache_salt' must be a string of 1 to 1024 characters",
                                "cache_salt");
  }
  return std::nullopt;
}

MaybeError ReadModel(const json& obj, bool required, std::string* out) {
  const json* v = Find(obj, "model");
  if (v == nullptr) {
    if (!required) return std::nullopt;
    return ApiError::BadRequest("you must provide a model parameter", "model");
  }
  if (!v->is_string()) return WrongType("model", "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

MaybeError ReadTokenArray(const json& arr, const std::string& param, std::vector<int32_t>* out) {
  out->clear();
  out->reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& t = arr[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) return WrongType(p, "a token id (an integer)", t);
    const int64_t id =
        t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return ApiError::BadRequest("'" + p + "' is " + t.dump() + ", not a token id", p);
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// The most prompts one batched completions request may hold.
constexpr size_t kMaxBatch = 16;

// "prompt": a string, token ids, or an array of either. A batch of more than one (`batch`
// non-null: completions) fills *batch, its first prompt also *text / *tokens.
MaybeError ReadPrompt(const json& v, std::string* text, std::vector<int32_t>* tokens,
                      bool* is_tokens, std::vector<ApiRequest::BatchPrompt>* batch = nullptr) {
  if (v.is_string()) {
    *text = v.get<std::string>();
    *is_tokens = false;
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType("prompt", "a string or an array of token ids", v);
  if (!v.empty() && (v[0].is_string() || v[0].is_array())) {
    if (v.size() != 1 && batch == nullptr) {
      return ApiError::BadRequest("a batch of prompts is not supported here: send one prompt",
                                  "prompt", "unsupported");
    }
    if (v.size() > kMaxBatch) {
      return ApiError::BadRequest("'prompt' has " + std::to_string(v.size()) +
                                      " prompts, at most " + std::to_string(kMaxBatch) +
                                      " are allowed in one request",
                                  "prompt");
    }
    if (v.size() > 1) {
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string p = "prompt[" + std::to_string(i) + "]";
        ApiRequest::BatchPrompt b;
        if (v[i].is_string()) {
          b.text = v[i].get<std::string>();
        } else if (v[i].is_array()) {
          b.is_tokens = true;
          PC_RETURN_IF_API_ERROR(ReadTokenArray(v[i], p, &b.tokens));
        } else {
          return WrongType(p, "a string or an array of token ids", v[i]);
        }
        batch->push_back(std::move(b));
      }
      *text = batch->front().text;
      *tokens = batch->front().tokens;
      *is_tokens = batch->front().is_tokens;
      return std::nullopt;
    }
    if (v[0].is_string()) return ReadPrompt(v[0], text, tokens, is_tokens);
    *is_tokens = true;
    return ReadTokenArray(v[0], "prompt[0]", tokens);
  }
  *is_tokens = true;
  return ReadTokenArray(v, "prompt", tokens);
}

MaybeError ReadCacheControl(const json& obj, const std::string& param, bool* breakpoint) {
  const json* cc = Find(obj, "cache_control");
  if (cc == nullptr) return std::nullopt;
  const std::string p = param + ".cache_control";
  if (!cc->is_object()) return WrongType(p, "an object", *cc);
  const json* type = Find(*cc, "type");
  if (type == nullptr || !type->is_string() || type->get<std::string>() != "ephemeral") {
    return ApiError::BadRequest("'" + p + ".type' must be \"ephemeral\"", p + ".type");
  }
  *breakpoint = true;
  return std::nullopt;
}

// OpenAI's prompt caching fields: `prompt_cache_options` {"mode": "implicit" | "explicit",
// "ttl": "30m"} and `prompt_cache_retention` ("in_memory" | "24h"). The prefix cache here is
// always on (a hit never changes a result), so the mode and the retention only have their values
// checked; the ttl is the explicit breakpoints' pins' (kPromptCacheTtlSeconds).
MaybeError ReadPromptCacheOptions(const json& obj) {
  if (const json* r = Find(obj, "prompt_cache_retention");
      r != nullptr && *r != "in_memory" && *r != "24h") {
    return ApiError::BadRequest("'prompt_cache_retention' must be \"in_memory\" or \"24h\"",
                                "prompt_cache_retention");
  }
  const json* o = Find(obj, "prompt_cache_options");
  if (o == nullptr) return std::nullopt;
  if (!o->is_object()) return WrongType("prompt_cache_options", "an object", *o);
  PC_RETURN_IF_API_ERROR(json_fields::OnlyKeys(*o, "prompt_cache_options", {"mode", "ttl"}));
  if (const json* m = Find(*o, "mode"); m != nullptr && *m != "implicit" && *m != "explicit") {
    return ApiError::BadRequest("'prompt_cache_options.mode' must be \"implicit\" or \"explicit\"",
                                "prompt_cache_options.mode");
  }
  if (const json* t = Find(*o, "ttl"); t != nullptr && *t != "30m") {
    return ApiError::BadRequest("'prompt_cache_options.ttl' must be \"30m\"",
                                "prompt_cache_options.ttl");
  }
  return std::nullopt;
}

// A part's `prompt_cache_breakpoint` ({"mode": "explicit"}, OpenAI's): a breakpoint at the end of
// the part (content bytes so far).
MaybeError ReadPromptCacheBreakpoint(const json& part, const std::string& param, ApiMessage* out) {
  const json* b = Find(part, "prompt_cache_breakpoint");
  if (b == nullptr) return std::nullopt;
  const std::string p = param + ".prompt_cache_breakpoint";
  if (!b->is_object()) return WrongType(p, "an object", *b);
  PC_RETURN_IF_API_ERROR(json_fields::OnlyKeys(*b, p, {"mode"}));
  const json* mode = Find(*b, "mode");
  if (mode == nullptr || *mode != "explicit") {
    return ApiError::BadRequest("'" + p + ".mode' must be \"explicit\"", p + ".mode");
  }
  out->prompt_cache_breakpoints.push_back(out->content.size());
  return std::nullopt;
}

MaybeError ReadContent(const json& msg, const std::string& param, ApiMessage* out) {
  const std::string p = param + ".content";
  const json* content = Find(msg, "content");
  if (content == nullptr) {
    // An assistant turn without content is an empty turn; others must say something.
    if (out->role == "assistant") return std::nullopt;
    return ApiError::BadRequest("'" + p + "' is required", p);
  }
  return json_fields::ReadStringOrObjects(
      *content, p, "a string or an array of content parts", "an object", &out->content,
      [&](const json& part, const std::string& pp, size_t i) -> MaybeError {
        const json* type = Find(part, "type");
        if (type == nullptr || !type->is_string()) {
          return ApiError::BadRequest("'" + pp + ".type' must be a string", pp + ".type");
        }
        if (type->get<std::string>() != "text") {
          return ApiError::BadRequest("content parts of type '" + type->get<std::string>() +
                                          "' are not supported (only text)",
                                      pp + ".type", "unsupported");
        }
        const json* text = Find(part, "text");
        if (text == nullptr || !text->is_string()) {
          return ApiError::BadRequest("'" + pp + ".text' must be a string", pp + ".text");
        }
        // Parts are joined with a newline, as llama.cpp and vLLM join them.
        if (i > 0) out->content += '\n';
        const size_t begin = out->content.size();
        out->content += text->get<std::string>();
        out->parts.emplace_back(begin, out->content.size());
        PC_RETURN_IF_API_ERROR(ReadCacheControl(part, pp, &out->cache_breakpoint));
        return ReadPromptCacheBreakpoint(part, pp, out);
      });
}

// `ordered`: the body with its keys in order, for the tool fields (null: no tool fields).
MaybeError ReadMessages(const json& obj, const ojson* ordered, std::vector<ApiMessage>* out) {
  const json* msgs = Find(obj, "messages");
  if (msgs == nullptr) return ApiError::BadRequest("'messages' is required", "messages");
  if (!msgs->is_array()) return WrongType("messages", "an array", *msgs);
  if (msgs->empty()) return ApiError::BadRequest("'messages' must not be empty", "messages");
  out->clear();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return WrongType(p, "an object", m);
    const json* role = Find(m, "role");
    if (role == nullptr || !role->is_string()) {
      return ApiError::BadRequest("'" + p + ".role' must be a string", p + ".role");
    }
    for (const auto& [key, value] : m.items()) {
      if (value.is_null() || key == "role" || key == "content" || key == "cache_control" ||
          key == "tool_calls" || key == "tool_call_id" || key == "name" ||
          key == "reasoning_content") {
        continue;
      }
      return ApiError::BadRequest("'" + p + "." + key + "' is not supported by this server",
                                  p + "." + key, "unsupported");
    }
    ApiMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      return ApiError::BadRequest("'" + p + ".role' is '" + msg.role +
                                      "': only system, developer, user, assistant and tool are "
                                      "supported",
                                  p + ".role");
    }
    const ojson* om = nullptr;
    if (ordered != nullptr) {
      auto it = ordered->find("messages");
      if (it != ordered->end() && it->is_array() && i < it->size()) om = &(*it)[i];
    }
    if (om != nullptr) {
      PC_RETURN_IF_API_ERROR(ReadMessageToolFields(*om, p, &msg));
    } else if (msg.role == "tool" || m.contains("tool_calls") || m.contains("tool_call_id") ||
               m.contains("name")) {
      PC_RETURN_IF_API_ERROR(ReadMessageToolFields(ojson::parse(m.dump()), p, &msg));
    }
    PC_RETURN_IF_API_ERROR(ReadContent(m, p, &msg));
    PC_RETURN_IF_API_ERROR(ReadCacheControl(m, p, &msg.cache_breakpoint));
    if (const json* rc = Find(m, "reasoning_content")) {
      if (!rc->is_string()) return WrongType(p + ".reasoning_content", "a string", *rc);
      if (msg.role != "assistant") {
        return ApiError::BadRequest("'" + p + ".reasoning_content' is an assistant's field",
                                    p + ".reasoning_content");
      }
      msg.reasoning_content = rc->get<std::string>();
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

MaybeError ReadStop(const json& obj, std::vector<std::string>* out) {
  const json* v = Find(obj, "stop");
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) out->push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return WrongType("stop", "a string or an array of strings", *v);
  if (v->size() > kMaxStop) {
    return ApiError::BadRequest(
        "'stop' has " + std::to_string(v->size()) + " sequences, at most 4 are allowed", "stop");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& s = (*v)[i];
    if (!s.is_string()) return WrongType("stop[" + std::to_string(i) + "]", "a string", s);
    if (!s.get<std::string>().empty()) out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

MaybeError ReadMaxTokens(const json& obj, const RequestLimits& limits, int lo,
                         std::optional<int>* out) {
  const int64_t hi = limits.max_tokens_limit > 0 ? limits.max_tokens_limit : (1 << 30);
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {  // the latter wins
    std::optional<int64_t> v;
    PC_RETURN_IF_API_ERROR(ReadInt(obj, key, lo, hi, &v));
    if (v) *out = static_cast<int>(*v);
  }
  return std::nullopt;
}

MaybeError ReadStreamAndExtensions(const json& obj, ApiRequest* out) {
  PC_RETURN_IF_API_ERROR(ReadBool(obj, "stream", &out->stream));
  if (const json* so = Find(obj, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (const json* iu = Find(*so, "include_usage")) {
      if (!iu->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *iu);
      out->include_usage = iu->get<bool>();
    }
    for (const auto& [key, value] : so->items()) {
      // include_obfuscation pads chunks against side channels: meaningless on this server.
      if (value.is_null() || key == "include_usage" || key == "include_obfuscation") continue;
      return ApiError::BadRequest("'stream_options." + key + "' is not supported by this server",
                                  "stream_options." + key, "unsupported");
    }
  }
  PC_RETURN_IF_API_ERROR(ReadBool(obj, "ignore_eos", &out->ignore_eos));
  PC_RETURN_IF_API_ERROR(ReadBool(obj, "cache_map", &out->cache_map));
  PC_RETURN_IF_API_ERROR(ReadCacheSalt(obj, &out->cache_salt));
  if (const json* cache = Find(obj, "cache")) {
    if (!cache->is_object()) return WrongType("cache", "an object", *cache);
    if (const json* pin = Find(*cache, "pin")) {
      if (!pin->is_boolean()) return WrongType("cache.pin", "a boolean", *pin);
      out->pin = pin->get<bool>();
    }
  }
  return ReadPromptCacheOptions(obj);
}

// The body again with its keys in order, when it may have tool fields (tool definitions and
// arguments are rendered in the client's order) or a JSON schema (its properties are generated
// in the client's order); null otherwise.
ojson Ordered(std::string_view body) {
  if (body.find("tool") == std::string_view::npos &&
      body.find("schema") == std::string_view::npos &&
      body.find("guided_json") == std::string_view::npos) {
    return ojson();
  }
  return ojson::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
}

MaybeError ParseCommon(const json& obj, const ojson* ordered, const RequestLimits& limits,
                       ApiRequest* out) {
  // Without a model the served one answers (as vLLM does); a wrong name is still a 404.
  PC_RETURN_IF_API_ERROR(ReadModel(obj, /*required=*/false, &out->model));
  PC_RETURN_IF_API_ERROR(CheckFields(obj, out->kind));
  PC_RETURN_IF_API_ERROR(ReadUnsupported(obj, out->kind));
  PC_RETURN_IF_API_ERROR(ReadStructuredOutput(obj, ordered, out));
  PC_RETURN_IF_API_ERROR(ReadChoicesAndLogprobs(obj, out->kind, out));
  // Scoring a prompt (echo with logprobs) needs no new token: max_tokens 0 is allowed then.
  PC_RETURN_IF_API_ERROR(
      ReadMaxTokens(obj, limits, out->echo && out->logprobs >= 0 ? 0 : 1, &out->max_tokens));
  PC_RETURN_IF_API_ERROR(ReadSampling(obj, &out->sampling));
  PC_RETURN_IF_API_ERROR(ReadDryBreakers(obj, &out->dry_breakers));
  PC_RETURN_IF_API_ERROR(ReadStop(obj, &out->stop));
  PC_RETURN_IF_API_ERROR(ReadStreamAndExtensions(obj, out));
  return ReadModular(obj, out);
}

}  // namespace

// A prompt string that is a PML prompt: `<prompt` (after whitespace) followed by a space, '>'
// or '/'.
bool LooksLikePml(std::string_view text) {
  const size_t i = text.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos) return false;
  text.remove_prefix(i);
  constexpr std::string_view kTag = "<prompt";
  if (text.substr(0, kTag.size()) != kTag || text.size() == kTag.size()) return false;
  const char c = text[kTag.size()];
  return c == ' ' || c == '>' || c == '/' || c == '\t' || c == '\r' || c == '\n';
}

FieldSupport RequestFieldSupport(ApiKind kind, std::string_view field) {
  if (Contains(kCommonFields, field)) return FieldSupport::kImplemented;
  if (kind == ApiKind::kChat ? Contains(kChatFields, field) : Contains(kCompletionFields, field)) {
    return FieldSupport::kImplemented;
  }
  if (Contains(kOffValueFields, field)) return FieldSupport::kOffValueOnly;
  if (kind == ApiKind::kChat ? Contains(kChatOffValueFields, field) : field == "suffix") {
    return FieldSupport::kOffValueOnly;
  }
  if (Contains(kIgnoredFields, field)) return FieldSupport::kIgnored;
  return FieldSupport::kRefused;
}

// Parses `body` into a fresh `out` of `kind`: `read(obj, o)` fills it from the body's object (`o`:
// the same object keeping the client's key order, null where Ordered() did not keep it).
template <typename F>
std::optional<ApiError> ParseApiRequest(std::string_view body, ApiKind kind, ApiRequest* out,
                                        F read) {
  return Guarded([&]() -> MaybeError {
    *out = ApiRequest();
    out->kind = kind;
    json obj;
    PC_RETURN_IF_API_ERROR(ParseObject(body, &obj));
    const ojson ordered = Ordered(body);
    return read(obj, ordered.is_object() ? &ordered : nullptr);
  });
}

std::optional<ApiError> ParseCompletionRequest(std::string_view body, const RequestLimits& limits,
                                               ApiRequest* out) {
  return ParseApiRequest(
      body, ApiKind::kCompletion, out, [&](const json& obj, const ojson* o) -> MaybeError {
        const json* prompt = Find(obj, "prompt");
        if (prompt == nullptr) return ApiError::BadRequest("'prompt' is required", "prompt");
        PC_RETURN_IF_API_ERROR(ReadPrompt(*prompt, &out->prompt_text, &out->prompt_tokens,
                                          &out->prompt_is_tokens, &out->batch));
        PC_RETURN_IF_API_ERROR(ParseCommon(obj, o, limits, out));
        if (!out->batch.empty()) {
          for (const ApiRequest::BatchPrompt& b : out->batch) {
            if (!b.is_tokens && LooksLikePml(b.text)) {
              return ApiError::BadRequest("a batch of prompts holds plain prompts, not PML ones",
                                          "prompt", "unsupported");
            }
          }
          if (out->modular()) {
            return ApiError::BadRequest(
                "'schema' is not supported with a batch of prompts: send one prompt per request",
                "schema", "unsupported");
          }
        }
        return std::nullopt;
      });
}

std::optional<ApiError> ParseChatRequest(std::string_view body, const RequestLimits& limits,
                                         ApiRequest* out) {
  return ParseApiRequest(body, ApiKind::kChat, out,
                         [&](const json& obj, const ojson* o) -> MaybeError {
                           PC_RETURN_IF_API_ERROR(ReadMessages(obj, o, &out->messages));
                           if (o != nullptr) PC_RETURN_IF_API_ERROR(ReadTools(*o, out));
                           PC_RETURN_IF_API_ERROR(ParseCommon(obj, o, limits, out));
                           PC_RETURN_IF_API_ERROR(openai_request::ReadPrediction(obj, out));
                           return openai_request::ReadReasoningFields(obj, out);
                         });
}

namespace {

// A chat prefix is rendered as the chat route renders it: the offered tools and the template
// variables read by the chat route's own parsers (a prefix loaded without them would be another
// prompt, and would serve no request that has them).
MaybeError ReadPrefixChatFields(const json& obj, const ojson* ordered, PrefixRequest* out) {
  ApiRequest chat;
  if (ordered != nullptr) PC_RETURN_IF_API_ERROR(ReadTools(*ordered, &chat));
  if (chat.tools_offered()) out->tools = chat.tools;
  if (const json* v = Find(obj, "chat_template_kwargs")) {
    PC_RETURN_IF_API_ERROR(
        openai_request::ReadTemplateKwargs(*v, "chat_template_kwargs", &out->template_kwargs));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParsePrefixRequest(std::string_view body, PrefixRequest* out) {
  return Guarded([&]() -> MaybeError {
    *out = PrefixRequest();
    json obj;
    PC_RETURN_IF_API_ERROR(ParseObject(body, &obj));
    PC_RETURN_IF_API_ERROR(ReadModel(obj, /*required=*/false, &out->model));
    PC_RETURN_IF_API_ERROR(ReadBool(obj, "add_generation_prompt", &out->add_generation_prompt));
    PC_RETURN_IF_API_ERROR(ReadBool(obj, "pin", &out->pin));
    PC_RETURN_IF_API_ERROR(ReadBool(obj, "add_special", &out->add_special));
    PC_RETURN_IF_API_ERROR(ReadBool(obj, "with_pieces", &out->with_pieces));
    if (Find(obj, "cache_segments") != nullptr) {
      bool on = false;
      PC_RETURN_IF_API_ERROR(ReadBool(obj, "cache_segments", &on));
      out->cache_segments = on;
    }
    PC_RETURN_IF_API_ERROR(ReadCacheSalt(obj, &out->cache_salt));
    const json* prompt = Find(obj, "prompt");
    if (prompt == nullptr) prompt = Find(obj, "content");
    if (prompt == nullptr) prompt = Find(obj, "tokens");
    const bool has_messages = Find(obj, "messages") != nullptr;
    if ((prompt != nullptr) == has_messages) {
      return ApiError::BadRequest("give exactly one of 'prompt' and 'messages'",
                                  has_messages ? "messages" : "prompt");
    }
    if (has_messages) {
      const ojson ordered = Ordered(body);
      const ojson* o = ordered.is_object() ? &ordered : nullptr;
      PC_RETURN_IF_API_ERROR(ReadMessages(obj, o, &out->messages));
      return ReadPrefixChatFields(obj, o, out);
    }
    for (const char* field : {"tools", "tool_choice", "chat_template_kwargs"}) {
      if (Find(obj, field) != nullptr) {
        return ApiError::BadRequest("'" + std::string(field) + "' applies to 'messages'", field);
      }
    }
    return ReadPrompt(*prompt, &out->prompt_text, &out->prompt_tokens, &out->prompt_is_tokens);
  });
}

}  // namespace promptcache
