#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "server/openai_request_test_util.h"

namespace promptcache {
namespace {

TEST(OpenAiRequest, MinimalChatGetsOpenAiDefaults) {
  ApiRequest r = Chat(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.kind, ApiKind::kChat);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FALSE(r.messages[0].cache_breakpoint);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.pin);
  EXPECT_TRUE(r.stop.empty());
}

TEST(OpenAiRequest, ChatReadsEveryField) {
  ApiRequest r = Chat(R"({
    "model": "stories260K",
    "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"},
                                   {"type": "text", "text": "b",
                                    "cache_control": {"type": "ephemeral"}}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "c"}
    ],
    "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "seed": 42,
    "stop": ["x", "", "y"], "n": 1, "stream": true, "stream_options": {"include_usage": true},
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "top_k": 3, "min_p": 0.1,
    "repeat_penalty": 1.1, "ignore_eos": true, "cache": {"pin": true}, "user": "u",
    "logprobs": false, "tools": [], "response_format": {"type": "text"}
  })");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "a\nb");  // text parts joined with "\n", as llama.cpp does
  EXPECT_TRUE(r.messages[1].cache_breakpoint);
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(r.pin);
}

TEST(OpenAiRequest, MessageLevelCacheControl) {
  ApiRequest r = Chat(R"({"model":"m","messages":[
      {"role":"system","content":"s","cache_control":{"type":"ephemeral"}},
      {"role":"user","content":"u"}]})");
  EXPECT_TRUE(r.messages[0].cache_breakpoint);
  EXPECT_FALSE(r.messages[1].cache_breakpoint);
  ApiError e = ChatError(R"({"model":"m","messages":[
      {"role":"user","content":"u","cache_control":{"type":"persistent"}}]})");
  EXPECT_EQ(e.param, "messages[0].cache_control.type");
}

TEST(OpenAiRequest, SeedZeroIsAFixedSeedNotARandomOne) {
  EXPECT_NE(
      Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"seed":0})").sampling.seed,
      0u);
  EXPECT_EQ(
      Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"seed":-1})").sampling.seed,
      ~uint64_t(0));
}

TEST(OpenAiRequest, LogitBiasMapsTokenIdsToBiases) {
  ApiRequest r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "logit_bias":{"5":-100,"12":2.5,"0":100,"7":null}})");
  std::vector<std::pair<int32_t, float>> got;
  for (const LogitBias& b : r.sampling.logit_bias) got.push_back({b.token, b.bias});
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::pair<int32_t, float>>{{0, 100.0f}, {5, -100.0f}, {12, 2.5f}}));
  EXPECT_TRUE(
      Completion(R"({"model":"m","prompt":"x","logit_bias":{}})").sampling.logit_bias.empty());
  EXPECT_EQ(
      Completion(R"({"model":"m","prompt":"x","logit_bias":{"3":1}})").sampling.logit_bias.size(),
      1u);
  // Each problem is a 400 naming logit_bias and saying what is wrong.
  const struct {
    const char* bias;
    const char* says;
  } bad[] = {
      {R"({"abc":1})", "'abc' is not a token id"},
      {R"({"-3":1})", "'-3' is not a token id"},
      {R"({"1.5":1})", "'1.5' is not a token id"},
      {R"({"":1})", "'' is not a token id"},
      {R"({"99999999999":1})", "is not a token id"},
      {R"({"3":"high"})", "'logit_bias.3' must be a number"},
      {R"({"3":true})", "'logit_bias.3' must be a number"},
      {R"({"3":100.5})", "between -100 and 100, got 100.5"},
      {R"({"3":-101})", "between -100 and 100, got -101"},
      {R"({"7":1,"007":2})", "token 7 twice"},
      {R"([[3,1]])", "must be an object"},
      {R"(5)", "must be an object"},
  };
  for (const auto& c : bad) {
    const std::string body =
        std::string(R"({"model":"m","messages":[{"role":"user","content":"x"}],"logit_bias":)") +
        c.bias + "}";
    ApiError e = ChatError(body);
    EXPECT_EQ(e.http_status, 400) << c.bias;
    EXPECT_EQ(e.param.rfind("logit_bias", 0), 0u) << c.bias << ": " << e.param;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.bias << ": " << e.message;
  }
  std::string many = R"({"model":"m","prompt":"x","logit_bias":{)";
  for (size_t i = 0; i <= kMaxLogitBias; ++i)
    many += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  ApiError e = CompletionError(many + "}}");
  EXPECT_NE(e.message.find("1025 entries, at most 1024"), std::string::npos) << e.message;
  // The vocabulary is the route's check.
  SamplingParams s;
  s.logit_bias = {{3, 1.0f}, {511, -1.0f}};
  EXPECT_FALSE(CheckLogitBias(s, 512));
  s.logit_bias.push_back({512, 1.0f});
  std::optional<ApiError> out = CheckLogitBias(s, 512);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->param, "logit_bias");
  EXPECT_NE(out->message.find("'512' is outside the vocabulary of 512 tokens"), std::string::npos);
}

