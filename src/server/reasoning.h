// Reasoning models' output: the thinking they write before the answer, split from it.
//
// Qwen3, the DeepSeek-R1 distills, Phi-4-reasoning and others write `<think>...</think>` before
// their answer. Whether a model does is read from its chat template (data, not a table of model
// names): a template that spells both tags renders or strips earlier thinking, so its model
// writes it (TemplateHasThinking). Some templates open the thinking in the generation prompt
// (the R1 distills' "<｜Assistant｜><think>\n"), and the output then starts inside it without the
// opening tag; whether a rendered prompt does is read from its end (PromptOpensThinking), so
// Qwen3's `enable_thinking: false`, whose prompt ends in an empty "<think>\n\n</think>\n\n",
// starts in the answer.
//
// The split follows llama.cpp's `--reasoning-format deepseek`: thinking opens only at the start
// of the output (after whitespace) or in the prompt; a `<think>` later in the answer, or a
// `</think>` without an opening, is answer text. The reasoning is trimmed of surrounding
// whitespace and the answer of the whitespace after `</think>`. Output that ends while the
// thinking is still open (max_tokens, a stop sequence) is all reasoning. ReasoningSplitter does
// the same incrementally, for streams: a tag cut across pieces is held back until it is whole.
//
// gpt-oss models write no tags but harmony's channels (server/harmony.h): with
// ReasoningMode::harmony the splitter reads those instead, whether or not it splits.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "server/harmony.h"

namespace promptcache {

// The template spells both "<think>" and "</think>".
bool TemplateHasThinking(std::string_view chat_template);

// The rendered prompt ends (but for whitespace) in "<think>": the output starts inside it.
bool PromptOpensThinking(std::string_view prompt_text);

// How a request's output is read: split or not, and whether it starts inside the thinking.
struct ReasoningMode {
  bool split = false;        // the model thinks and the request wants it split out
  bool starts_open = false;  // the prompt opened the thinking (PromptOpensThinking)
  // The output is harmony's (TemplateIsHarmony): its analysis channel is the thinking, and the
  // answer (with its tool calls in kHarmonyCallOpen form) is read out of it even without split.
  bool harmony = false;
  // The output goes through a ReasoningSplitter: split, or harmony's either way.
  bool parsed() const { return split || harmony; }
};

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
  bool has_reasoning = false;  // a thinking block was seen (opened), even if empty
  // Bytes of the text that belong to the thinking, tags included (0: none; the whole text when
  // the thinking is unclosed): reasoning tokens are those that start before it.
  size_t reasoning_end = 0;
};

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(ReasoningMode mode);

  struct Delta {
    std::string reasoning;
    std::string content;
  };
  // Adds a piece of the output: what can be released now.
  Delta Add(std::string_view piece);
  // The output is over: what was held back (a partial tag, whitespace).
  Delta Finish();

  bool has_reasoning() const { return harmony_ ? harmony_->has_reasoning() : opened_; }
  // Bytes of the output read so far that belong to the thinking (ReasoningSplit::reasoning_end).
  size_t reasoning_end() const {
    if (harmony_) return harmony_->reasoning_end();
    return state_ == State::kThinking ? consumed_ : reasoning_end_;
  }

 private:
  enum class State {
    kStart,     // nothing but whitespace yet: "<think>" may still open the thinking
    kThinking,  // inside the thinking
    kAfter,     // after "</think>": whitespace is skipped
    kContent,   // the answer (or all output when there is no thinking)
    kPlain,     // no splitting: every byte is content
  };
  void Step(Delta* out);
  // Appends reasoning text to out, leaving out the whitespace that would begin the reasoning.
  void EmitReasoning(std::string_view s, Delta* out);

  State state_;
  bool opened_ = false;
  bool reasoning_started_ = false;  // a non-whitespace byte of reasoning went out
  std::string held_;                // read but not released: a partial tag or whitespace
  size_t consumed_ = 0;             // bytes of the output read (held_ included)
  size_t reasoning_end_ = 0;
  std::optional<HarmonyReader> harmony_;  // set: harmony's channels, not tags
};

// The whole output at once: the same as Add(text) then Finish().
ReasoningSplit SplitReasoning(ReasoningMode mode, std::string_view text);

}  // namespace promptcache
