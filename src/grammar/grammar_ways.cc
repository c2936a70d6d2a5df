// Counting, before any text, how many stacks a grammar's recognizer can hold at each point, so
// that a grammar whose nested or overlapping repeats would multiply them past kMaxGrammarStacks
// is refused when it is parsed, naming the rule (grammar_expand.h).
//
// The count is exact without expanding anything, in time linear in the grammar: from position q
// of an alternative it is 0 at its end, 1 at a character set, and at a reference to rule r the
// sum over r's alternatives of the count from their first element, plus the count from q + 1 when
// r can match nothing. Distinct alternatives give distinct stacks, so this counts stacks, not
// derivations (which is what made ((("a"{0,8}){0,8}){0,8}) exponential to expand). The points
// that matter are the start and every element after an alternative's first: where a step leaves
// a stack's top, after a character or after a rule that ended.
#include <algorithm>

#include "grammar/grammar_expand.h"

namespace promptcache::grammar_internal {
namespace {

constexpr uint64_t kSaturated = uint64_t{1} << 62;

uint64_t Add(uint64_t a, uint64_t b) { return std::min(kSaturated, a + b); }

class WaysCounter {
 public:
  WaysCounter(const Grammar& g, const std::vector<bool>& nullable,
              const std::vector<int32_t>& owner)
      : g_(g), nullable_(nullable), owner_(owner), base_(g.rules().size()) {
    for (size_t r = 0; r < g.rules().size(); ++r) {
      for (const auto& alt : g.rules()[r]) {
        base_[r].push_back(elem_.size());
        for (size_t i = 0; i < alt.size(); ++i) {
          elem_.push_back(&alt[i]);
          rule_of_.push_back(static_cast<int32_t>(r));
          first_.push_back(i == 0);
        }
      }
    }
    n_ = elem_.size();
    ways_.assign(n_, 0);
    state_.assign(n_, 0);
  }

  Status Check() {
    uint64_t start = nullable_[g_.root()] ? 1 : 0;  // the empty stack
    size_t worst = n_;
    for (size_t b : base_[g_.root()]) {
      Eval(b);
      start = Add(start, ways_[b]);
      if (IsRef(b) && (worst == n_ || ways_[b] > ways_[worst])) worst = b;
    }
    if (start > kMaxGrammarStacks) {
      const bool one = worst < n_ && ways_[worst] > kMaxGrammarStacks;
      return TooMany(one ? Culprit(worst) : owner_[g_.root()], start);
    }
    for (size_t q = 0; q < n_; ++q) {
      if (first_[q] || !IsRef(q)) continue;
      Eval(q);
      if (ways_[q] > kMaxGrammarStacks) return TooMany(Culprit(q), ways_[q]);
    }
    return Status::Ok();
  }

 private:
  bool IsRef(size_t q) const { return elem_[q]->kind == GrammarElement::kRule; }

  // ways_[from], by an iterative depth-first walk over what it depends on. The dependencies are
  // acyclic when there is no left recursion (refused first); a cycle found anyway saturates.
  void Eval(size_t from) {
    std::vector<size_t> stack{from};
    while (!stack.empty()) {
      const size_t q = stack.back();
      if (state_[q] == 2) {
        stack.pop_back();
        continue;
      }
      const GrammarElement& e = *elem_[q];
      if (e.kind != GrammarElement::kRule) {
        ways_[q] = e.kind == GrammarElement::kChars ? 1 : 0;
        state_[q] = 2;
        stack.pop_back();
        continue;
      }
      state_[q] = 1;
      bool pending = false, cycle = false;
      auto need = [&](size_t d) {
        if (state_[d] == 0) {
          stack.push_back(d);
          pending = true;
        } else if (state_[d] == 1) {
          cycle = true;
        }
      };
      for (size_t b : base_[e.rule]) need(b);
      if (nullable_[e.rule]) need(q + 1);
      if (pending && !cycle) continue;
      uint64_t sum = 0;
      for (size_t b : base_[e.rule]) sum = Add(sum, ways_[b]);
      if (nullable_[e.rule]) sum = Add(sum, ways_[q + 1]);
      ways_[q] = cycle ? kSaturated : sum;
      state_[q] = 2;
      stack.pop_back();
    }
  }

  // The rule to blame for position q's count: the deepest reference below it whose own count is
  // over the limit, else the one rule whose alternatives add up past it, else q's own rule (its
  // continuation adds the rest); reported as the rule the text wrote.
  int32_t Culprit(size_t q) const {
    for (;;) {
      const int32_t r = elem_[q]->rule;
      uint64_t own = 0;
      size_t over = n_;
      for (size_t b : base_[r]) {
        own = Add(own, ways_[b]);
        if (ways_[b] > kMaxGrammarStacks && IsRef(b)) over = b;
      }
      if (over == n_) return owner_[own > kMaxGrammarStacks ? r : rule_of_[q]];
      q = over;
    }
  }

  Status TooMany(int32_t rule, uint64_t count) const {
    return InvalidArgument(
        "grammar: rule '" + g_.rule_name(rule) + "' can go on in " +
        (count >= kSaturated ? std::string("astronomically many") : std::to_string(count)) +
        " ways at one point, more than the limit of " + std::to_string(kMaxGrammarStacks) +
        " (nested repeats of optional items multiply: write the repeat once)");
  }

  const Grammar& g_;
  const std::vector<bool>& nullable_;
  const std::vector<int32_t>& owner_;
  std::vector<std::vector<size_t>> base_;  // per rule, per alternative: its first position
  std::vector<const GrammarElement*> elem_;
  std::vector<int32_t> rule_of_;
  std::vector<uint8_t> first_;  // the position starts an alternative
  size_t n_ = 0;
  std::vector<uint64_t> ways_;
  std::vector<uint8_t> state_;  // 0: not seen, 1: open, 2: done
};

}  // namespace

Status CheckWays(const Grammar& grammar, const std::vector<bool>& nullable,
                 const std::vector<int32_t>& owner) {
  WaysCounter counter(grammar, nullable, owner);
  return counter.Check();
}

}  // namespace promptcache::grammar_internal
