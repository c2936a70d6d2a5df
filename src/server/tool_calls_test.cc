// Tool-call formats: detection on the real templates, parsing of well-formed and malformed
// output (malformed output is content, never an error), where a stream holds text back, and the
// grammar that forces a call (its sentences parse back into the call).
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

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
  const std::filesystem::path dir = std::filesystem::path(PC_SHARED_DIR) / "templates";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string file = entry.path().filename().string();
    auto it = expected.find(file);
    const ToolCallFormat want = it == expected.end() ? ToolCallFormat::kNone : it->second;
    EXPECT_EQ(ToolCallFormatName(DetectToolCallFormat(text.str())), ToolCallFormatName(want))
        << file;
    ++seen;
  }
  EXPECT_EQ(seen, 17);
  EXPECT_EQ(DetectToolCallFormat(""), ToolCallFormat::kNone);
}

TEST(ToolCalls, ParsesHermes) {
  ParsedOutput p = ParseToolCalls(
      ToolCallFormat::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", "
      "\"arguments\": \"{\\\"zone\\\": \\\"CET\\\"}\"}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me check.\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","unit":"celsius"})");
  EXPECT_EQ(p.calls[1].name, "time");
  EXPECT_EQ(p.calls[1].arguments, R"({"zone":"CET"})");
  // The turn may end before the closing tag.
  p = ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls[0].arguments, "{}");
}

TEST(ToolCalls, ParsesLlama3) {
  ParsedOutput p = ParseToolCalls(
      ToolCallFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(p.content, "");
  p = ParseToolCalls(ToolCallFormat::kLlama3,
                     "\n<|python_tag|>{\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5]}}\n");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"x":[1,2.5]})");
  EXPECT_EQ(p.content, "\n");
}

TEST(ToolCalls, ParsesMistral) {
  ParsedOutput p = ParseToolCalls(
      ToolCallFormat::kMistral,
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}, \"id\": \"abcdefghi\"}, "
      "{\"name\": \"b\", \"arguments\": {}}]");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"x"})");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.content, "");
  // Without the control token (a grammar-forced call, or a decoder that drops it).
  p = ParseToolCalls(ToolCallFormat::kMistral, " [{\"name\": \"a\", \"arguments\": {}}]");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, " ");
}

// The generation prompt ends in ">>>": the output starts with the recipient, "all" for text.
TEST(ToolCalls, ParsesFunctionaryV32) {
  const ToolCallFormat f = ToolCallFormat::kFunctionaryV32;
  ParsedOutput p = ParseToolCalls(
      f, "get_weather\n{\"city\": \"Paris\"}>>>search\n{\"query\": \"a >>> b\", \"n\": 2}\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(p.calls[1].name, "search");
  EXPECT_EQ(p.calls[1].arguments, R"({"query":"a >>> b","n":2})");
  EXPECT_EQ(p.content, "");
  // Text first, then a call; the "all\n" marker is not content.
  p = ParseToolCalls(f, "all\nLet me look.\n>>>now\n{}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "now");
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.content, "Let me look.\n");
  EXPECT_EQ(ToolContentBegin(f, "all\nLet me look."), 4u);
  // Text only, with the model writing its own ">>>" too.
  p = ParseToolCalls(f, ">>>all\nOnce upon a time");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "Once upon a time");
  EXPECT_EQ(ToolContentBegin(f, ">>>all\nOnce"), 7u);
  EXPECT_EQ(ToolContentBegin(ToolCallFormat::kHermes, "all\nOnce"), 0u);
  p = ParseToolCalls(f, ">>>f\n{\"a\": 1}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"a":1})");
}

TEST(ToolCalls, ParsesFunctionaryV31) {
  const ToolCallFormat f = ToolCallFormat::kFunctionaryV31;
  ParsedOutput p =
      ParseToolCalls(f,
                     "Let me see. <function=get_weather>{\"city\": \"Oslo\"}</function>"
                     "\n<function=search>{\"query\": \"</function>\"}</function>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me see. ");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(p.calls[1].name, "search");
  EXPECT_EQ(p.calls[1].arguments, R"({"query":"</function>"})");
  // The turn may end before the closing tag.
  p = ParseToolCalls(f, "<function=now>{}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{}");
}

