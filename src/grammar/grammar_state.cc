// The pushdown recognizer: stacks of grammar elements, expanded until each top is a character
// set, advanced by one code point at a time, within the bounds of grammar.h.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "grammar/grammar.h"
#include "grammar/grammar_expand.h"

namespace promptcache {
namespace grammar_internal {

// Every stack created in one expansion (deduplicated through an open-addressing table of their
// indices), the ones still to expand, and the finished ones; kept per thread so that the many
// small steps of a mask's walk allocate nothing.
struct StackExpander::Scratch {
  GrammarStacks pool;
  std::vector<uint64_t> hashes;  // of each stack in pool
  std::vector<uint32_t> table;   // pool index + 1; 0: empty
  std::vector<uint32_t> work;
  std::vector<uint32_t> done;
  bool busy = false;
};

namespace {

uint64_t HashStack(const GrammarElement* const* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  for (size_t i = 0; i < n; ++i) {
    h = (h ^ reinterpret_cast<uintptr_t>(p[i])) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

std::string ExpandProblem(ExpandResult r) {
  switch (r) {
    case ExpandResult::kTooManyStacks:
      return "more than " + std::to_string(kMaxGrammarStacks) + " ways to go on at once";
    case ExpandResult::kTooDeep:
      return "rules nested more than " + std::to_string(kMaxGrammarStackDepth) + " deep";
    case ExpandResult::kOverBudget:
      return "more than " + std::to_string(kMaxGrammarStepWork) + " units of work for a character";
    case ExpandResult::kOk:
      break;
  }
  return "ok";
}

StackExpander::StackExpander(const Grammar& grammar, size_t* budget)
    : grammar_(grammar), budget_(budget), s_([]() -> Scratch& {
        thread_local Scratch scratch;
        return scratch;
      }()) {
  PC_CHECK(!s_.busy);
  s_.busy = true;
  s_.pool.clear();
  s_.hashes.clear();
  s_.table.assign(64, 0);
  s_.work.clear();
  s_.done.clear();
}

StackExpander::~StackExpander() {
  s_.busy = false;
  // Memory a large expansion took is given back, not kept by every thread that ever parsed a
  // grammar (each connection has one); the small steps of a mask's walk stay allocation-free.
  if (s_.pool.elems.capacity() > (size_t{1} << 16) || s_.table.capacity() > (size_t{1} << 16)) {
    s_ = Scratch();
  }
}

// The stack just written at pool.elems[start, start + len): kept and queued unless it is there
// already.
ExpandResult StackExpander::Push(size_t start, size_t len) {
  GrammarStacks& pool = s_.pool;
  const GrammarElement* const* p = pool.elems.data() + start;
  const uint64_t h = HashStack(p, len);
  size_t mask = s_.table.size() - 1;
  for (size_t slot = h & mask;; slot = (slot + 1) & mask) {
    const uint32_t at = s_.table[slot];
    if (at == 0) break;
    const std::span<const GrammarElement* const> other = pool[at - 1];
    if (s_.hashes[at - 1] == h && other.size() == len &&
        std::equal(other.begin(), other.end(), p)) {
      pool.elems.resize(start);  // seen: dropped
      return ExpandResult::kOk;
    }
  }
  const uint32_t index = static_cast<uint32_t>(pool.size());
  pool.ends.push_back(static_cast<uint32_t>(start + len));
  s_.hashes.push_back(h);
  s_.work.push_back(index);
  if (pool.size() * 2 > s_.table.size()) {  // grow and rehash
    s_.table.assign(s_.table.size() * 2, 0);
    mask = s_.table.size() - 1;
    for (uint32_t i = 0; i < pool.size(); ++i) {
      size_t slot = s_.hashes[i] & mask;
      while (s_.table[slot] != 0) slot = (slot + 1) & mask;
      s_.table[slot] = i + 1;
    }
  } else {
    size_t slot = h & mask;
    while (s_.table[slot] != 0) slot = (slot + 1) & mask;
    s_.table[slot] = index + 1;
  }
  return ExpandResult::kOk;
}

ExpandResult StackExpander::Add(std::span<const GrammarElement* const> prefix,
                                const GrammarElement* a, const GrammarElement* b) {
  const size_t len = prefix.size() + (a != nullptr) + (b != nullptr);
  if (len > kMaxGrammarStackDepth) return ExpandResult::kTooDeep;
  if (*budget_ < len + kStackCost) return ExpandResult::kOverBudget;
  *budget_ -= len + kStackCost;
  std::vector<const GrammarElement*>& elems = s_.pool.elems;
  const size_t start = elems.size();
  elems.insert(elems.end(), prefix.begin(), prefix.end());
  if (a != nullptr) elems.push_back(a);
  if (b != nullptr) elems.push_back(b);
  return Push(start, len);
}

// Stack `parent` without its top, then a and b.
ExpandResult StackExpander::AddChild(uint32_t parent, const GrammarElement* a,
                                     const GrammarElement* b) {
  const size_t keep = s_.pool.ends[parent] - s_.pool.begin(parent) - 1;
  const size_t len = keep + (a != nullptr) + (b != nullptr);
  if (len > kMaxGrammarStackDepth) return ExpandResult::kTooDeep;
  if (*budget_ < len + kStackCost) return ExpandResult::kOverBudget;
  *budget_ -= len + kStackCost;
  std::vector<const GrammarElement*>& elems = s_.pool.elems;
  const size_t start = elems.size();
  elems.resize(start + len);  // may move the buffer: the parent is copied by index after
  std::copy_n(elems.data() + s_.pool.begin(parent), keep, elems.data() + start);
  size_t at = start + keep;
  if (a != nullptr) elems[at++] = a;
  if (b != nullptr) elems[at++] = b;
  return Push(start, len);
}

ExpandResult StackExpander::Run(GrammarStacks* out) {
  while (!s_.work.empty()) {
    const uint32_t i = s_.work.back();
    s_.work.pop_back();
    const std::span<const GrammarElement* const> s = s_.pool[i];
    if (s.empty() || s.back()->kind == GrammarElement::kChars) {
      if (s_.done.size() >= kMaxGrammarStacks) return ExpandResult::kTooManyStacks;
      s_.done.push_back(i);
      continue;
    }
    // A rule reference: its continuation, then each alternative's first element.
    const GrammarElement* e = s.back();
    const GrammarElement* more = (e + 1)->kind != GrammarElement::kEnd ? e + 1 : nullptr;
    for (const auto& alt : grammar_.rules()[e->rule]) {
      const GrammarElement* first = alt[0].kind != GrammarElement::kEnd ? &alt[0] : nullptr;
      if (ExpandResult r = AddChild(i, more, first); r != ExpandResult::kOk) return r;
    }
  }
  out->clear();
  for (uint32_t i : s_.done) {
    const std::span<const GrammarElement* const> s = s_.pool[i];
    out->elems.insert(out->elems.end(), s.begin(), s.end());
    out->ends.push_back(static_cast<uint32_t>(out->elems.size()));
  }
  return ExpandResult::kOk;
}

}  // namespace grammar_internal

using grammar_internal::ExpandResult;
using grammar_internal::StackExpander;

GrammarState::GrammarState(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), stacks_(grammar_->start()) {}

GrammarState::Outcome GrammarState::Feed(std::string_view bytes, const GrammarStacks& in,
                                         std::string_view in_partial, GrammarStacks* out,
                                         std::string* out_partial, size_t* budget) const {
  // Each character's step reads *cur (the input first) and writes *out.
  const GrammarStacks* cur = &in;
  GrammarStacks next;
  std::string partial(in_partial);
  auto step = [&](uint32_t cp) -> Outcome {
    // The step's own bound, the same for every caller (a mask's walk and Advance agree), within
    // the caller's total.
    size_t step_budget = std::min(kMaxGrammarStepWork, *budget);
    const size_t before = step_budget;
    ExpandResult r = ExpandResult::kOk;
    {
      StackExpander x(*grammar_, &step_budget);
      for (size_t i = 0; i < cur->size() && r == ExpandResult::kOk; ++i) {
        const std::span<const GrammarElement* const> s = (*cur)[i];
        if (step_budget == 0) {
          r = ExpandResult::kOverBudget;
          break;
        }
        --step_budget;
        if (s.empty() || !s.back()->Matches(cp)) continue;
        const GrammarElement* e = s.back();
        r = x.Add(s.first(s.size() - 1), (e + 1)->kind != GrammarElement::kEnd ? e + 1 : nullptr,
                  nullptr);
      }
      if (r == ExpandResult::kOk) r = x.Run(&next);
    }
    *budget -= before - step_budget;
    if (r != ExpandResult::kOk) return Outcome::kOverflow;
    if (next.size() == 0) return Outcome::kRefused;
    std::swap(*out, next);
    cur = out;
    return Outcome::kOk;
  };
  for (const char ch : bytes) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (partial.empty()) {
      if (c < 0x80) {
        if (Outcome o = step(c); o != Outcome::kOk) return o;
        continue;
      }
      if ((c >> 5) != 6 && (c >> 4) != 14 && (c >> 3) != 30) return Outcome::kRefused;
      partial.push_back(ch);
      continue;
    }
    if ((c & 0xC0) != 0x80) return Outcome::kRefused;
    partial.push_back(ch);
    const unsigned char lead = static_cast<unsigned char>(partial[0]);
    const size_t len = (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : 4;
    if (partial.size() < len) continue;
    uint32_t cp = lead & (0x7F >> len);
    for (size_t i = 1; i < len; ++i) {
      cp = (cp << 6) | (static_cast<unsigned char>(partial[i]) & 0x3F);
    }
    partial.clear();
    if (Outcome o = step(cp); o != Outcome::kOk) return o;
  }
  if (cur == &in && out != &in) *out = in;  // no character completed: the stacks stay
  if (!partial.empty()) {
    // A character split across tokens: go on only if some stack takes a non-ASCII character.
    bool any = false;
    for (size_t i = 0; i < out->size() && !any; ++i) {
      const std::span<const GrammarElement* const> s = (*out)[i];
      if (s.empty()) continue;
      const GrammarElement* e = s.back();
      any = e->negated;
      for (const auto& [lo, hi] : e->ranges) any = any || hi >= 0x80;
    }
    if (!any) return Outcome::kRefused;
  }
  *out_partial = std::move(partial);
  return Outcome::kOk;
}

bool GrammarState::Advance(std::string_view bytes) {
  size_t budget = kMaxGrammarStepWork * std::max<size_t>(1, bytes.size());
  GrammarStacks stacks;
  std::string partial;
  const Outcome o = Feed(bytes, stacks_, partial_, &stacks, &partial, &budget);
  if (o == Outcome::kOverflow) overflowed_ = true;
  if (o != Outcome::kOk) return false;
  stacks_ = std::move(stacks);
  partial_ = std::move(partial);
  return true;
}

bool GrammarState::Accepts(std::string_view bytes) const {
  size_t budget = kMaxGrammarStepWork * std::max<size_t>(1, bytes.size());
  GrammarStacks stacks;
  std::string partial;
  const Outcome o = Feed(bytes, stacks_, partial_, &stacks, &partial, &budget);
  if (o == Outcome::kOverflow) overflowed_ = true;
  return o == Outcome::kOk;
}

bool GrammarState::AdvanceInto(std::string_view bytes, GrammarState* next, size_t* budget) const {
  PC_CHECK(next != this);
  next->grammar_ = grammar_;
  next->overflowed_ = false;
  const Outcome o = Feed(bytes, stacks_, partial_, &next->stacks_, &next->partial_, budget);
  if (o == Outcome::kOverflow) next->overflowed_ = true;
  return o == Outcome::kOk;
}

bool GrammarState::Complete() const {
  if (!partial_.empty()) return false;
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (stacks_[i].empty()) return true;
  }
  return false;
}

bool GrammarState::Finished() const {
  if (!Complete()) return false;
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (!stacks_[i].empty()) return false;
  }
  return true;
}

std::string GrammarState::Key() const {
  std::vector<uint32_t> order(stacks_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const auto x = stacks_[a], y = stacks_[b];
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
  });
  std::string key = partial_;
  key.push_back('\0');
  for (uint32_t i : order) {
    const std::span<const GrammarElement* const> s = stacks_[i];
    const uint32_t n = static_cast<uint32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof(n));  // lengths keep keys unambiguous
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(s[0]));
  }
  return key;
}

}  // namespace promptcache
