// libFuzzer target for the request bodies of the server's other routes, short of the engine:
// OpenAI's Responses API (/v1/responses), Ollama's /api/chat and /api/generate, the embeddings
// routes (/v1/embeddings, /api/embed), /v1/bench/savings and /v1/schemas. (/v1/cache/load, pin,
// unpin and lookup, /tokenize and /detokenize read ParsePrefixRequest, which openai_fuzz covers.)
// Each input goes to every parser. Checks what must hold for any input: no exception or crash;
// an error is a 4xx with a message whose body, in the route's shape (OpenAI's, or Ollama's on
// /api/*), is JSON; an accepted request is within the ranges docs/server.md gives for its route:
//   - Responses: the fields accepted only at one value have it, chat-only fields are absent, and
//     the chat body it is translated into reads as the route reads it (a 4xx, or a chat request
//     within the chat route's ranges, max_output_tokens its max_tokens); the response object, its
//     stream events and the assistant turn a continuation replays are JSON;
//   - Ollama: the chat request it is translated into is within the chat route's ranges, of the
//     kind the route makes (chat; completion for a raw prompt), num_predict its max_tokens
//     (negative: none), streaming unless "stream": false;
//   - embeddings: inputs given, none empty, at most kMaxEmbeddingInputs, token ids only on
//     OpenAI's route and never negative; the response bodies of both APIs are JSON;
//   - savings: max_tokens 1..kMaxSavingsTokens, max_prompt 16..kMaxSavingsPrompt;
//   - schemas: the XML is the body as sent, or the JSON form's "schema" string.
//
// As openai_fuzz does, each input is tried as is and spliced into one of a few valid bodies of
// each route (fuzzing::ExerciseAsIsAndSpliced; fuzz/routes_fuzz_bodies.h), to reach deep without
// committed seeds; the same bodies are also its seeds, written at test time by routes_seed_gen,
// so that mutations start from whole requests.
//
// Mutations tried: an error of a common path turned 500 (Responses' missing input) failed the
// ctest run at once. A bound widened in one field (savings' max_tokens or max_prompt, Responses'
// truncation check removed) was found by some one-minute runs and missed by others; a negative
// token id answered 500 was found by the corpus of a seven-minute run. None of these was found in
// a 10-second ctest run from empty: that run is a smoke test, and the corpus that accumulates in
// the build folder (routes_fuzz_corpus) carries the rest.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/request_fuzz_support.h"
#include "fuzz/routes_fuzz_bodies.h"
#include "server/embedding_api.h"
#include "server/json_fields.h"
#include "server/ollama_request.h"
#include "server/responses_request.h"
#include "server/responses_response.h"
#include "server/savings_api.h"
#include "server/schema_api.h"
#include "server/tool_request.h"

