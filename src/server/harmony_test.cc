// Harmony (gpt-oss) output read by the reasoning splitter: channels to reasoning and answer, tool
// calls to kHarmony's form and back out by ParseToolCalls, the stream equal to the whole at every
// cut, and gpt-oss's real template (when ik_llama.cpp's copy is on this machine) rendering a
// conversation with tools, earlier thinking and a call through promptcache's Jinja interpreter.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/chat_test_templates.h"
#include "server/openai_request.h"
#include "server/prompt_encoder.h"
#include "server/reasoning.h"
#include "server/reasoning_test_util.h"
#include "server/tool_calls.h"

namespace promptcache {
namespace {

constexpr ReasoningMode kHarmonySplit{true, false, true};
constexpr ReasoningMode kHarmonyUnsplit{false, false, true};

const std::string kAnalysis = "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|>";
const std::string kFinal = "<|start|>assistant<|channel|>final<|message|>It is 4.";

TEST(Harmony, TemplatesWithChannelsAreHarmony) {
  for (const auto& [file, source] : chat_testing::LoadTestTemplates()) {
    EXPECT_FALSE(TemplateIsHarmony(source)) << file;
  }
  EXPECT_TRUE(TemplateIsHarmony("{{ '<|start|>assistant<|channel|>final<|message|>' }}"));
  EXPECT_EQ(DetectToolCallFormat("{{ '<|channel|>commentary' }}"), ToolCallFormat::kHarmony);
  EXPECT_EQ(ToolCallFormatName(ToolCallFormat::kHarmony), "harmony");
}

TEST(Harmony, AnalysisIsReasoningFinalIsContent) {
  const ReasoningSplit s = SplitReasoning(kHarmonySplit, kAnalysis + kFinal);
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "User asks 2+2. Easy.");
  EXPECT_EQ(s.content, "It is 4.");
  EXPECT_EQ(s.reasoning_end, kAnalysis.size());
  // No analysis: no reasoning; a preamble in commentary is content too.
  const ReasoningSplit plain =
      SplitReasoning(kHarmonySplit, "<|channel|>commentary<|message|>Hi. <|end|>" + kFinal);
  EXPECT_FALSE(plain.has_reasoning);
  EXPECT_EQ(plain.content, "Hi. It is 4.");
  EXPECT_EQ(plain.reasoning_end, 0u);
  // Two analysis messages: one reasoning, a line apart.
  const ReasoningSplit two = SplitReasoning(
      kHarmonySplit, kAnalysis + "<|start|>assistant<|channel|>analysis<|message|>More.<|end|>");
  EXPECT_EQ(two.reasoning, "User asks 2+2. Easy.\nMore.");
  EXPECT_EQ(two.content, "");
}

TEST(Harmony, UnsplitKeepsTheAnalysisInTheContent) {
  const ReasoningSplit s = SplitReasoning(kHarmonyUnsplit, kAnalysis + kFinal);
  EXPECT_FALSE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, kAnalysis + "It is 4.");
}

TEST(Harmony, OutputWithoutChannelsIsContent) {
  for (const char* text : {"Just text.", "  to be or not", "<b>bold</b>", "<|"}) {
    const ReasoningSplit s = SplitReasoning(kHarmonySplit, text);
    EXPECT_EQ(s.content, text);
    EXPECT_FALSE(s.has_reasoning);
  }
  // A header that never reaches <|message|>: text once it is longer than any header.
  const std::string endless = "<|channel|>" + std::string(HarmonyReader::kMaxHeader, 'x');
  EXPECT_EQ(SplitReasoning(kHarmonySplit, endless).content, endless);
  // Cut short inside a header (max_tokens): markup, dropped.
  const ReasoningSplit cut = SplitReasoning(kHarmonySplit, kAnalysis + "<|start|>assistant<|chan");
  EXPECT_EQ(cut.content, "");
  EXPECT_EQ(cut.reasoning, "User asks 2+2. Easy.");
  // Unclosed analysis: all reasoning.
  const ReasoningSplit open = SplitReasoning(kHarmonySplit, "<|channel|>analysis<|message|>Hmm");
  EXPECT_EQ(open.reasoning, "Hmm");
  EXPECT_EQ(open.reasoning_end, std::string("<|channel|>analysis<|message|>Hmm").size());
}

TEST(Harmony, ToolCallsInEitherHeaderBecomeCalls) {
  // Recipient in the channel header, with <|constrain|>; <|call|> ended generation (not in the
  // text). Then in the role header.
  for (const char* call :
       {"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        "<|message|>{\"city\": \"Paris\"}",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        "{\"city\": \"Paris\"}<|call|>"}) {
    const ReasoningSplit s = SplitReasoning(kHarmonySplit, kAnalysis + call);
    EXPECT_EQ(s.reasoning, "User asks 2+2. Easy.");
    EXPECT_EQ(s.content, std::string(kHarmonyCallOpen) +
                             "get_weather<|message|>{\"city\": \"Paris\"}<|call|>");
    const ParsedOutput parsed = ParseToolCalls(ToolCallFormat::kHarmony, s.content);
    ASSERT_EQ(parsed.calls.size(), 1u) << call;
    EXPECT_EQ(parsed.calls[0].name, "get_weather");
    EXPECT_EQ(parsed.calls[0].arguments, "{\"city\":\"Paris\"}");
    EXPECT_EQ(parsed.content, "");
  }
  // A preamble before the call stays content; a built-in tool's message is dropped.
  const ReasoningSplit s = SplitReasoning(
      kHarmonySplit,
      "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>analysis "
      "to=browser.search<|message|>{\"q\": 1}<|call|>");
  EXPECT_EQ(s.content, "Checking.");
  EXPECT_EQ(s.reasoning, "");
  const ParsedOutput parsed = ParseToolCalls(
      ToolCallFormat::kHarmony, "Checking." + std::string(kHarmonyCallOpen) +
                                    "a<|message|>{}<|call|>" + std::string(kHarmonyCallOpen) +
                                    "b <|constrain|>json<|message|>{\"x\": [1]}");
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.content, "Checking.");
  EXPECT_EQ(parsed.calls[1].name, "b");
  EXPECT_EQ(parsed.calls[1].arguments, "{\"x\":[1]}");
  // Arguments that are not an object: not a call, all text.
  const std::string bad = std::string(kHarmonyCallOpen) + "a<|message|>[1]<|call|>";
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kHarmony, bad).calls.empty());
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kHarmony, "Checking.<|channel|>comm"), 9u);
}

