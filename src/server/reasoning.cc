#include "server/reasoning.h"

#include <algorithm>

#include "core/text.h"

namespace promptcache {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

size_t FirstNonSpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// The length of s[0, end) without its trailing whitespace.
size_t TrimmedEnd(std::string_view s, size_t end) {
  while (end > 0 && IsSpace(s[end - 1])) --end;
  return end;
}

}  // namespace

bool TemplateHasThinking(std::string_view chat_template) {
  return chat_template.find(kOpen) != std::string_view::npos &&
         chat_template.find(kClose) != std::string_view::npos;
}

bool PromptOpensThinking(std::string_view prompt_text) {
  const size_t end = TrimmedEnd(prompt_text, prompt_text.size());
  return end >= kOpen.size() && prompt_text.substr(end - kOpen.size(), kOpen.size()) == kOpen;
}

ReasoningSplitter::ReasoningSplitter(ReasoningMode mode) {
  if (mode.harmony) {
    harmony_.emplace(mode.split);
    state_ = State::kPlain;
  } else if (!mode.split) {
    state_ = State::kPlain;
  } else if (mode.starts_open) {
    state_ = State::kThinking;
    opened_ = true;
  } else {
    state_ = State::kStart;
  }
}

ReasoningSplitter::Delta ReasoningSplitter::Add(std::string_view piece) {
  Delta out;
  if (harmony_) {
    harmony_->Add(piece, &out.reasoning, &out.content);
    return out;
  }
  consumed_ += piece.size();
  held_.append(piece);
  Step(&out);
  return out;
}

void ReasoningSplitter::EmitReasoning(std::string_view s, Delta* out) {
  if (!reasoning_started_) {  // reasoning goes out without its leading whitespace
    s.remove_prefix(FirstNonSpace(s));
    if (s.empty()) return;
    reasoning_started_ = true;
  }
  out->reasoning.append(s);
}

void ReasoningSplitter::Step(Delta* out) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const std::string_view rest = std::string_view(held_).substr(FirstNonSpace(held_));
        if (rest.empty() || (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest)) {
          return;  // whitespace, or the start of "<think>": not known yet
        }
        if (rest.substr(0, kOpen.size()) == kOpen) {
          opened_ = true;
          state_ = State::kThinking;
          held_ = std::string(rest.substr(kOpen.size()));
          continue;
        }
        state_ = State::kContent;
        continue;
      }
      case State::kThinking: {
        const size_t close = held_.find(kClose);
        if (close != std::string::npos) {  // trailing whitespace: dropped
          EmitReasoning(std::string_view(held_).substr(0, TrimmedEnd(held_, close)), out);
          const size_t after = close + kClose.size();
          reasoning_end_ = consumed_ - (held_.size() - after);
          held_.erase(0, after);
          state_ = State::kAfter;
          continue;
        }
        // Held back: a partial "</think>" at the end, and the whitespace before it (which is
        // dropped if the thinking closes right after).
        const size_t cut = TrimmedEnd(held_, PartialTagStart(held_, kClose));
        EmitReasoning(std::string_view(held_).substr(0, cut), out);
        held_.erase(0, cut);
        return;
      }
      case State::kAfter: {
        const size_t i = FirstNonSpace(held_);
        held_.erase(0, i);
        if (held_.empty()) return;
        state_ = State::kContent;
        continue;
      }
      case State::kContent:
      case State::kPlain:
        out->content.append(held_);
        held_.clear();
        return;
    }
  }
}

ReasoningSplitter::Delta ReasoningSplitter::Finish() {
  Delta out;
  if (harmony_) {
    harmony_->Finish(&out.reasoning, &out.content);
    return out;
  }
  if (state_ == State::kStart) {
    out.content = std::move(held_);  // whitespace, or a "<think>" that never completed
  } else if (state_ == State::kThinking) {
    // Unclosed: all of it is reasoning (a partial "</think>" included), trailing space dropped.
    EmitReasoning(std::string_view(held_).substr(0, TrimmedEnd(held_, held_.size())), &out);
  } else if (state_ == State::kContent || state_ == State::kPlain) {
    out.content = std::move(held_);
  }
  held_.clear();
  return out;
}

ReasoningSplit SplitReasoning(ReasoningMode mode, std::string_view text) {
  ReasoningSplitter splitter(mode);
  ReasoningSplitter::Delta a = splitter.Add(text);
  const size_t end = splitter.reasoning_end();
  ReasoningSplitter::Delta b = splitter.Finish();
  ReasoningSplit out;
  out.reasoning = std::move(a.reasoning) + b.reasoning;
  out.content = std::move(a.content) + b.content;
  out.has_reasoning = splitter.has_reasoning();
  out.reasoning_end = end;
  return out;
}

}  // namespace promptcache
