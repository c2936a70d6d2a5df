// The pushdown recognizer: stacks of grammar elements, expanded until each top is a character
// set, advanced by one code point at a time.
#include <algorithm>

#include "grammar/grammar.h"

namespace promptcache {
namespace {

// Bounds on the recognizer's state: an ambiguous grammar may keep many stacks alive.
constexpr size_t kMaxStacks = 4096;
constexpr size_t kMaxStackDepth = 4096;

}  // namespace

GrammarState::GrammarState(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  // The start: each alternative of root.
  std::vector<Stack> start;
  for (const auto& alt : grammar_->rules()[grammar_->root()]) {
    Stack s;
    if (alt[0].kind != GrammarElement::kEnd) s.push_back(&alt[0]);
    start.push_back(std::move(s));
  }
  // Expand rule references at the tops (Step does it after each character).
  std::vector<Stack> out;
  std::vector<Stack> work = std::move(start);
  while (!work.empty()) {
    Stack s = std::move(work.back());
    work.pop_back();
    if (s.empty() || s.back()->kind == GrammarElement::kChars) {
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
      continue;
    }
    const GrammarElement* e = s.back();
    s.pop_back();
    if ((e + 1)->kind != GrammarElement::kEnd) s.push_back(e + 1);
    for (const auto& alt : grammar_->rules()[e->rule]) {
      Stack t = s;
      if (alt[0].kind != GrammarElement::kEnd) t.push_back(&alt[0]);
      if (t.size() > kMaxStackDepth || work.size() > kMaxStacks) break;
      work.push_back(std::move(t));
    }
  }
  stacks_ = std::move(out);
}

bool GrammarState::Step(uint32_t cp, std::vector<Stack>* stacks) const {
  std::vector<Stack> work, out;
  for (const Stack& s : *stacks) {
    if (s.empty() || !s.back()->Matches(cp)) continue;
    Stack t = s;
    const GrammarElement* e = t.back();
    t.pop_back();
    if ((e + 1)->kind != GrammarElement::kEnd) t.push_back(e + 1);
    work.push_back(std::move(t));
  }
  // Expand references until every top is a character set (left recursion was refused, so
  // this ends); duplicates are merged.
  while (!work.empty()) {
    Stack s = std::move(work.back());
    work.pop_back();
    if (s.empty() || s.back()->kind == GrammarElement::kChars) {
      if (std::find(out.begin(), out.end(), s) == out.end()) {
        if (out.size() >= kMaxStacks) return false;
        out.push_back(std::move(s));
      }
      continue;
    }
    const GrammarElement* e = s.back();
    s.pop_back();
    if ((e + 1)->kind != GrammarElement::kEnd) s.push_back(e + 1);
    for (const auto& alt : grammar_->rules()[e->rule]) {
      Stack t = s;
      if (alt[0].kind != GrammarElement::kEnd) t.push_back(&alt[0]);
      if (t.size() > kMaxStackDepth) return false;
      work.push_back(std::move(t));
    }
    if (work.size() > kMaxStacks * 4) return false;
  }
  if (out.empty()) return false;
  *stacks = std::move(out);
  return true;
}

bool GrammarState::Feed(std::string_view bytes, std::vector<Stack>* stacks,
                        std::string* partial) const {
  for (const char ch : bytes) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (partial->empty()) {
      if (c < 0x80) {
        if (!Step(c, stacks)) return false;
        continue;
      }
      if ((c >> 5) != 6 && (c >> 4) != 14 && (c >> 3) != 30) return false;  // not a lead byte
      partial->push_back(ch);
      continue;
    }
    if ((c & 0xC0) != 0x80) return false;
    partial->push_back(ch);
    const unsigned char lead = static_cast<unsigned char>((*partial)[0]);
    const size_t len = (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : 4;
    if (partial->size() < len) continue;
    uint32_t cp = lead & (0x7F >> len);
    for (size_t i = 1; i < len; ++i)
      cp = (cp << 6) | (static_cast<unsigned char>((*partial)[i]) & 0x3F);
    partial->clear();
    if (!Step(cp, stacks)) return false;
  }
  if (!partial->empty()) {
    // A character split across tokens: go on only if some stack takes a non-ASCII character.
    for (const Stack& s : *stacks) {
      if (s.empty()) continue;
      const GrammarElement* e = s.back();
      if (e->negated) return true;
      for (const auto& [lo, hi] : e->ranges) {
        if (hi >= 0x80) return true;
      }
    }
    return false;
  }
  return true;
}

bool GrammarState::Advance(std::string_view bytes) {
  std::vector<Stack> stacks = stacks_;
  std::string partial = partial_;
  if (!Feed(bytes, &stacks, &partial)) return false;
  stacks_ = std::move(stacks);
  partial_ = std::move(partial);
  return true;
}

bool GrammarState::Accepts(std::string_view bytes) const {
  std::vector<Stack> stacks = stacks_;
  std::string partial = partial_;
  return Feed(bytes, &stacks, &partial);
}

bool GrammarState::Complete() const {
  if (!partial_.empty()) return false;
  for (const Stack& s : stacks_) {
    if (s.empty()) return true;
  }
  return false;
}

bool GrammarState::Finished() const {
  if (!Complete()) return false;
  for (const Stack& s : stacks_) {
    if (!s.empty()) return false;
  }
  return true;
}

std::string GrammarState::Key() const {
  std::vector<Stack> sorted = stacks_;
  std::sort(sorted.begin(), sorted.end());
  std::string key = partial_;
  key.push_back('\0');
  for (const Stack& s : sorted) {
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(s[0]));
    key.push_back('|');
  }
  return key;
}

}  // namespace promptcache
