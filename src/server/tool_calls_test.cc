// Tool-call formats: detection on the real templates, parsing of well-formed and malformed
// output (malformed output is content, never an error), where a stream holds text back, and the
// grammar that forces a call (its sentences parse back into the call).
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "chat/chat_test_templates.h"
#include "grammar/grammar.h"

namespace promptcache {
namespace {

TEST(ToolCalls, DetectsTheFormatOfEachRealTemplate) {
  const std::map<std::string, ToolCallFormat> expected = {
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meetkai-functionary-medium-v3.2.jinja", ToolCallFormat::kFunctionaryV32},
      {"meetkai-functionary-medium-v3.1.jinja", ToolCallFormat::kFunctionaryV31},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", ToolCallFormat::kFireFunction},
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", ToolCallFormat::kCommandRPlus},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", ToolCallFormat::kCommandR7B},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ToolCallFormat::kDeepSeekR1},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolCallFormat::kDeepSeekR1},
      {"llama-cpp-deepseek-r1.jinja", ToolCallFormat::kDeepSeekR1},
  };
  int seen = 0;
  for (const auto& [file, source] : chat_testing::LoadTestTemplates()) {
    auto it = expected.find(file);
    const ToolCallFormat want = it == expected.end() ? ToolCallFormat::kNone : it->second;
    EXPECT_EQ(ToolCallFormatName(DetectToolCallFormat(source)), ToolCallFormatName(want)) << file;
    ++seen;
  }
  EXPECT_EQ(seen, 17);
  EXPECT_EQ(DetectToolCallFormat(""), ToolCallFormat::kNone);
}

struct Call {
  std::string name, arguments;
};

// Well-formed output in each format: the content before the calls, and each call's name and
// arguments (as compact JSON).
struct ParseCase {
  ToolCallFormat format;
  std::string text, content;
  std::vector<Call> calls;
};

