// Reasoning split: which real templates think, where a prompt opens the thinking, the split of a
// whole output, and the stream's split, which must give the same at every cut of the output
// into pieces (a tag split across tokens). Tool calls are read from the answer only.
#include "server/reasoning.h"

#include <gtest/gtest.h>

#include <set>

#include "chat/chat_test_templates.h"
#include "server/reasoning_test_util.h"
#include "server/tool_calls.h"

namespace promptcache {
namespace {

constexpr ReasoningMode kSplit{true, false};
constexpr ReasoningMode kOpened{true, true};

TEST(Reasoning, TemplatesWithBothTagsThink) {
  // Of the real templates, the DeepSeek R1 distills' render or strip thinking; Qwen 2.5's,
  // Llama's and the others do not.
  const std::set<std::string> thinking = {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
                                          "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                          "llama-cpp-deepseek-r1.jinja"};
  int seen = 0;
  for (const auto& [file, source] : chat_testing::LoadTestTemplates()) {
    EXPECT_EQ(TemplateHasThinking(source), thinking.count(file) == 1) << file;
    ++seen;
  }
  EXPECT_GE(seen, 15);
  EXPECT_FALSE(TemplateHasThinking("{{ '<think>' }}"));  // only one of the tags
}

TEST(Reasoning, PromptOpensThinkingAtItsEnd) {
  EXPECT_TRUE(PromptOpensThinking("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_TRUE(PromptOpensThinking("<think>"));
  // Qwen3 with enable_thinking false: the thinking is opened and closed already.
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n"));
  EXPECT_FALSE(PromptOpensThinking("<think> and then text"));
  EXPECT_FALSE(PromptOpensThinking(""));
}

TEST(Reasoning, SplitsAWholeOutput) {
  ReasoningSplit s = SplitReasoning(kSplit, "<think>\nLet me see.\n</think>\n\nThe answer.");
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "Let me see.");
  EXPECT_EQ(s.content, "The answer.");
  EXPECT_EQ(s.reasoning_end, std::string("<think>\nLet me see.\n</think>").size());

  // Leading whitespace before the tag; inner whitespace kept.
  s = SplitReasoning(kSplit, "  <think> a\n\nb </think>c ");
  EXPECT_EQ(s.reasoning, "a\n\nb");
  EXPECT_EQ(s.content, "c ");

  // The prompt opened it (R1): no opening tag in the output.
  s = SplitReasoning(kOpened, "Hmm.\n</think>\n\nYes.");
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "Hmm.");
  EXPECT_EQ(s.content, "Yes.");

  // Unclosed (max_tokens): all of it is reasoning, a partial close tag included.
  s = SplitReasoning(kSplit, "<think>\nstill thinking </thi");
  EXPECT_EQ(s.reasoning, "still thinking </thi");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.reasoning_end, std::string("<think>\nstill thinking </thi").size());
  s = SplitReasoning(kOpened, "abc");
  EXPECT_EQ(s.reasoning, "abc");
  EXPECT_EQ(s.content, "");

  // Text before "<think>": no thinking; the tags are answer text.
  s = SplitReasoning(kSplit, "Sure. <think>x</think>y");
  EXPECT_FALSE(s.has_reasoning);
  EXPECT_EQ(s.content, "Sure. <think>x</think>y");
  EXPECT_EQ(s.reasoning_end, 0u);

  // "</think>" without an opening: answer text.
  s = SplitReasoning(kSplit, "a</think>b");
  EXPECT_FALSE(s.has_reasoning);
  EXPECT_EQ(s.content, "a</think>b");

  // A second "<think>" inside the answer stays there.
  s = SplitReasoning(kSplit, "<think>x</think>y<think>z</think>");
  EXPECT_EQ(s.reasoning, "x");
  EXPECT_EQ(s.content, "y<think>z</think>");

  // An empty thinking block (Qwen3 sometimes writes one).
  s = SplitReasoning(kSplit, "<think>\n\n</think>\n\nOK");
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "OK");

  // Only whitespace, or an opening tag that never completed: content.
  EXPECT_EQ(SplitReasoning(kSplit, " \n").content, " \n");
  EXPECT_EQ(SplitReasoning(kSplit, "<thi").content, "<thi");

  // Not split: everything is content.
  s = SplitReasoning(ReasoningMode{}, "<think>x</think>y");
  EXPECT_FALSE(s.has_reasoning);
  EXPECT_EQ(s.content, "<think>x</think>y");
}

TEST(Reasoning, StreamSplitsAsTheWholeAtEveryCut) {
  for (const char* text :
       {"<think>\nLet me see.\n</think>\n\nThe answer.", " <think> a  b </think>  c",
        "<think>\nunclosed </thi", "Sure. <think>x</think>y", "a</think>b", "<thi", "  \n",
        "<think></think>", "<think>x</think>y<think>z</think>", "<think>a</th</think>b"}) {
    ExpectStreamMatchesWhole(kSplit, text);
  }
  for (const char* text : {"Hmm.\n</think>\n\nYes.", "abc", "</think>", "a </think", "x"}) {
    ExpectStreamMatchesWhole(kOpened, text);
  }
}

TEST(Reasoning, StreamReleasesReasoningBeforeTheEnd) {
  // Reasoning goes out as it comes, not at the close: only a possible tag (and the whitespace
  // before it) waits.
  ReasoningSplitter s(kSplit);
  EXPECT_EQ(s.Add("<thi").reasoning, "");
  EXPECT_EQ(s.Add("nk>\nStep one").reasoning, "Step one");
  ReasoningSplitter::Delta d = s.Add(" and </");
  EXPECT_EQ(d.reasoning, " and");
  d = s.Add("think>\nAnswer");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer");
}

TEST(Reasoning, ToolCallsAreReadFromTheAnswerOnly) {
  // A call written while thinking is not a call; the one in the answer is.
  const std::string text =
      "<think>I could write <tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>"
      "</think>\n\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  const ReasoningSplit s = SplitReasoning(kSplit, text);
  const ParsedOutput parsed = ParseToolCalls(ToolCallFormat::kHermes, s.content);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "b");
  EXPECT_EQ(parsed.calls[0].arguments, "{\"x\":1}");
}

}  // namespace
}  // namespace promptcache