namespace promptcache {
namespace {

using fuzzing::Check;
using fuzzing::CheckAcceptedRequest;
using fuzzing::CheckApiError;
using fuzzing::CheckJson;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using namespace fuzzing::routes;  // NOLINT(build/namespaces): the bodies

constexpr int kMaxTokensLimit = 4096;

// The body an accepted request was read from, as a plain JSON object.
json Reparse(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  Check(j.is_object(), "an accepted body is a JSON object");
  return j;
}

bool Given(const json& obj, const char* key) { return obj.contains(key) && !obj[key].is_null(); }

// "event: TYPE\ndata: JSON\n\n", the data's type TYPE.
void CheckResponsesEvent(const std::string& event, const std::string& type) {
  const std::string head = "event: " + type + "\ndata: ";
  Check(event.rfind(head, 0) == 0 && event.size() >= head.size() + 2 &&
            event.compare(event.size() - 2, 2, "\n\n") == 0,
        "Responses event framing");
  const std::string data = event.substr(head.size(), event.size() - head.size() - 2);
  Check(data.find('\n') == std::string::npos, "one data line per event");
  const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  Check(j.is_object() && j["type"] == type && j["sequence_number"].is_number_integer(),
        "event data is JSON with its type and sequence number");
}

// The response object and events of an accepted request, with `text` as the model's output.
void CheckResponsesBodies(const ResponsesRequest& rr, const ApiRequest& r,
                          const std::string& text) {
  ResponsesMeta meta;
  meta.id = "resp_0123456789abcdef0123456789abcdef";
  meta.model = r.model.empty() ? "m" : r.model;
  meta.request = &rr;
  meta.tool_format = r.tools_offered() ? ToolCallFormat::kHermes : ToolCallFormat::kNone;
  // One token per byte of the text: the message's log-probabilities spell its text.
  meta.token_bytes = [](int32_t t) { return std::string(1, char(t)); };
  int sequence = 0;
  const ojson created = ResponseObject(meta, nullptr);
  Check(created["status"] == "in_progress" && created["usage"].is_null(), "in progress");
  CheckResponsesEvent(ResponsesEvent("response.created", {{"response", created}}, &sequence),
                      "response.created");
  for (const char* finish : {"stop", "length"}) {
    CompletionResult result;
    result.text = text;
    result.finish_reason = finish;
    result.prompt_tokens = 5;
    result.tokens = {1, 2};
    if (rr.logprobs) {
      result.tokens.clear();
      result.choices.emplace_back();
      for (const unsigned char c : text) {
        result.tokens.push_back(c);
        result.choices[0].logprobs.push_back({c, -1.0f, {{c, -1.0f}}});
      }
    }
    const ojson done = ResponseObject(meta, &result);
    CheckJson(Dump(done), "response object is JSON");
    const bool length = std::string(finish) == "length";
    Check(done["status"] == (length ? "incomplete" : "completed"), "status from finish_reason");
    Check(done["max_output_tokens"] == rr.max_output_tokens, "max_output_tokens echoed");
    Check(done["store"] == rr.store, "store echoed");
    if (meta.tool_format == ToolCallFormat::kNone) {
      Check(done["output"].size() == 1 && done["output"][0]["content"][0]["text"] == text,
            "without tools, one message with the text");
      std::string spelled;
      for (const ojson& lp : done["output"][0]["content"][0]["logprobs"]) {
        for (const ojson& b : lp["bytes"]) spelled += char(b.get<int>());
      }
      Check(spelled == (rr.logprobs ? text : ""), "the message's logprobs spell its text");
    }
    const std::string type = length ? "response.incomplete" : "response.completed";
    CheckResponsesEvent(ResponsesEvent(type, {{"response", done}}, &sequence), type);
    CheckJson(Dump(AssistantMessage(meta, result)), "assistant message is JSON");
  }
}

void ExerciseResponses(std::string_view body) {
  ResponsesRequest rr;
  if (std::optional<ApiError> e = ParseResponsesRequest(body, &rr)) {
    return CheckApiError(*e, ApiFlavour::kOpenAi);
  }
  const json obj = Reparse(body);
  // docs/server.md: accepted at these values only; chat-only fields are a 400.
  Check(!Given(obj, "truncation") || obj["truncation"] == "disabled", "truncation disabled");
  Check(!Given(obj, "background") || obj["background"] == false, "background false");
  bool include_logprobs = false, include_reasoning = false;
  if (Given(obj, "include")) {
    Check(obj["include"].is_array(), "include an array");
    for (const json& v : obj["include"]) {
      include_logprobs |= v == "message.output_text.logprobs";
      include_reasoning |= v == "reasoning.encrypted_content";
      Check(v == "reasoning.encrypted_content" || v == "message.output_text.logprobs",
            "include only encrypted_content and output_text.logprobs");
    }
  }
  Check(rr.encrypted_reasoning == include_reasoning, "encrypted_content as included");
  if (Given(obj, "reasoning")) {
    for (const auto& [key, value] : obj["reasoning"].items()) {
      Check(value.is_null() || (key == "effort" && value.is_string()) ||
                (key == "summary" && value == "auto"),
            "reasoning: effort, or summary auto");
    }
  }
  const int top = Given(obj, "top_logprobs") ? obj["top_logprobs"].get<int>() : 0;
  Check(top >= 0 && top <= kMaxTopLogprobs && rr.top_logprobs == top, "top_logprobs 0 to 20");
  Check(rr.logprobs == (include_logprobs || top > 0), "logprobs as included or asked");
  for (const char* key : {"messages", "max_tokens", "max_completion_tokens", "response_format", "n",
                          "stop", "logprobs"}) {
    Check(!Given(obj, key), "no chat-only field");
  }
  Check(Given(obj, "input"), "input given");
  Check(rr.stream == (Given(obj, "stream") && obj["stream"] == true), "stream as sent");
  Check(rr.store == (!Given(obj, "store") || obj["store"] == true), "store as sent");
  // The route: no stored history here (previous_response_id would be a 404 or its turns).
  const ojson chat = SpliceHistory(rr, ojson::array());
  Check(
      chat["messages"].size() == rr.input_messages.size() + (rr.instructions.is_string() ? 1u : 0u),
      "instructions and input are the messages");
  ApiRequest r;
  RequestLimits limits;
  limits.max_tokens_limit = kMaxTokensLimit;
  if (std::optional<ApiError> e = ParseChatRequest(Dump(chat), limits, &r)) {
    return CheckApiError(*e, ApiFlavour::kOpenAi);
  }
  CheckAcceptedRequest(r, ApiKind::kChat, kMaxTokensLimit);
  if (Given(obj, "max_output_tokens")) {
    Check(r.max_tokens && obj["max_output_tokens"] == *r.max_tokens,
          "max_output_tokens is max_tokens");
  }
  Check(r.stream == rr.stream, "stream");
  Check(r.logprobs == (rr.logprobs ? rr.top_logprobs : -1), "logprobs asked of the chat route");
  ApiRequest with_tools = r;
  if (std::optional<ApiError> e = ApplyToolChoice(ToolCallFormat::kHermes, &with_tools)) {
    CheckApiError(*e, ApiFlavour::kOpenAi);
  }
  CheckResponsesBodies(rr, r, r.messages.back().content);
}

void ExerciseOllama(std::string_view body, bool chat) {
  RequestLimits limits;
  limits.max_tokens_limit = kMaxTokensLimit;
  OllamaRequest o;
  if (std::optional<ApiError> e =
          chat ? ParseOllamaChat(body, limits, &o) : ParseOllamaGenerate(body, limits, &o)) {
    return CheckApiError(*e, ApiFlavour::kOllama);
  }
  const json obj = Reparse(body);
  Check(o.chat == chat, "the route's kind of reply");
  Check(o.stream == (!Given(obj, "stream") || obj["stream"] == true), "streams unless false");
  Check(!Given(obj, "think") || obj["think"] == false, "think false");
  if (o.load_only) {
    Check(chat ? !Given(obj, "messages") || obj["messages"].empty()
               : !Given(obj, "prompt") || obj["prompt"] == "",
          "load only without messages or prompt");
    return;
  }
  const bool raw = !chat && Given(obj, "raw") && obj["raw"] == true;
  const ApiRequest& r = o.api;
  CheckAcceptedRequest(r, raw ? ApiKind::kCompletion : ApiKind::kChat, kMaxTokensLimit);
  Check(r.model == o.model, "the model");
  if (raw) {
    Check(!r.pml_xml && r.prompt_text == obj["prompt"].get<std::string>(), "raw: the prompt text");
  } else if (!chat) {
    Check(r.messages.back().role == "user" &&
              r.messages.back().content == obj["prompt"].get<std::string>(),
          "the prompt is the user turn");
  }
  const json* options = Given(obj, "options") ? &obj["options"] : nullptr;
  if (options != nullptr && Given(*options, "num_predict") &&
      (*options)["num_predict"].is_number_integer()) {
    const json& n = (*options)["num_predict"];
    if (n.is_number_unsigned() || n.get<int64_t>() >= 0) {
      Check(r.max_tokens && n == *r.max_tokens, "num_predict is max_tokens");
    } else {
      Check(!r.max_tokens, "negative num_predict: no bound");
    }
  }
}

void ExerciseEmbeddings(std::string_view body, bool ollama) {
  EmbeddingsApiRequest r;
  if (std::optional<ApiError> e =
          ollama ? ParseOllamaEmbedRequest(body, &r) : ParseEmbeddingsRequest(body, &r)) {
    return CheckApiError(*e, ollama ? ApiFlavour::kOllama : ApiFlavour::kOpenAi);
  }
  const size_t n = r.is_tokens ? r.token_inputs.size() : r.texts.size();
  Check(n >= 1 && (r.is_tokens ? r.texts.empty() : r.token_inputs.empty()), "inputs given");
  // One input of token ids may be long; more inputs than kMaxEmbeddingInputs are refused.
  Check(n <= size_t(kMaxEmbeddingInputs), "at most kMaxEmbeddingInputs inputs");
  Check(!ollama || (!r.is_tokens && !r.base64), "Ollama: texts, floats");
  for (const std::string& t : r.texts) Check(!t.empty(), "no empty text");
  for (const std::vector<int32_t>& ids : r.token_inputs) {
    Check(!ids.empty(), "no empty token input");
    for (int32_t id : ids) Check(id >= 0, "token ids not negative");
  }
  Check(r.dimensions >= 0, "dimensions");
  EmbeddingResult result;
  for (size_t i = 0; i < n; ++i) {
    result.embeddings.push_back({0.25f, -0.0f, 1e-45f, std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::quiet_NaN(),
                                 -std::numeric_limits<float>::infinity(), float(i)});
  }
  result.prompt_tokens = static_cast<int>(n);
  const std::string openai = EmbeddingsBody(result, r.model, r.base64);
  const json j = json::parse(openai, nullptr, /*allow_exceptions=*/false);
  Check(j.is_object() && j["data"].size() == n && j["model"] == r.model,
        "embeddings body is JSON, one entry per input");
  CheckJson(OllamaEmbedBody(result, r.model, 12345), "Ollama embed body is JSON");
}

void ExerciseSavings(std::string_view body) {
  SavingsRequest r;
  if (std::optional<ApiError> e = ParseSavingsBody(body, &r)) {
    return CheckApiError(*e, ApiFlavour::kOpenAi);
  }
  Check(r.max_tokens >= 1 && r.max_tokens <= kMaxSavingsTokens, "savings max_tokens range");
  Check(r.max_prompt >= 16 && r.max_prompt <= kMaxSavingsPrompt, "savings max_prompt range");
}

void ExerciseSchema(std::string_view body) {
  std::string xml;
  if (std::optional<ApiError> e = ParseSchemaBody(body, &xml)) {
    return CheckApiError(*e, ApiFlavour::kOpenAi);
  }
  const size_t first = body.find_first_not_of(" \t\r\n");
  Check(first != std::string_view::npos, "a schema body is not blank");
  if (body[first] != '{') {
    Check(xml == body, "raw XML as sent");
  } else {
    const json j = Reparse(body);
    Check(j.size() == 1 && j["schema"].is_string() && xml == j["schema"].get<std::string>(),
          "the JSON form's schema");
  }
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;  // NOLINT(build/namespaces)
  using fuzzing::ExerciseAsIsAndSpliced;
  ExerciseAsIsAndSpliced(data, size, kResponsesBodies, ExerciseResponses);
  ExerciseAsIsAndSpliced(data, size, kOllamaChatBodies,
                         [](std::string_view b) { ExerciseOllama(b, true); });
  ExerciseAsIsAndSpliced(data, size, kOllamaGenerateBodies,
                         [](std::string_view b) { ExerciseOllama(b, false); });
  ExerciseAsIsAndSpliced(data, size, kEmbeddingsBodies,
                         [](std::string_view b) { ExerciseEmbeddings(b, false); });
  ExerciseAsIsAndSpliced(data, size, kOllamaEmbedBodies,
                         [](std::string_view b) { ExerciseEmbeddings(b, true); });
  ExerciseAsIsAndSpliced(data, size, kSavingsBodies, ExerciseSavings);
  ExerciseAsIsAndSpliced(data, size, kSchemaBodies, ExerciseSchema);
  return 0;
}