const ParseCase kParseCases[] = {
    {ToolCallFormat::kHermes,
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", "
     "\"arguments\": \"{\\\"zone\\\": \\\"CET\\\"}\"}\n</tool_call>",
     "Let me check.\n",
     {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}, {"time", R"({"zone":"CET"})"}}},
    // The turn may end before the closing tag.
    {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}", "", {{"f", "{}"}}},
    {ToolCallFormat::kLlama3,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
     "",
     {{"get_weather", R"({"city":"Oslo"})"}}},
    {ToolCallFormat::kLlama3,
     "\n<|python_tag|>{\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5]}}\n",
     "\n",
     {{"f", R"({"x":[1,2.5]})"}}},
    {ToolCallFormat::kMistral,
     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}, \"id\": \"abcdefghi\"}, "
     "{\"name\": \"b\", \"arguments\": {}}]",
     "",
     {{"a", R"({"q":"x"})"}, {"b", "{}"}}},
    // Without the control token (a grammar-forced call, or a decoder that drops it).
    {ToolCallFormat::kMistral, " [{\"name\": \"a\", \"arguments\": {}}]", " ", {{"a", "{}"}}},
    // The generation prompt ends in ">>>": the output starts with the recipient, "all" for text.
    {ToolCallFormat::kFunctionaryV32,
     "get_weather\n{\"city\": \"Paris\"}>>>search\n{\"query\": \"a >>> b\", \"n\": 2}\n",
     "",
     {{"get_weather", R"({"city":"Paris"})"}, {"search", R"({"query":"a >>> b","n":2})"}}},
    // Text first, then a call; the "all\n" marker is not content.
    {ToolCallFormat::kFunctionaryV32,
     "all\nLet me look.\n>>>now\n{}",
     "Let me look.\n",
     {{"now", "{}"}}},
    // Text only, with the model writing its own ">>>" too.
    {ToolCallFormat::kFunctionaryV32, ">>>all\nOnce upon a time", "Once upon a time", {}},
    {ToolCallFormat::kFunctionaryV32, ">>>f\n{\"a\": 1}", "", {{"f", R"({"a":1})"}}},
    {ToolCallFormat::kFunctionaryV31,
     "Let me see. <function=get_weather>{\"city\": \"Oslo\"}</function>"
     "\n<function=search>{\"query\": \"</function>\"}</function>",
     "Let me see. ",
     {{"get_weather", R"({"city":"Oslo"})"}, {"search", R"({"query":"</function>"})"}}},
    // The turn may end before the closing tag.
    {ToolCallFormat::kFunctionaryV31, "<function=now>{}", "", {{"now", "{}"}}},
    {ToolCallFormat::kFireFunction,
     "Checking. functools[{\"name\": \"a\", \"arguments\": {\"q\": \"]\"}}, "
     "{\"name\": \"b\", \"arguments\": {}}]",
     "Checking. ",
     {{"a", R"({"q":"]"})"}, {"b", "{}"}}},
    {ToolCallFormat::kFireFunction,
     " functools[{\"name\": \"a\", \"arguments\": {}}]",
     " ",
     {{"a", "{}"}}},
    // As the template renders an assistant turn's calls (after its content).
    {ToolCallFormat::kCommandRPlus,
     "I will look.\nAction:\n```json\n[\n    {\n        \"tool_name\": "
     "\"a\",\n        \"parameters\": {\n            \"q\": \"```\"\n"
     "        }\n    },\n    {\"tool_name\": \"b\", \"parameters\": "
     "{}}\n]```\n",
     "I will look.\n",
     {{"a", R"({"q":"```"})"}, {"b", "{}"}}},
    {ToolCallFormat::kCommandRPlus,
     "Action: [{\"tool_name\": \"a\", \"parameters\": {\"x\": 1}}]",
     "",
     {{"a", R"({"x":1})"}}},
    {ToolCallFormat::kCommandR7B,
     "<|START_THINKING|>Look it up.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": "
     "\"0\", \"tool_name\": \"a\", \"parameters\": {\"q\": \"]\"}},\n    {\"tool_call_id\": "
     "\"1\", \"tool_name\": \"b\", \"parameters\": {}}\n]<|END_ACTION|>",
     "<|START_THINKING|>Look it up.<|END_THINKING|>",
     {{"a", R"({"q":"]"})"}, {"b", "{}"}}},
    // The control token left out of the text, as constrained decoding writes it.
    {ToolCallFormat::kCommandR7B,
     "[{\"tool_call_id\": \"0\", \"tool_name\": \"a\", \"parameters\": {}}]",
     "",
     {{"a", "{}"}}},
    {ToolCallFormat::kDeepSeekR1,
     "<think>\nhm\n</"
     "think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n"
     "```json\n{\"q\": "
     "\"```\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
     "b\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "<think>\nhm\n</think>\n\n",
     {{"a", R"({"q":"```"})"}, {"b", "{}"}}},
    // Without the outer markers, and cut off after the arguments' fence.
    {ToolCallFormat::kDeepSeekR1,
     "<｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{\"x\": 1}\n```",
     "",
     {{"a", R"({"x":1})"}}},
    // Harmony as the reasoning splitter writes the calls (server/harmony.h): after a preamble,
    // the marker inside a string argument; the last call's <|call|> ended generation.
    {ToolCallFormat::kHarmony,
     "Checking.<|channel|>commentary to=functions.a<|message|>{\"q\": \"<|call|>\"}<|call|>"
     "<|channel|>commentary to=functions.b <|constrain|>json<|message|>{}",
     "Checking.",
     {{"a", R"({"q":"<|call|>"})"}, {"b", "{}"}}},
};

TEST(ToolCalls, ParsesEachFormat) {
  for (const ParseCase& c : kParseCases) {
    SCOPED_TRACE(std::string(ToolCallFormatName(c.format)) + ": " + c.text);
    const ParsedOutput p = ParseToolCalls(c.format, c.text);
    EXPECT_EQ(p.content, c.content);
    ASSERT_EQ(p.calls.size(), c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(p.calls[i].name, c.calls[i].name);
      EXPECT_EQ(p.calls[i].arguments, c.calls[i].arguments);
    }
  }
}

// Where the content of Functionary v3.2's output begins: after its "all\n" marker (and a ">>>"
// the model wrote before it).
TEST(ToolCalls, FunctionaryV32ContentBeginsAfterItsMarker) {
  EXPECT_EQ(ToolContentBegin(ToolCallFormat::kFunctionaryV32, "all\nLet me look."), 4u);
  EXPECT_EQ(ToolContentBegin(ToolCallFormat::kFunctionaryV32, ">>>all\nOnce"), 7u);
  EXPECT_EQ(ToolContentBegin(ToolCallFormat::kHermes, "all\nOnce"), 0u);
}

TEST(ToolCalls, MalformedOutputIsContent) {
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n"},
      {ToolCallFormat::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\"}</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\"}</tool_call> and then some text"},
      {ToolCallFormat::kHermes, "<tool_call></tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>"},
      {ToolCallFormat::kLlama3, "{\"name\": \"f\", \"parameters\": {}} trailing"},
      {ToolCallFormat::kLlama3, "Once upon a time {\"name\": \"f\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3, "{\"name\": 7, \"parameters\": {}}"},
      {ToolCallFormat::kLlama3, "<|python_tag|>brave_search.call(query=\"x\")"},
      {ToolCallFormat::kLlama3, "[1, 2]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {}}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, 5]"},
      {ToolCallFormat::kMistral, "[1] is a footnote"},
      {ToolCallFormat::kNone, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"},
      {ToolCallFormat::kFunctionaryV32, "Once upon a time"},
      {ToolCallFormat::kFunctionaryV32, "f\n{\"a\": 1"},
      {ToolCallFormat::kFunctionaryV32, "f\n[1]"},
      {ToolCallFormat::kFunctionaryV32, "f g\n{}"},
      {ToolCallFormat::kFunctionaryV32, "f\n{} and text"},
      {ToolCallFormat::kFunctionaryV32, "f\n{}>>>all\ntext after the call"},
      {ToolCallFormat::kFunctionaryV32, "f\n{}>>>"},
      {ToolCallFormat::kFunctionaryV32, "\n{}"},
      {ToolCallFormat::kFunctionaryV32, ""},
      {ToolCallFormat::kFunctionaryV31, "<function=f>{\"a\": 1</function>"},
      {ToolCallFormat::kFunctionaryV31, "<function=f>[1]</function>"},
      {ToolCallFormat::kFunctionaryV31, "<function=f g>{}</function>"},
      {ToolCallFormat::kFunctionaryV31, "<function=>{}</function>"},
      {ToolCallFormat::kFunctionaryV31, "<function=f>{}</function> and text"},
      {ToolCallFormat::kFunctionaryV31, "<function=f"},
      {ToolCallFormat::kFireFunction, " functools[]"},
      {ToolCallFormat::kFireFunction, " functools[{\"name\": \"a\"}"},
      {ToolCallFormat::kFireFunction, " functools{\"name\": \"a\", \"arguments\": {}}"},
      {ToolCallFormat::kFireFunction, " functools[{\"name\": \"a\", \"arguments\": {}}] and"},
      {ToolCallFormat::kFireFunction, "[{\"name\": \"a\", \"arguments\": {}}]"},
      {ToolCallFormat::kCommandRPlus, "Action:\n```json\n[]\n```"},
      {ToolCallFormat::kCommandRPlus,
       "Action:\n```json\n[{\"name\": \"a\", \"parameters\": {}}]```"},
      {ToolCallFormat::kCommandRPlus, "Action: [{\"tool_name\": \"a\", \"parameters\": 1}]"},
      {ToolCallFormat::kCommandRPlus, "Action:\n```json\n[{\"tool_name\": \"a\"}]``` and more"},
      {ToolCallFormat::kCommandRPlus, "[{\"tool_name\": \"a\", \"parameters\": {}}]"},
      {ToolCallFormat::kCommandR7B, "<|START_ACTION|>[]<|END_ACTION|>"},
      {ToolCallFormat::kCommandR7B, "<|START_ACTION|>{\"tool_name\": \"a\"}<|END_ACTION|>"},
      {ToolCallFormat::kCommandR7B, "[{\"tool_name\": \"a\", \"parameters\": {}}] then text"},
      {ToolCallFormat::kDeepSeekR1, "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::kDeepSeekR1,
       "<｜tool▁call▁begin｜>code<｜tool▁sep｜>a\n```json\n{}\n```<｜tool▁call▁end｜>"},
      {ToolCallFormat::kDeepSeekR1,
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>a b\n```json\n{}\n```<｜tool▁call▁end｜>"},
      {ToolCallFormat::kDeepSeekR1,
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n{}<｜tool▁call▁end｜>"},
      {ToolCallFormat::kDeepSeekR1,
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n[1]\n```<｜tool▁call▁end｜>"},
      {ToolCallFormat::kDeepSeekR1,
       "<｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{}\n```<｜tool▁call▁end｜> then"},
  };
  for (const auto& [format, text] : cases) {
    const ParsedOutput p = ParseToolCalls(format, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  const ParsedOutput p = ParseToolCalls(ToolCallFormat::kFunctionaryV32, "all\nHi >>>f\n{broken");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "Hi >>>f\n{broken");
}

// Every prefix and every byte-level corruption of a valid call: no crash, and either calls or
// the text itself as content.
TEST(ToolCalls, CorruptedCallsNeverFail) {
  const std::vector<std::pair<ToolCallFormat, std::string>> valid = {
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"\\u00e9\"}}\n</tool_call>"},
      {ToolCallFormat::kLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": [1]}}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": null}}]"},
      {ToolCallFormat::kFunctionaryV32, "all\nHi.>>>f\n{\"a\": \">>>\"}"},
      {ToolCallFormat::kFunctionaryV31, "Hi.<function=f>{\"a\": \"</function>\"}</function>"},
      {ToolCallFormat::kFireFunction, " functools[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]"},
      {ToolCallFormat::kCommandRPlus,
       "Hi.\nAction:\n```json\n[{\"tool_name\": \"f\", \"parameters\": {\"a\": 1}}]\n```"},
      {ToolCallFormat::kCommandR7B,
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}}]"
       "<|END_ACTION|>"},
      {ToolCallFormat::kDeepSeekR1,
       "Hi.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": "
       "1}\n"
       "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
  };
  std::mt19937 rng(7);
  for (const auto& [format, text] : valid) {
    ASSERT_EQ(ParseToolCalls(format, text).calls.size(), 1u) << text;
    for (size_t n = 0; n <= text.size(); ++n) {
      const std::string t = text.substr(0, n);
      const ParsedOutput p = ParseToolCalls(format, t);
      if (p.calls.empty()) {
        EXPECT_EQ(p.content, t.substr(ToolContentBegin(format, t)));
      }
    }
    for (int i = 0; i < 2000; ++i) {
      std::string t = text;
      t[rng() % t.size()] = static_cast<char>(rng() % 256);
      const ParsedOutput p = ParseToolCalls(format, t);
      if (p.calls.empty()) {
        EXPECT_EQ(p.content, t.substr(ToolContentBegin(format, t)));
      }
    }
  }
}

// A stream sends text before ToolCallStart as it comes: that must always be the content the
// whole text parses to (or a prefix of it), never part of a call.
TEST(ToolCalls, StreamsHoldBackWhatMayBeACall) {
  const std::vector<std::pair<ToolCallFormat, std::string>> outputs = {
      {ToolCallFormat::kHermes,
       "I will look. <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
       "</tool_call>"},
      {ToolCallFormat::kHermes, "A story about <tool and < calls, no call at all."},
      {ToolCallFormat::kLlama3, "  {\"name\": \"f\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3, "Once upon a time"},
      {ToolCallFormat::kMistral, "ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]"},
      {ToolCallFormat::kMistral, "[{\"name\": \"f\", \"arguments\": {}}]"},
      {ToolCallFormat::kMistral, "Plain [text]"},
      {ToolCallFormat::kFunctionaryV32, "all\nI will look.>>>f\n{}"},
      {ToolCallFormat::kFunctionaryV32, "f\n{\"a\": 1}>>>g\n{}"},
      {ToolCallFormat::kFunctionaryV32, "all\nText with > and >> only."},
      {ToolCallFormat::kFunctionaryV32, "alright"},
      {ToolCallFormat::kFunctionaryV31, "I will look. <function=f>{}</function>"},
      {ToolCallFormat::kFunctionaryV31, "A <function> that is no call."},
      {ToolCallFormat::kFireFunction, "Sure. functools[{\"name\": \"f\", \"arguments\": {}}]"},
      {ToolCallFormat::kFireFunction, "The functools of [old]"},
      {ToolCallFormat::kCommandRPlus,
       "Sure.\nAction:\n```json\n[{\"tool_name\": \"f\", \"parameters\": {}}]\n```"},
      {ToolCallFormat::kCommandRPlus, "An Act of [json] in ```code```"},
      {ToolCallFormat::kCommandR7B,
       "<|START_THINKING|>x<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"f\", "
       "\"parameters\": {}}]<|END_ACTION|>"},
      {ToolCallFormat::kCommandR7B, "<|START_RESPONSE|>Plain [text]<|END_RESPONSE|>"},
      {ToolCallFormat::kDeepSeekR1,
       "<think>x</"
       "think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"
       "{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::kDeepSeekR1, "<think>A <｜ story</think>"},
  };
  for (const auto& [format, text] : outputs) {
    const ParsedOutput whole = ParseToolCalls(format, text);
    // What every route's stream sends (ToolTextStream), the output coming a byte at a time: the
    // text while no call may be starting, then at the end the held-back rest of the content.
    ToolTextStream stream;
    std::string streamed;
    for (char c : text) streamed += stream.Release(format, std::string(1, c));
    SCOPED_TRACE(text);
    if (whole.calls.empty()) {
      EXPECT_EQ(whole.content, text.substr(ToolContentBegin(format, text)));
    }
    EXPECT_LE(streamed.size(), whole.content.size());
    EXPECT_EQ(streamed, whole.content.substr(0, streamed.size()));
    // The content goes out whole and once: nothing of a call, nothing twice.
    EXPECT_EQ(streamed + stream.Rest(format, text, whole.content, !whole.calls.empty()),
              whole.content);
  }
  // The end alone (nothing released before it) still leaves the marker out.
  EXPECT_EQ(ToolTextStream().Rest(ToolCallFormat::kFunctionaryV32, "all\nHi", "Hi", false), "Hi");
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kFunctionaryV32, "al"), 0u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kFunctionaryV32, "all\nab>"), 6u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kFunctionaryV32, "all\nab>x"), 8u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kHermes, "text <tool_"), 5u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kHermes, "text <b>"), 8u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kLlama3, " \n"), 0u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kLlama3, "<|pyt"), 0u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kNone, "<tool_call>"), 11u);
}