TEST(OpenAiRequest, TopPZeroMeansGreedy) {
  ApiRequest r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0})");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
}

TEST(OpenAiRequest, NullFieldsReadAsAbsent) {
  ApiRequest r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "max_tokens":null,"temperature":null,"stop":null,"stream":null,"n":null,"seed":null})");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
}

TEST(OpenAiRequest, CompletionPromptForms) {
  ApiRequest r = Completion(R"({"model":"m","prompt":"Once upon"})");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_text, "Once upon");
  r = Completion(R"({"model":"m","prompt":[1, 403, 407]})");
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 403, 407}));
  r = Completion(R"({"model":"m","prompt":["one"]})");
  EXPECT_EQ(r.prompt_text, "one");
  r = Completion(R"({"model":"m","prompt":[[5, 6]]})");
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{5, 6}));
  r = Completion(R"({"model":"m","prompt":"x","stop":"\n"})");
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
}

struct BadCase {
  const char* body;
  const char* param;  // expected ApiError::param ("" for none)
};

TEST(OpenAiRequest, BadChatRequestsAreClear400s) {
  const BadCase cases[] = {
      {R"({"model":"m","messages":[{"role":"user","content":"x"}])", ""},  // truncated JSON
      {R"([1,2])", ""},
      {R"("text")", ""},
      {R"()", ""},
      {R"({"model":7,"messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":5,"messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":"m"})", "messages"},
      {R"({"model":"m","messages":[]})", "messages"},
      {R"({"model":"m","messages":{}})", "messages"},
      {R"({"model":"m","messages":["hi"]})", "messages[0]"},
      {R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id"},
      {R"({"model":"m","messages":[{"role":"critic","content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]})",
       "messages[0].content[0].text"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1})", "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1e30})",
       "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999})",
       "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"5"})",
       "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3})",
       "temperature"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"})",
       "temperature"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":1.5})", "top_p"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":17})", "n"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":0})", "n"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
       "top_logprobs"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,
           "top_logprobs":21})",
       "top_logprobs"},
      {R"({"model":"m","messages":[{"role":"user","content":"x","name":7}]})", "messages[0].name"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],
           "response_format":{"type":"json_object","schema":{}}})",
       "response_format.schema"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],
           "response_format":{"type":"json_schema","json_schema":{"schema":{}},"schema":123}})",
       "response_format.schema"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"x":1}})",
       "stream_options.x"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop[0]"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})",
       "stop"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":1})", "logprobs"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{}]})", "tools[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],
           "response_format":{"type":"xml"}})",
       "response_format.type"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"grammar":"root ::= x"})",
       "grammar"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],
           "response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string",
           "multipleOf":2}}}})",
       "response_format.json_schema.schema"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\"",
           "guided_json":{}})",
       "guided_json"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"seed":1.5})", "seed"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"cache":true})", "cache"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":1})",
       "stream_options"},
  };
  for (const BadCase& c : cases) {
    ApiError e = ChatError(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty()) << c.body;
  }
}

