// The harmony response format of OpenAI's gpt-oss models, read incrementally: which parts of
// the output are reasoning, which the answer, which tool calls.
//
// The model writes messages, each a header and a body:
//   <|channel|>analysis<|message|>thinking...<|end|>
//   <|start|>assistant<|channel|>final<|message|>the answer...
// (the generation prompt has written the first "<|start|>assistant"; <|return|> ends the turn
// and, being an end-of-generation token, is not in the text). A tool call is a message with a
// recipient, in its channel header or its role header:
//   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
//   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>
// The analysis channel is the reasoning; final and commentary without a recipient (a preamble
// before a call) are the answer; a call to functions.NAME goes into the answer's text in one
// canonical form, kHarmonyCallOpen + NAME + "<|message|>" + arguments + "<|call|>", which
// ParseToolCalls(ToolCallFormat::kHarmony) reads; messages to other recipients (built-in tools
// this server never offers) are dropped. With `split` off the analysis stays in the answer as
// "<|channel|>analysis<|message|>...<|end|>". Output that does not begin with a header (after
// whitespace), or whose header runs past kMaxHeader bytes, is all answer text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace promptcache {

inline constexpr std::string_view kHarmonyCallOpen = "<|channel|>commentary to=functions.";

// The chat template is harmony's: it spells "<|channel|>".
bool TemplateIsHarmony(std::string_view chat_template);

class HarmonyReader {
 public:
  explicit HarmonyReader(bool split) : split_(split) {}

  // Adds a piece of the output, appending what can be released now to *reasoning and *content.
  void Add(std::string_view piece, std::string* reasoning, std::string* content);
  // The output is over: what was held back (a partial marker; an unterminated message ends).
  void Finish(std::string* reasoning, std::string* content);

  bool has_reasoning() const { return has_reasoning_; }
  // Bytes of the output read so far through the end of its last analysis message (all of it
  // while inside one): the reasoning tokens are those that start before.
  size_t reasoning_end() const;

  static constexpr size_t kMaxHeader = 256;

 private:
  enum class State { kHeader, kBody, kText };
  enum class Kind { kReasoning, kContent, kCall, kDropped };
  void Step(std::string* reasoning, std::string* content);
  // Reads the header held_[0, end): the message's kind (and its call's name into content).
  void OpenMessage(std::string_view header, std::string* reasoning, std::string* content);
  void Body(std::string_view text, std::string* reasoning, std::string* content);
  void CloseMessage(std::string* content);

  bool split_;
  State state_ = State::kHeader;
  Kind kind_ = Kind::kContent;
  bool has_reasoning_ = false;
  bool reasoning_written_ = false;  // some reasoning went out: the next analysis starts a line
  std::string held_;                // read but not released
  size_t consumed_ = 0;             // bytes of the output read (held_ included)
  size_t reasoning_end_ = 0;
};

}  // namespace promptcache
