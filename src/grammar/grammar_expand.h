// Expanding recognizer stacks until every top is a character set, shared by Grammar::Parse (the
// start state) and GrammarState (each character). Not part of the public API (grammar.h).
//
// Stacks are deduplicated as they are created, not only once expanded: a nullable item repeated
// under another repeat reaches the same stack along exponentially many paths (issue 28's
// ((("a"{0,8}){0,8}){0,8}) held the engine for 55 s before), and each distinct stack is now
// expanded once. Every stack created costs its length plus kStackCost units from a budget
// (about 1.5-5 ns a unit here), so that a step's time is bounded whatever the grammar.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace promptcache::grammar_internal {

// The fixed part of a stack's cost in work units (hashing, the table, the work list): with it a
// unit costs about the same time whether stacks are short (ambiguous grammars) or long (deeply
// nested JSON), measured from 1.4 to 5.7 ns.
inline constexpr size_t kStackCost = 64;

enum class ExpandResult {
  kOk,
  kTooManyStacks,  // more than kMaxGrammarStacks distinct results
  kTooDeep,        // a stack deeper than kMaxGrammarStackDepth
  kOverBudget,     // the budget ran out
};

// Refuses (InvalidArgument naming the rule the text wrote, owner[r] for rule r) a grammar whose
// recognizer could hold more than kMaxGrammarStacks stacks at its start or after any step
// (grammar_ways.cc). nullable[r]: rule r can match nothing. Needs no left recursion.
Status CheckWays(const Grammar& grammar, const std::vector<bool>& nullable,
                 const std::vector<int32_t>& owner);

// A one-line reason for a result other than kOk.
std::string ExpandProblem(ExpandResult r);

// One expansion: Add the stacks to expand, then Run. Uses scratch memory of the calling thread,
// so one expander at a time per thread.
class StackExpander {
 public:
  StackExpander(const Grammar& grammar, size_t* budget);
  ~StackExpander();
  StackExpander(const StackExpander&) = delete;
  StackExpander& operator=(const StackExpander&) = delete;

  // Adds the stack `prefix`, then `a` and `b` where not null (topmost last).
  ExpandResult Add(std::span<const GrammarElement* const> prefix, const GrammarElement* a,
                   const GrammarElement* b);
  // Expands rule references at the tops until each stack is empty or topped by a character set,
  // and writes the distinct results to *out (replacing its contents).
  ExpandResult Run(GrammarStacks* out);

 private:
  struct Scratch;
  ExpandResult Push(size_t start, size_t len);
  ExpandResult AddChild(uint32_t parent, const GrammarElement* a, const GrammarElement* b);

  const Grammar& grammar_;
  size_t* budget_;
  Scratch& s_;
};

}  // namespace promptcache::grammar_internal