TEST(OpenAiRequest, MessagesNameTheProblem) {
  EXPECT_NE(ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":30})")
                .message.find("between 1 and 16"),
            std::string::npos);
  EXPECT_NE(ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tfs_z":0.9})")
                .message.find("'tfs_z' is not supported"),
            std::string::npos);
  EXPECT_NE(ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                         "json_schema":{"type":"object","properties":{"a":{"format":"color"}}}})")
                .message.find("properties.a.format"),
            std::string::npos);
  ApiError e =
      ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-5})");
  EXPECT_NE(e.message.find("-5"), std::string::npos) << e.message;
  e = ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"})");
  EXPECT_NE(e.message.find("not string"), std::string::npos) << e.message;
}

TEST(OpenAiRequest, InvalidUtf8IsRejected) {
  const std::string body =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfe b\"}]}";
  ApiError e = ChatError(body);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
  // A lone surrogate escape is not valid UTF-8 either.
  e = ChatError(R"({"model":"m","messages":[{"role":"user","content":"\ud800"}]})");
  EXPECT_EQ(e.http_status, 400);
}

TEST(OpenAiRequest, MaxTokensLimit) {
  RequestLimits limits;
  limits.max_tokens_limit = 100;
  Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":100})", limits);
  ApiError e = ChatError(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                             "max_tokens":101})",
                         limits);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_NE(e.message.find("100"), std::string::npos) << e.message;
}

TEST(OpenAiRequest, BadCompletionRequests) {
  const BadCase cases[] = {
      {R"({"model":"m"})", "prompt"},
      {R"({"model":"m","prompt":5})", "prompt"},
      {R"({"model":"m","prompt":{"a":1}})", "prompt"},
      {R"({"model":"m","prompt":["a",5]})", "prompt[1]"},
      {R"({"model":"m","prompt":[1,-2]})", "prompt[1]"},
      {R"({"model":"m","prompt":[1,"x"]})", "prompt[1]"},
      {R"({"model":"m","prompt":[1,3000000000]})", "prompt[1]"},
      {R"({"model":"m","prompt":"x","echo":1})", "echo"},
      {R"({"model":"m","prompt":"x","logprobs":21})", "logprobs"},
      {R"({"model":"m","prompt":"x","logprobs":true})", "logprobs"},
      {R"({"model":"m","prompt":"x","best_of":2})", "best_of"},
      {R"({"model":"m","prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"model":"m","prompt":"x","echo":true,"max_tokens":0})", "max_tokens"},
      {R"({"model":"m","prompt":"x","top_logprobs":2})", "top_logprobs"},
      {R"({"model":"m","prompt":"x","max_completion_tokens":2})", "max_completion_tokens"},
      {R"({"model":"m","prompt":"x","schema":"s","n":2})", "n"},
      {R"({"model":"m","prompt":"x","suffix":"end"})", "suffix"},
      {R"({"model":"m","prompt":"x","logit_bias":[[1,5]]})", "logit_bias"},
  };
  for (const BadCase& c : cases) {
    ApiError e = CompletionError(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
  }
}

TEST(OpenAiRequest, PrefixRequests) {
  PrefixRequest r;
  ASSERT_FALSE(ParsePrefixRequest(R"({"prompt":"abc","pin":true})", &r));
  EXPECT_EQ(r.prompt_text, "abc");
  EXPECT_TRUE(r.pin);
  ASSERT_FALSE(ParsePrefixRequest(R"({"content":"abc"})", &r));  // llama.cpp's /tokenize body
  EXPECT_EQ(r.prompt_text, "abc");
  ASSERT_FALSE(ParsePrefixRequest(R"({"tokens":[1,2]})", &r));  // and its /detokenize body
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2}));
  ASSERT_FALSE(ParsePrefixRequest(
      R"({"model":"m","messages":[{"role":"system","content":"s"}],"add_generation_prompt":true})",
      &r));
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_TRUE(ParsePrefixRequest(R"({})", &r).has_value());
  EXPECT_TRUE(ParsePrefixRequest(R"({"prompt":"a","messages":[]})", &r).has_value());
  EXPECT_TRUE(ParsePrefixRequest(R"({"prompt":"a","pin":1})", &r).has_value());
}

}  // namespace
}  // namespace promptcache