TEST(Harmony, StreamSplitsAsTheWholeAtEveryCut) {
  for (const ReasoningMode mode : {kHarmonySplit, kHarmonyUnsplit}) {
    for (const std::string& text :
         {kAnalysis + kFinal,
          kAnalysis + "<|start|>assistant<|channel|>commentary "
                      "to=functions.f <|constrain|>json<|message|>{\"a\":1}",
          std::string("plain <|end|> text"), std::string("<|channel|>analysis<|message|>a<|e"),
          std::string("<|channel|>final<|message|>x<|return|>")}) {
      ExpectStreamMatchesWhole(mode, text, /*step=*/3);
    }
  }
}

TEST(Harmony, StreamReleasesTheAnalysisAsItComes) {
  ReasoningSplitter s(kHarmonySplit);
  EXPECT_EQ(s.Add("<|channel|>analysis<|mess").reasoning, "");
  EXPECT_EQ(s.Add("age|>Step one").reasoning, "Step one");
  ReasoningSplitter::Delta d = s.Add(" and<|e");
  EXPECT_EQ(d.reasoning, " and");
  d = s.Add("nd|><|start|>assistant<|channel|>final<|message|>Answer");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer");
}

// An assistant turn's reasoning reaches harmony's template as `thinking`, without its content
// beside calls (the template refuses both).
TEST(Harmony, ThinkingFieldForTheTemplate) {
  ApiMessage m;
  m.role = "assistant";
  m.content = "Calling.";
  m.reasoning_content = "Need weather.";
  m.tool_calls = nlohmann::ordered_json::parse(
      R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}])");
  CallTurnForm form;
  form.thinking_field = true;
  const ChatInput input = RequestChatInput({m}, false, nullptr, form);
  ASSERT_EQ(input.messages.size(), 1u);
  EXPECT_EQ(input.messages[0]["thinking"], "Need weather.");
  EXPECT_FALSE(input.messages[0].contains("content") && input.messages[0]["content"].is_string());
  const ChatInput other = RequestChatInput({m}, false, nullptr, CallTurnForm{});
  EXPECT_FALSE(other.messages[0].contains("thinking"));
}

// gpt-oss's own template, from ik_llama.cpp's tree when it is on this machine (never committed
// here): a conversation with tools, an earlier call with its thinking and result renders, and the
// generation prompt ends where the model's first header begins.
TEST(Harmony, GptOssTemplateRendersAConversationWithTools) {
  const std::string path = "/work/peers/ik_llama.cpp/models/templates/openai-gpt-oss-120b.jinja";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not on this machine";
  std::ifstream in(path);
  std::stringstream source;
  source << in.rdbuf();
  ASSERT_TRUE(TemplateIsHarmony(source.str()));
  ASSERT_EQ(DetectToolCallFormat(source.str()), ToolCallFormat::kHarmony);
  const ChatTemplate chat(source.str(), ChatTemplate::Options{});
  ASSERT_TRUE(chat.uses_jinja()) << chat.jinja_status().message();
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}])");
  std::vector<ApiMessage> messages(5);
  messages[0].role = "system";
  messages[0].content = "Be brief.";
  messages[1].role = "user";
  messages[1].content = "Weather in Paris?";
  messages[2].role = "assistant";
  messages[2].content_null = true;
  messages[2].reasoning_content = "Need the tool.";
  messages[2].tool_calls = nlohmann::ordered_json::parse(
      R"([{"id": "c1", "type": "function",
           "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])");
  messages[3].role = "tool";
  messages[3].content = "{\"temp\": 21}";
  messages[3].tool_call_id = "c1";
  messages[3].name = "get_weather";
  messages[4].role = "user";
  messages[4].content = "Thanks. And tomorrow?";
  CallTurnForm form = ProbeCallTurnForm(chat);
  form.thinking_field = true;
  ChatInput input = RequestChatInput(messages, true, tools, form);
  input.extra_variables = {{"reasoning_effort", "low"}};
  Result<MarkedText> rendered = chat.Render(input);
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const std::string text = rendered->text();
  EXPECT_NE(text.find("Reasoning: low"), std::string::npos) << text;
  EXPECT_NE(text.find("get_weather"), std::string::npos) << text;
  EXPECT_NE(text.find("to=functions.get_weather"), std::string::npos) << text;
  EXPECT_NE(text.find("Need the tool."), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - std::string("<|start|>assistant").size()),
            "<|start|>assistant");
}

}  // namespace
}  // namespace promptcache