const std::vector<ToolSpec> kTools = {
    {"get_weather",
     R"({"type": "object", "properties": {"city": {"type": "string", "description": "City"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]})"},
    {"now", ""},
};

// Whether the grammar takes `text` as a whole sentence.
bool Accepts(const std::string& gbnf, const std::string& text) {
  Result<std::shared_ptr<const Grammar>> g = Grammar::Parse(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << gbnf;
  if (!g.ok()) return false;
  GrammarState s(*g);
  return s.Advance(text) && s.Complete();
}

TEST(ToolCalls, GrammarForcesOneCallInTheFormat) {
  const std::string args = R"({"city": "Paris", "unit": "celsius"})";
  const std::map<ToolCallFormat, std::pair<std::string, std::string>> sentences = {
      {ToolCallFormat::kHermes,
       {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>",
        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"}},
      {ToolCallFormat::kLlama3,
       {"{\"name\": \"get_weather\", \"parameters\": " + args + "}",
        "{\"name\": \"now\", \"parameters\": {}}"}},
      {ToolCallFormat::kMistral,
       {"[{\"name\": \"get_weather\", \"arguments\": " + args + "}]",
        "[{\"name\": \"now\", \"arguments\": {}}]"}},
      {ToolCallFormat::kFunctionaryV32, {"get_weather\n" + args, "now\n{}"}},
      {ToolCallFormat::kFunctionaryV31,
       {"<function=get_weather>" + args + "</function>", "<function=now>{}</function>"}},
      {ToolCallFormat::kFireFunction,
       {" functools[{\"name\": \"get_weather\", \"arguments\": " + args + "}]",
        " functools[{\"name\": \"now\", \"arguments\": {}}]"}},
      {ToolCallFormat::kCommandRPlus,
       {"Action:\n```json\n[{\"tool_name\": \"get_weather\", \"parameters\": " + args + "}]\n```",
        "Action:\n```json\n[{\"tool_name\": \"now\", \"parameters\": {}}]\n```"}},
      {ToolCallFormat::kCommandR7B,
       {"[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": " + args + "}]",
        "[{\"tool_call_id\": \"0\", \"tool_name\": \"now\", \"parameters\": {}}]"}},
      {ToolCallFormat::kDeepSeekR1,
       {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" +
            args + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"}},
      {ToolCallFormat::kHarmony,
       {"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + args,
        "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}"}},
  };
  for (const auto& [format, texts] : sentences) {
    SCOPED_TRACE(std::string(ToolCallFormatName(format)));
    Result<std::string> gbnf = ToolCallGbnf(format, kTools);
    ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
    for (const std::string& text : {texts.first, texts.second}) {
      EXPECT_TRUE(Accepts(*gbnf, text)) << text;
      const ParsedOutput p = ParseToolCalls(format, text);
      ASSERT_EQ(p.calls.size(), 1u) << text;
    }
    EXPECT_EQ(ParseToolCalls(format, texts.first).calls[0].arguments,
              R"({"city":"Paris","unit":"celsius"})");
    std::string wrong_name = texts.first;
    wrong_name.replace(wrong_name.find("get_weather"), 11, "get_wheather");
    EXPECT_FALSE(Accepts(*gbnf, wrong_name));
    std::string missing_required = texts.first;
    missing_required.replace(missing_required.find("\"city\": \"Paris\", "), 17, "");
    EXPECT_FALSE(Accepts(*gbnf, missing_required)) << missing_required;
    std::string bad_enum = texts.first;
    bad_enum.replace(bad_enum.find("celsius"), 7, "kelvin");
    EXPECT_FALSE(Accepts(*gbnf, bad_enum));
    EXPECT_FALSE(Accepts(*gbnf, texts.first + texts.second)) << "one call only";
  }
  // Only the named tool.
  Result<std::string> one = ToolCallGbnf(ToolCallFormat::kLlama3, {kTools[1]});
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(Accepts(*one, sentences.at(ToolCallFormat::kLlama3).second));
  EXPECT_FALSE(Accepts(*one, sentences.at(ToolCallFormat::kLlama3).first));
}

TEST(ToolCalls, GrammarRefusesWhatTheSchemaConverterRefuses) {
  int failed = -1;
  Result<std::string> g =
      ToolCallGbnf(ToolCallFormat::kHermes,
                   {kTools[0], {"f", R"({"type": "object", "properties": {"n": {"type": "integer",
                            "multipleOf": 2}}})"}},
                   &failed);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(failed, 1);
  EXPECT_NE(g.status().message().find("properties.n.multipleOf"), std::string::npos)
      << g.status().message();
  EXPECT_FALSE(ToolCallGbnf(ToolCallFormat::kNone, kTools).ok());
  EXPECT_FALSE(ToolCallGbnf(ToolCallFormat::kHermes, {}).ok());
}

}  // namespace
}  // namespace promptcache