namespace promptcache {
namespace {

// Strictness: every field of OpenAI's Chat Completions and Completions requests, and the
// common llama-server and vLLM extras, is implemented, accepted as meaningless here, or
// refused with a 400 naming it. The list is data: a field added to a client's API belongs here.
struct FieldCase {
  const char* field;
  const char* value;      // a JSON value that asks for something (not the field's "off" value)
  bool chat, completion;  // the endpoints the field exists on (in OpenAI's API or an extension)
  FieldSupport expected;
};

constexpr FieldSupport kYes = FieldSupport::kImplemented;
constexpr FieldSupport kIgnored = FieldSupport::kIgnored;
constexpr FieldSupport kNo = FieldSupport::kRefused;
constexpr FieldSupport kOff = FieldSupport::kOffValueOnly;

const FieldCase kFields[] = {
    // OpenAI Chat Completions and Completions.
    {"max_tokens", "3", true, true, kYes},
    {"max_completion_tokens", "3", true, false, kYes},
    {"temperature", "0.5", true, true, kYes},
    {"top_p", "0.5", true, true, kYes},
    {"seed", "7", true, true, kYes},
    {"stop", "[\"x\"]", true, true, kYes},
    {"n", "2", true, true, kYes},
    {"stream", "true", true, true, kYes},
    {"stream_options", "{\"include_usage\":true}", true, true, kYes},
    {"presence_penalty", "0.5", true, true, kYes},
    {"frequency_penalty", "0.5", true, true, kYes},
    {"logprobs", "true", true, false, kYes},
    {"logprobs", "2", false, true, kYes},
    {"top_logprobs", "2", true, false, kYes},  // (with logprobs: true)
    {"echo", "true", false, true, kYes},
    {"best_of", "1", false, true, kYes},  // = n; other values are refused
    {"suffix", "\"end\"", false, true, kOff},
    {"logit_bias", "{\"1\":5}", true, true, kYes},
    {"response_format", "{\"type\":\"json_object\"}", true, true, kYes},
    {"tools", "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", true, false, kYes},
    {"tool_choice", "\"auto\"", true, false, kYes},  // "required" needs tools
    {"functions", "[{\"name\":\"f\"}]", true, false, kOff},
    {"function_call", "{\"name\":\"f\"}", true, false, kOff},
    {"parallel_tool_calls", "false", true, false, kIgnored},
    {"audio", "{\"voice\":\"alloy\",\"format\":\"wav\"}", true, false, kNo},
    {"modalities", "[\"text\",\"audio\"]", true, false, kNo},
    {"prediction", "{\"type\":\"content\",\"content\":\"x\"}", true, false, kYes},
    // A template variable where the chat template reads it (else the server answers a 400).
    {"reasoning_effort", "\"low\"", true, false, kYes},
    {"verbosity", "\"low\"", true, false, kNo},
    {"web_search_options", "{}", true, false, kNo},
    {"user", "\"u\"", true, true, kIgnored},
    {"store", "true", true, false, kIgnored},
    {"metadata", "{\"k\":\"v\"}", true, false, kIgnored},
    {"service_tier", "\"auto\"", true, false, kIgnored},
    {"safety_identifier", "\"s\"", true, false, kIgnored},
    {"prompt_cache_key", "\"k\"", true, false, kIgnored},
    // Prompt caching (openai 6.x): the explicit breakpoints' TTL; the mode and retention checked.
    {"prompt_cache_options", "{\"mode\":\"explicit\",\"ttl\":\"30m\"}", true, false, kYes},
    {"prompt_cache_retention", "\"24h\"", true, false, kYes},
    {"moderation", "{}", true, false, kNo},
    // llama-server.
    {"top_k", "5", true, true, kYes},
    {"min_p", "0.1", true, true, kYes},
    {"repeat_penalty", "1.1", true, true, kYes},
    {"repeat_last_n", "32", true, true, kYes},
    {"ignore_eos", "true", true, true, kYes},
    {"cache_prompt", "true", true, true, kIgnored},
    {"n_predict", "5", true, true, kNo},
    {"n_probs", "5", true, true, kNo},
    {"n_keep", "5", true, true, kNo},
    {"n_indent", "2", true, true, kNo},
    {"grammar", "\"root ::= \\\"a\\\"\"", true, true, kYes},
    {"json_schema", "{\"type\":\"object\"}", true, true, kYes},
    {"mirostat", "2", true, true, kYes},
    {"mirostat_tau", "5.0", true, true, kYes},
    {"mirostat_eta", "0.1", true, true, kYes},
    {"typical_p", "0.9", true, true, kYes},
    {"tfs_z", "0.9", true, true, kNo},
    {"top_n_sigma", "1.0", true, true, kYes},
    {"xtc_probability", "0.5", true, true, kYes},
    {"xtc_threshold", "0.1", true, true, kYes},
    {"dynatemp_range", "0.5", true, true, kYes},
    {"dynatemp_exponent", "1.5", true, true, kYes},
    {"dry_multiplier", "0.8", true, true, kYes},
    {"dry_base", "1.75", true, true, kYes},
    {"dry_allowed_length", "2", true, true, kYes},
    {"dry_penalty_last_n", "64", true, true, kYes},
    {"dry_sequence_breakers", "[\"\\n\"]", true, true, kYes},
    {"penalize_nl", "true", true, true, kNo},
    {"min_keep", "1", true, true, kYes},
    {"samplers", "[\"top_k\"]", true, true, kNo},
    {"id_slot", "0", true, true, kNo},
    {"t_max_predict_ms", "100", true, true, kNo},
    {"return_tokens", "true", true, true, kNo},
    {"timings_per_token", "true", true, true, kNo},
    {"post_sampling_probs", "true", true, true, kNo},
    {"response_fields", "[\"content\"]", true, true, kNo},
    {"lora", "[{\"id\":0,\"scale\":1}]", true, true, kNo},
    {"image_data", "[]", true, true, kNo},
    {"chat_template_kwargs", "{\"enable_thinking\":false}", true, false, kYes},
    {"reasoning_format", "\"none\"", true, false, kYes},
    {"parse_tool_calls", "true", true, false, kNo},
    // vLLM.
    {"guided_json", "{\"type\":\"object\"}", true, true, kYes},
    {"guided_regex", "\"a+\"", true, true, kNo},
    {"guided_choice", "[\"a\",\"b\"]", true, true, kYes},
    {"guided_grammar", "\"root ::= \\\"a\\\"\"", true, true, kNo},
    {"guided_decoding_backend", "\"xgrammar\"", true, true, kNo},
    {"guided_whitespace_pattern", "\" \"", true, true, kNo},
    {"structural_tag", "\"x\"", true, true, kNo},
    {"cache_salt", "\"salt\"", true, true, kYes},
    {"repetition_penalty", "1.1", true, true, kNo},
    {"length_penalty", "1.0", true, true, kNo},
    {"use_beam_search", "true", true, true, kNo},
    {"stop_token_ids", "[2]", true, true, kNo},
    {"include_stop_str_in_output", "true", true, true, kNo},
    {"min_tokens", "2", true, true, kNo},
    {"skip_special_tokens", "false", true, true, kNo},
    {"spaces_between_special_tokens", "false", true, true, kNo},
    {"truncate_prompt_tokens", "8", true, true, kNo},
    {"prompt_logprobs", "1", true, true, kNo},
    {"allowed_token_ids", "[1,2]", true, true, kNo},
    {"bad_words", "[\"x\"]", true, true, kNo},
    {"add_generation_prompt", "false", true, false, kNo},
    {"continue_final_message", "true", true, false, kNo},
    {"add_special_tokens", "true", true, true, kNo},
    {"documents", "[]", true, false, kNo},
    {"chat_template", "\"x\"", true, false, kNo},
    {"mm_processor_kwargs", "{}", true, false, kNo},
    {"priority", "1", true, true, kNo},
    {"request_id", "\"r\"", true, true, kNo},
    {"logits_processors", "[]", true, true, kNo},
    {"return_tokens_as_token_ids", "true", true, true, kNo},
    {"kv_transfer_params", "{}", true, true, kNo},
    {"vllm_xargs", "{}", true, true, kNo},
    // promptcache's extensions (docs/server.md).
    {"cache", "{\"pin\":true}", true, true, kYes},
    {"cache_map", "true", true, true, kYes},
    {"pml", "false", true, true, kYes},
    // A typo is refused too rather than ignored.
    {"temprature", "0.5", true, true, kNo},
};

TEST(OpenAiRequest, EveryKnownFieldIsHonouredOrRefused) {
  for (const FieldCase& c : kFields) {
    for (const ApiKind kind : {ApiKind::kChat, ApiKind::kCompletion}) {
      const bool exists = kind == ApiKind::kChat ? c.chat : c.completion;
      if (!exists) continue;
      const std::string field = c.field;
      std::string body = kind == ApiKind::kChat
                             ? R"({"model":"m","messages":[{"role":"user","content":"x"}])"
                             : R"({"model":"m","prompt":"x")";
      body += ",\"" + field + "\":" + c.value;
      if (field == "top_logprobs") body += R"(,"logprobs":true)";
      body += "}";
      const char* where = kind == ApiKind::kChat ? "chat: " : "completions: ";
      EXPECT_EQ(RequestFieldSupport(kind, field), c.expected) << where << field;
      ApiRequest r;
      std::optional<ApiError> err = kind == ApiKind::kChat ? ParseChatRequest(body, {}, &r)
                                                           : ParseCompletionRequest(body, {}, &r);
      if (c.expected == kNo || c.expected == kOff) {
        ASSERT_TRUE(err.has_value()) << where << body;
        EXPECT_EQ(err->http_status, 400) << where << body;
        EXPECT_EQ(err->param, field) << where << body;
        EXPECT_NE(err->message.find(field), std::string::npos) << err->message;
      } else {
        EXPECT_FALSE(err.has_value()) << where << body << " -> " << err->message;
      }
    }
  }
  // Implemented fields are read: a few whose effect shows in the request.
  EXPECT_EQ(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":3})").n, 3);
  EXPECT_EQ(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,
                     "top_logprobs":4})")
                .logprobs,
            4);
  EXPECT_EQ(
      Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true})").logprobs,
      0);
  EXPECT_EQ(
      Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":false})").logprobs,
      -1);
  ApiRequest echo = Completion(R"({"model":"m","prompt":"x","echo":true,"logprobs":1,
                                   "max_tokens":0})");
  EXPECT_TRUE(echo.echo);
  EXPECT_EQ(echo.logprobs, 1);
  EXPECT_EQ(echo.max_tokens, 0);
  EXPECT_EQ(Completion(R"({"model":"m","prompt":"x","n":2,"best_of":2})").n, 2);
}

