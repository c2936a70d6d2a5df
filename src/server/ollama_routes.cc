// Ollama's API: POST /api/chat and /api/generate (NDJSON streams by default, one JSON object with
// "stream": false), GET /api/tags, POST /api/show, GET /api/version and GET /api/ps. Requests are
// translated into the chat and completions requests of the OpenAI routes (server/ollama_request.h)
// and run the same way: the same prompt rendering, tools, grammars and prefix cache. Errors are
// Ollama's {"error": "..."} (the routes' flavour, server/routes.cc).
//
// Durations are nanoseconds, as Ollama reports them: total_duration from the request's arrival,
// load_duration 0 (the model is loaded when the server starts), prompt_eval_duration the prompt's
// lookup and prefill, eval_duration the generation. prompt_eval_count is the whole prompt, cached
// tokens included.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "model/model.h"
#include "promptcache/version.h"
#include "server/json_fields.h"
#include "server/ollama_request.h"
#include "server/openai_response.h"
#include "server/reasoning.h"
#include "server/routes.h"
#include "server/tool_calls.h"
#include "server/tool_request.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// What Ollama's clients see as the server's version (GET /api/version): this server's own.
constexpr const char* kVersion = PROMPTCACHE_VERSION_STRING;

// Now, as Ollama writes times: RFC 3339 in UTC with nanoseconds.
std::string Rfc3339(std::chrono::system_clock::time_point t = std::chrono::system_clock::now()) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ns.count() / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(ns.count() % 1000000000));
  return buf;
}

int64_t Nanos(double ms) { return static_cast<int64_t>(ms * 1e6); }

// The model as /api/tags, /api/show and /api/ps describe it.
ojson Details(const ServerContext& server) {
  const std::string arch = server.engine().model().config().architecture;
  return {{"parent_model", ""},   {"format", "gguf"},
          {"family", arch},       {"families", ojson::array({arch})},
          {"parameter_size", ""}, {"quantization_level", ""}};
}

ojson ModelEntry(const ServerContext& server) {
  return {{"name", server.model_id()},
          {"model", server.model_id()},
          {"modified_at", Rfc3339(std::chrono::system_clock::from_time_t(server.created()))},
          {"size", 0},  // not known here
          {"digest", server.fingerprint()},
          {"details", Details(server)}};
}

// One reply object (a stream's chunk or the whole answer): the text (and, at the end, the calls)
// as /api/chat's "message" or /api/generate's "response".
// `thinking` (a model that thinks): /api/chat's message.thinking, /api/generate's thinking, when
// not empty.
ojson Reply(const std::string& model, bool chat, const std::string& text,
            const std::vector<ToolCall>& calls = {}, const std::string& thinking = "") {
  ojson j = {{"model", model}, {"created_at", Rfc3339()}};
  if (!chat) {
    j["response"] = text;
    if (!thinking.empty()) j["thinking"] = thinking;
    return j;
  }
  ojson message = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) message["thinking"] = thinking;
  if (!calls.empty()) {
    ojson out = ojson::array();
    for (const ToolCall& c : calls) {
      ojson args = ojson::parse(c.arguments, nullptr, false);
      if (!args.is_object()) args = ojson::object();
      out.push_back({{"function", {{"name", c.name}, {"arguments", std::move(args)}}}});
    }
    message["tool_calls"] = std::move(out);
  }
  j["message"] = std::move(message);
  return j;
}

// The statistics that end a reply.
void AddDone(ojson* j, const CompletionResult& r, Clock::time_point start) {
  (*j)["done"] = true;
  (*j)["done_reason"] = r.finish_reason == "length" ? "length" : "stop";
  (*j)["total_duration"] =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  (*j)["load_duration"] = 0;
  (*j)["prompt_eval_count"] = r.prompt_tokens;
  (*j)["prompt_eval_duration"] = Nanos(r.prompt_ms);
  (*j)["eval_count"] = r.completion_tokens();
  (*j)["eval_duration"] = Nanos(r.generation_ms);
}

