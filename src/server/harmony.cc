#include "server/harmony.h"

#include <algorithm>

#include "core/text.h"

namespace promptcache {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kTo = "to=";
constexpr std::string_view kFunctions = "functions.";
constexpr std::string_view kSpace = " \t\r\n";

// What a header may begin with: a new message's role header, the first message's channel (the
// generation prompt wrote "<|start|>assistant"), or a recipient in that role header.
constexpr std::string_view kOpeners[] = {kStart, kChannel, kTo};

// What ends a body: the first three are consumed, the other two begin the next header (a model
// that leaves out <|end|>).
constexpr std::string_view kTerminators[] = {kEnd, kCall, kReturn, kStart, kChannel};
constexpr size_t kConsumedTerminators = 3;

// The word after `at` in `s`: up to whitespace or a marker's '<'.
std::string_view WordAt(std::string_view s, size_t at) {
  s.remove_prefix(std::min(at, s.size()));
  return s.substr(0, s.find_first_of(" \t\r\n<"));
}

}  // namespace

bool TemplateIsHarmony(std::string_view chat_template) {
  return chat_template.find(kChannel) != std::string_view::npos;
}

size_t HarmonyReader::reasoning_end() const {
  return state_ == State::kBody && kind_ == Kind::kReasoning ? consumed_ : reasoning_end_;
}

void HarmonyReader::Add(std::string_view piece, std::string* reasoning, std::string* content) {
  consumed_ += piece.size();
  held_.append(piece);
  Step(reasoning, content);
}

void HarmonyReader::OpenMessage(std::string_view header, std::string* reasoning,
                                std::string* content) {
  if (header.substr(0, kStart.size()) == kStart) header.remove_prefix(kStart.size());
  const size_t to = header.find(kTo);
  const std::string_view recipient =
      to == std::string_view::npos ? std::string_view() : WordAt(header, to + kTo.size());
  const size_t ch = header.find(kChannel);
  const std::string_view channel =
      ch == std::string_view::npos ? std::string_view() : WordAt(header, ch + kChannel.size());
  if (!recipient.empty()) {
    const bool function = recipient.substr(0, kFunctions.size()) == kFunctions &&
                          recipient.size() > kFunctions.size();
    kind_ = function ? Kind::kCall : Kind::kDropped;
    if (function) {
      content->append(kHarmonyCallOpen);
      content->append(recipient.substr(kFunctions.size()));
      content->append(kMessage);
    }
  } else if (channel == "analysis") {
    kind_ = Kind::kReasoning;
    if (!split_) {
      content->append(kChannel).append("analysis").append(kMessage);
    } else {
      has_reasoning_ = true;
      if (reasoning_written_) reasoning->append("\n");  // a second analysis message
    }
  } else {
    kind_ = Kind::kContent;  // final, or a preamble in commentary
  }
}

void HarmonyReader::Body(std::string_view text, std::string* reasoning, std::string* content) {
  if (text.empty()) return;
  switch (kind_) {
    case Kind::kReasoning:
      if (split_) {
        reasoning->append(text);
        reasoning_written_ = true;
      } else {
        content->append(text);
      }
      break;
    case Kind::kContent:
    case Kind::kCall:
      content->append(text);
      break;
    case Kind::kDropped:
      break;
  }
}

void HarmonyReader::CloseMessage(std::string* content) {
  if (kind_ == Kind::kCall) content->append(kCall);
  if (kind_ == Kind::kReasoning && !split_) content->append(kEnd);
}

void HarmonyReader::Step(std::string* reasoning, std::string* content) {
  for (;;) {
    switch (state_) {
      case State::kHeader: {
        const size_t lead = std::min(held_.size(), held_.find_first_not_of(kSpace));
        const std::string_view rest = std::string_view(held_).substr(lead);
        if (rest.empty()) return;
        bool opens = false, undecided = false;
        for (std::string_view o : kOpeners) {
          opens = opens || rest.substr(0, o.size()) == o;
          undecided = undecided || (rest.size() < o.size() && o.substr(0, rest.size()) == rest);
        }
        if (!opens && undecided) return;
        const size_t message = rest.find(kMessage);
        if (!opens || (message == std::string_view::npos && held_.size() > kMaxHeader)) {
          state_ = State::kText;  // not harmony: all text from here
          continue;
        }
        if (message == std::string_view::npos) return;
        OpenMessage(rest.substr(0, message), reasoning, content);
        held_.erase(0, lead + message + kMessage.size());
        state_ = State::kBody;
        continue;
      }
      case State::kBody: {
        size_t at = std::string::npos, which = 0;
        for (size_t i = 0; i < std::size(kTerminators); ++i) {
          const size_t p = held_.find(kTerminators[i]);
          if (p < at) at = p, which = i;
        }
        if (at == std::string::npos) {  // hold back what may begin a terminator
          size_t cut = held_.size();
          for (std::string_view t : kTerminators) cut = std::min(cut, PartialTagStart(held_, t));
          Body(std::string_view(held_).substr(0, cut), reasoning, content);
          held_.erase(0, cut);
          return;
        }
        Body(std::string_view(held_).substr(0, at), reasoning, content);
        const size_t after =
            at + (which < kConsumedTerminators ? kTerminators[which].size() : size_t{0});
        if (kind_ == Kind::kReasoning) reasoning_end_ = consumed_ - held_.size() + after;
        CloseMessage(content);
        held_.erase(0, after);
        state_ = State::kHeader;
        continue;
      }
      case State::kText:
        content->append(held_);
        held_.clear();
        return;
    }
  }
}

void HarmonyReader::Finish(std::string* reasoning, std::string* content) {
  if (state_ == State::kBody) {
    Body(held_, reasoning, content);
    if (kind_ == Kind::kReasoning) reasoning_end_ = consumed_;
    CloseMessage(content);
  } else if (state_ == State::kText) {
    content->append(held_);
  } else {
    // An unfinished header is markup, dropped; text too short to tell ("<", "to") is text.
    const std::string_view rest =
        std::string_view(held_).substr(std::min(held_.size(), held_.find_first_not_of(kSpace)));
    bool opens = false;
    for (std::string_view o : kOpeners) opens = opens || rest.substr(0, o.size()) == o;
    if (!opens) content->append(held_);
  }
  held_.clear();
  state_ = State::kText;
}

}  // namespace promptcache