// Without a model the served one answers (the server fills it in); a user's name is legal.
TEST(OpenAiRequest, ModelMayBeOmittedAndNamesAreLegal) {
  ApiRequest r;
  ASSERT_FALSE(
      ParseChatRequest(R"({"messages":[{"role":"user","content":"x","name":"bob"}]})", {}, &r));
  EXPECT_EQ(r.model, "");
  EXPECT_EQ(r.messages[0].content, "x");
}

}  // namespace
}  // namespace promptcache

namespace promptcache {
namespace {

// Reasoning fields: read into the request, and every malformed or hostile value a 400 naming it.
TEST(OpenAiRequest, ReasoningFields) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}])";
  ApiRequest r = Chat(head + R"(,"chat_template_kwargs":{"enable_thinking":false,"k":[1]},
                                "reasoning_format":"none","reasoning_effort":"high"})");
  EXPECT_EQ(r.template_kwargs.dump(), R"({"enable_thinking":false,"k":[1]})");
  EXPECT_FALSE(r.reasoning_split);
  EXPECT_EQ(r.reasoning_effort, "high");
  EXPECT_TRUE(Chat(head + R"(,"reasoning_format":"deepseek"})").reasoning_split);
  EXPECT_TRUE(Chat(head + "}").reasoning_split);
  r = Chat(R"({"messages":[{"role":"user","content":"x"},
              {"role":"assistant","content":"y","reasoning_content":"because"}]})");
  EXPECT_EQ(r.messages[1].reasoning_content.value_or("unset"), "because");
  EXPECT_FALSE(r.messages[0].reasoning_content.has_value());

  struct Bad {
    std::string body, param;
  };
  std::string many = "{";
  for (size_t i = 0; i <= kMaxTemplateKwargs; ++i) {
    many += (i ? ",\"v" : "\"v") + std::to_string(i) + "\":1";
  }
  many += "}";
  const std::string huge = R"({"x":")" + std::string(kMaxTemplateKwargsBytes, 'a') + "\"}";
  const Bad bad[] = {
      {head + R"(,"chat_template_kwargs":"enable_thinking=false"})", "chat_template_kwargs"},
      {head + R"(,"chat_template_kwargs":[1]})", "chat_template_kwargs"},
      {head + ",\"chat_template_kwargs\":" + many + "}", "chat_template_kwargs"},
      {head + ",\"chat_template_kwargs\":" + huge + "}", "chat_template_kwargs"},
      {head + R"(,"chat_template_kwargs":{"messages":[]}})", "chat_template_kwargs.messages"},
      {head + R"(,"chat_template_kwargs":{"add_generation_prompt":false}})",
       "chat_template_kwargs.add_generation_prompt"},
      {head + R"(,"chat_template_kwargs":{"bos_token":"<|im_start|>"}})",
       "chat_template_kwargs.bos_token"},
      {head + R"(,"reasoning_format":"deepseek-legacy"})", "reasoning_format"},
      {head + R"(,"reasoning_format":true})", "reasoning_format"},
      {head + R"(,"reasoning_effort":"max"})", "reasoning_effort"},
      {R"({"messages":[{"role":"user","content":"x","reasoning_content":"y"}]})",
       "messages[0].reasoning_content"},
      {R"({"messages":[{"role":"assistant","content":"x","reasoning_content":5}]})",
       "messages[0].reasoning_content"},
  };
  for (const Bad& b : bad) {
    const ApiError e = ChatError(b.body);
    EXPECT_EQ(e.http_status, 400) << b.body.substr(0, 200);
    EXPECT_EQ(e.param, b.param) << b.body.substr(0, 200) << " -> " << e.message;
    EXPECT_NE(e.message.find(b.param.substr(b.param.rfind('.') + 1)), std::string::npos)
        << e.message;
  }
}