TEST(ToolCalls, ParsesFireFunction) {
  const ToolCallFormat f = ToolCallFormat::kFireFunction;
  ParsedOutput p =
      ParseToolCalls(f,
                     "Checking. functools[{\"name\": \"a\", \"arguments\": {\"q\": \"]\"}}, "
                     "{\"name\": \"b\", \"arguments\": {}}]");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Checking. ");
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"]"})");
  EXPECT_EQ(p.calls[1].name, "b");
  p = ParseToolCalls(f, " functools[{\"name\": \"a\", \"arguments\": {}}]");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, " ");
}

// As the template renders an assistant turn's calls (after its content).
TEST(ToolCalls, ParsesCommandRPlus) {
  const ToolCallFormat f = ToolCallFormat::kCommandRPlus;
  ParsedOutput p =
      ParseToolCalls(f,
                     "I will look.\nAction:\n```json\n[\n    {\n        \"tool_name\": "
                     "\"a\",\n        \"parameters\": {\n            \"q\": \"```\"\n"
                     "        }\n    },\n    {\"tool_name\": \"b\", \"parameters\": "
                     "{}}\n]```\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "I will look.\n");
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"```"})");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  p = ParseToolCalls(f, "Action: [{\"tool_name\": \"a\", \"parameters\": {\"x\": 1}}]");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
}

TEST(ToolCalls, ParsesCommandR7B) {
  const ToolCallFormat f = ToolCallFormat::kCommandR7B;
  ParsedOutput p = ParseToolCalls(
      f,
      "<|START_THINKING|>Look it up.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": "
      "\"0\", \"tool_name\": \"a\", \"parameters\": {\"q\": \"]\"}},\n    {\"tool_call_id\": "
      "\"1\", \"tool_name\": \"b\", \"parameters\": {}}\n]<|END_ACTION|>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "<|START_THINKING|>Look it up.<|END_THINKING|>");
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"]"})");
  EXPECT_EQ(p.calls[1].name, "b");
  // The control token left out of the text, as constrained decoding writes it.
  p = ParseToolCalls(f, "[{\"tool_call_id\": \"0\", \"tool_name\": \"a\", \"parameters\": {}}]");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
}

TEST(ToolCalls, ParsesDeepSeekR1) {
  const ToolCallFormat f = ToolCallFormat::kDeepSeekR1;
  ParsedOutput p = ParseToolCalls(
      f,
      "<think>\nhm\n</"
      "think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n"
      "```json\n{\"q\": "
      "\"```\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "b\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "<think>\nhm\n</think>\n\n");
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"```"})");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  // Without the outer markers, and cut off after the arguments' fence.
  p = ParseToolCalls(f, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{\"x\": 1}\n```");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"x":1})");
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
    // What a stream sends, as the server's ReleaseContent does: from where the content begins
    // up to where a call may start.
    size_t begin = 0, sent = 0;
    for (size_t n = 0; n <= text.size(); ++n) {
      const std::string_view prefix = std::string_view(text).substr(0, n);
      const size_t start = std::min(n, ToolCallStart(format, prefix));
      begin = std::max(begin, ToolContentBegin(format, prefix));
      if (start > begin) sent = std::max(sent, start);
    }
    SCOPED_TRACE(text);
    const std::string streamed = sent > begin ? text.substr(begin, sent - begin) : "";
    if (whole.calls.empty()) {
      EXPECT_EQ(whole.content, text.substr(ToolContentBegin(format, text)));
    }
    EXPECT_LE(streamed.size(), whole.content.size());
    EXPECT_EQ(streamed, whole.content.substr(0, streamed.size()));
  }
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