// Ollama's "logprobs": per generated token {token, logprob, bytes}, and its alternatives
// (top_logprobs) when they were asked for.
ojson LogprobsJson(const Tokenizer& tok, bool special, const std::vector<TokenLogprob>& lps) {
  ojson out = ojson::array();
  for (const TokenLogprob& lp : lps) {
    ojson t = TokenLogprobJson(tok.TokenBytes(lp.token, special), lp.logprob);
    if (!lp.top.empty()) {
      ojson top = ojson::array();
      for (const auto& [id, x] : lp.top)
        top.push_back(TokenLogprobJson(tok.TokenBytes(id, special), x));
      t["top_logprobs"] = std::move(top);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string Line(const ojson& j) { return Dump(j) + "\n"; }

// One streamed reply's state, as WriteOllamaStream needs it.
struct OllamaStream {
  ServerContext* server = nullptr;
  std::shared_ptr<TextChannel> channel;
  std::string model, tenant;
  bool chat = true;
  Clock::time_point start;
  // With tools: the text so far and how much of it went out (the rest may be a call).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  ToolTextStream tool_text;
  // A model that thinks (or writes harmony: ReasoningMode::parsed): the text split as it comes, and
  // the answer so far.
  bool split = false;
  ReasoningSplitter splitter{ReasoningMode{}};
  std::string answer;
  // With "logprobs": the tokenizer that names the tokens (special: harmony's control tokens as
  // text); null without.
  const Tokenizer* logprob_tokens = nullptr;
  bool special = false;
};

// What of a new piece may go out now: all of it, or with tools the text before a possible call.
std::string Release(OllamaStream& s, const std::string& piece) {
  s.answer += piece;
  if (s.tool_format == ToolCallFormat::kNone) return piece;
  return s.tool_text.Release(s.tool_format, piece);
}

// The last line's text with tools: the held-back text before any call, and the calls.
std::string EndWithTools(OllamaStream& s, const CompletionResult& result,
                         std::vector<ToolCall>* calls) {
  if (s.tool_format == ToolCallFormat::kNone) return "";
  const std::string& answer = s.split ? s.answer : result.text;
  ParsedOutput parsed = ParseToolCalls(s.tool_format, answer);
  std::string rest = s.tool_text.Rest(s.tool_format, answer, parsed.content, !parsed.calls.empty());
  *calls = std::move(parsed.calls);
  return rest;
}

// Writes whatever is ready, one NDJSON line per piece; false (a failed write) makes cpp-httplib
// drop the connection.
bool WriteOllamaStream(OllamaStream& s, httplib::DataSink& sink) {
  std::string out;
  // A line for a piece: its thinking (a model that thinks), the text that may go out, and the
  // log-probabilities of the tokens generated since the last line (when asked for: a line may
  // carry them alone, its text held back).
  auto add = [&](const std::string& thinking, const std::string& piece,
                 const std::vector<TokenLogprob>& logprobs = {}) {
    const std::string text = piece.empty() ? "" : Release(s, piece);
    const bool with_logprobs = s.logprob_tokens != nullptr && !logprobs.empty();
    if (text.empty() && thinking.empty() && !with_logprobs) return;
    ojson chunk = Reply(s.model, s.chat, text, {}, thinking);
    chunk["done"] = false;
    if (with_logprobs) chunk["logprobs"] = LogprobsJson(*s.logprob_tokens, s.special, logprobs);
    out += Line(chunk);
  };
  auto on_text = [&](const std::vector<TextPiece>& pieces) {
    for (const TextPiece& piece : pieces) {
      if (!s.split) {
        add("", piece.text, piece.logprobs);
        continue;
      }
      ReasoningSplitter::Delta d = s.splitter.Add(piece.text);
      add(d.reasoning, d.content, piece.logprobs);
    }
  };
  auto on_end = [&](const CompletionResult& result) {
    if (!result.status.ok()) {
      out += Line(ojson{{"error", FromStatus(result.status).message}});
      return;
    }
    s.server->Observe(s.tenant, result);
    if (s.split) {
      ReasoningSplitter::Delta d = s.splitter.Finish();
      add(d.reasoning, d.content);
    }
    std::vector<ToolCall> calls;
    const std::string rest = EndWithTools(s, result, &calls);
    ojson last = Reply(s.model, s.chat, rest, calls);
    AddDone(&last, result, s.start);
    out += Line(last);
  };
  return PollAndWrite<TextPiece>(*s.channel, out, /*keep_alive=*/"", sink, on_text, on_end);
}

void HandleOllama(Call& call, bool chat) {
  const Clock::time_point start = Clock::now();
  ServerContext& server = call.server;
  OllamaRequest r;
  std::optional<ApiError> err = chat ? ParseOllamaChat(call.req.body, server.limits(), &r)
                                     : ParseOllamaGenerate(call.req.body, server.limits(), &r);
  if (!err) err = server.CheckModel(r.model);
  if (!err && chat) err = ApplyToolChoice(server.encoder().tool_format(), &r.api);
  if (err) return call.Fail(*err);
  if (r.load_only) {
    ojson j = Reply(r.model, chat, "");
    j["done"] = true;
    j["done_reason"] = "load";
    return call.SendJson(j);
  }
  // `think` switches the template's thinking where it has a switch; false also leaves the text
  // unsplit. A raw prompt (no template) is never split.
  r.api.template_kwargs = server.encoder().ThinkingSwitch(r.think);
  if (!r.think_level.empty()) {
    if (!server.encoder().reads_reasoning_effort()) {
      return call.Fail(ApiError::BadRequest(
          "'think' levels have no meaning for this model: its chat template does not read "
          "reasoning_effort (true or false work)",
          "think"));
    }
    r.api.reasoning_effort = r.think_level;
  }
  CompletionRequest creq;
  bool opens_thinking = false;
  // The prompt, its limits and segments, and the sampling, as the OpenAI routes make them.
  const std::string param = r.api.kind == ApiKind::kChat ? "messages" : "prompt";
  if (!PrepareChat(call, r.api, &creq, param, &opens_thinking)) return;
  const ToolCallFormat format =
      r.api.tools_offered() ? server.encoder().tool_format() : ToolCallFormat::kNone;
  const ReasoningMode reasoning{
      r.api.kind == ApiKind::kChat && r.think != false && server.encoder().thinking(),
      opens_thinking, r.api.kind == ApiKind::kChat && server.encoder().harmony()};
  if (r.stream) {
    auto s = std::make_shared<OllamaStream>();
    s->server = &server;
    s->channel = std::make_shared<TextChannel>();
    s->model = r.model;
    s->tenant = creq.tenant;
    s->chat = chat;
    s->start = start;
    s->tool_format = format;
    s->split = reasoning.parsed();
    s->splitter = ReasoningSplitter(reasoning);
    if (creq.logprobs >= 0) s->logprob_tokens = &call.engine().model().tokenizer();
    s->special = creq.special_text;
    creq.on_piece = [ch = s->channel](const TextPiece& piece) { return ch->Push(piece); };
    Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
    if (!handle.ok()) return call.Fail(handle.status());
    return call.StreamEvents(
        *handle, s->channel, [s](httplib::DataSink& sink) { return WriteOllamaStream(*s, sink); },
        "application/x-ndjson");
  }
  creq.on_text = call.StopsWithServer();
  const std::string tenant = creq.tenant;
  const bool logprobs = creq.logprobs >= 0, special = creq.special_text;
  Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  const CompletionResult result = call.Await(*handle);
  if (!result.status.ok()) return call.Fail(result.status);
  server.Observe(tenant, result);
  const ReasoningSplit split = SplitReasoning(reasoning, result.text);
  ParsedOutput parsed{split.content, {}};
  if (format != ToolCallFormat::kNone) parsed = ParseToolCalls(format, split.content);
  ojson j = Reply(r.model, chat, parsed.content, parsed.calls, split.reasoning);
  AddDone(&j, result, start);
  if (logprobs && !result.choices.empty()) {
    j["logprobs"] =
        LogprobsJson(call.engine().model().tokenizer(), special, result.choices[0].logprobs);
  }
  call.SendJson(j);
}

}  // namespace

void HandleOllamaChat(Call& call) { HandleOllama(call, true); }
void HandleOllamaGenerate(Call& call) { HandleOllama(call, false); }

void HandleOllamaTags(Call& call) {
  call.SendJson(ojson{{"models", ojson::array({ModelEntry(call.server)})}});
}

void HandleOllamaPs(Call& call) {
  ojson m = ModelEntry(call.server);
  m.erase("modified_at");
  // Loaded for as long as the server runs: no expiry, held in memory (no GPU).
  m["expires_at"] = "9999-12-31T23:59:59Z";
  m["size_vram"] = 0;
  m["context_length"] = call.server.context();
  call.SendJson(ojson{{"models", ojson::array({std::move(m)})}});
}

void HandleOllamaVersion(Call& call) { call.SendJson(ojson{{"version", kVersion}}); }

// POST /api/show {"model"} (older clients: "name"): the model's details and what it can do
// ("completion", and "tools" when the template shows a tool-call format).
void HandleOllamaShow(Call& call) {
  json_fields::json body;
  if (std::optional<ApiError> err = json_fields::ParseObject(call.req.body, &body)) {
    return call.Fail(*err);
  }
  const json_fields::json* model = json_fields::Find(body, "model");
  if (model == nullptr) model = json_fields::Find(body, "name");
  if (model == nullptr || !model->is_string()) {
    return call.Fail(ApiError::BadRequest("'model' must be a string", "model"));
  }
  if (std::optional<ApiError> err = call.server.CheckModel(model->get<std::string>())) {
    return call.Fail(*err);
  }
  const ServerContext& server = call.server;
  ojson capabilities = ojson::array({"completion"});
  if (server.encoder().tool_format() != ToolCallFormat::kNone) capabilities.push_back("tools");
  if (server.encoder().thinking()) capabilities.push_back("thinking");
  const std::string arch = server.engine().model().config().architecture;
  call.SendJson(
      ojson{{"modelfile", ""},
            {"parameters", ""},
            {"template", ""},  // a Jinja template, not Ollama's Go template
            {"details", Details(server)},
            {"model_info",
             {{"general.architecture", arch},
              {"general.name", server.model_name()},
              {arch + ".context_length", server.context()}}},
            {"capabilities", std::move(capabilities)},
            {"modified_at", Rfc3339(std::chrono::system_clock::from_time_t(server.created()))}});
}

}  // namespace promptcache