TEST(OpenAiRequest, Prediction) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(
      Chat(head + R"(,"prediction":{"type":"content","content":"int main() {}"}})").prediction,
      "int main() {}");
  // Text parts are one text, concatenated as OpenAI reads them.
  EXPECT_EQ(Chat(head + R"(,"prediction":{"type":"content","content":[
                   {"type":"text","text":"a\n"},{"type":"text","text":"b"}]}})")
                .prediction,
            "a\nb");
  EXPECT_EQ(Chat(head + R"(,"prediction":null})").prediction, "");
  struct Bad {
    std::string body, param;
  };
  const std::string huge = std::string(kMaxPredictionBytes + 1, 'a');
  const Bad bad[] = {
      {head + R"(,"prediction":"text"})", "prediction"},
      {head + R"(,"prediction":{"content":"x"}})", "prediction.type"},
      {head + R"(,"prediction":{"type":"file","content":"x"}})", "prediction.type"},
      {head + R"(,"prediction":{"type":"content"}})", "prediction.content"},
      {head + R"(,"prediction":{"type":"content","content":5}})", "prediction.content"},
      {head + R"(,"prediction":{"type":"content","content":[{"type":"image_url"}]}})",
       "prediction.content[0].type"},
      {head + R"(,"prediction":{"type":"content","content":[{"type":"text","text":1}]}})",
       "prediction.content[0].text"},
      {head + R"(,"prediction":{"type":"content","content":"x","extra":1}})", "prediction.extra"},
      {head + R"(,"prediction":{"type":"content","content":")" + huge + "\"}}",
       "prediction.content"},
  };
  for (const Bad& b : bad) {
    const ApiError e = ChatError(b.body);
    EXPECT_EQ(e.http_status, 400) << b.body.substr(0, 200);
    EXPECT_EQ(e.param, b.param) << b.body.substr(0, 200) << " -> " << e.message;
  }
}

}  // namespace
}  // namespace promptcache
