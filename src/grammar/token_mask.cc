#include "grammar/token_mask.h"

#include <algorithm>

namespace promptcache {
namespace {

constexpr size_t kMaxCachedMasks = 1024;

}  // namespace

VocabTrie::VocabTrie(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens)
    : bytes_(std::move(token_bytes)), is_end_(bytes_.size(), 0) {
  for (int32_t id : end_tokens) {
    if (id >= 0 && id < vocab_size()) is_end_[id] = 1;
  }
  nodes_.emplace_back();
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (bytes_[id].empty() || is_end_[id]) continue;
    int32_t node = 0;
    for (const char ch : bytes_[id]) {
      const uint8_t b = static_cast<uint8_t>(ch);
      auto& kids = nodes_[node].children;
      auto it = std::find_if(kids.begin(), kids.end(), [b](const auto& k) { return k.first == b; });
      if (it != kids.end()) {
        node = it->second;
      } else {
        const int32_t next = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.push_back({b, next});
        nodes_.emplace_back();
        node = next;
      }
    }
    nodes_[node].tokens.push_back(id);
  }
}

bool VocabTrie::Allowed(const GrammarState& state, std::vector<uint8_t>* allowed,
                        size_t budget) const {
  allowed->assign(bytes_.size(), 0);
  if (state.overflowed()) return false;
  if (state.Complete()) {
    for (int32_t id = 0; id < vocab_size(); ++id) allowed->at(id) = is_end_[id];
  }
  // Depth-first over the trie with the state after each node's prefix.
  struct Frame {
    int32_t node;
    GrammarState state;
  };
  std::vector<Frame> stack;
  stack.push_back({0, state});
  while (!stack.empty()) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    GrammarState next = f.state;
    for (const auto& [b, child] : nodes_[f.node].children) {
      const char c = static_cast<char>(b);
      if (!f.state.AdvanceInto(std::string_view(&c, 1), &next, &budget)) {
        if (next.overflowed()) {
          allowed->assign(bytes_.size(), 0);
          return false;
        }
        continue;
      }
      for (int32_t id : nodes_[child].tokens) (*allowed)[id] = 1;
      if (!nodes_[child].children.empty()) stack.push_back({child, next});
    }
  }
  return true;
}

bool GrammarConstraint::Allows(int32_t token) const {
  if (token < 0 || token >= trie_->vocab_size() || !error_.ok()) return false;
  if (trie_->IsEnd(token)) return state_.Complete();
  const std::string& b = trie_->bytes(token);
  return !b.empty() && state_.Accepts(b);
}

const std::vector<uint8_t>& GrammarConstraint::Mask() {
  if (!error_.ok() || state_.overflowed()) return Fail();
  std::string key = state_.Key();
  auto it = masks_.find(key);
  if (it != masks_.end()) return it->second;
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  std::vector<uint8_t> mask;
  if (!trie_->Allowed(state_, &mask)) return Fail();
  return masks_.emplace(std::move(key), std::move(mask)).first->second;
}

const std::vector<uint8_t>& GrammarConstraint::Fail() {
  if (error_.ok()) {
    error_ = InvalidArgument("the grammar's recognizer outgrew its bounds here (more than " +
                             std::to_string(kMaxGrammarStacks) +
                             " ways to go on, or more work than a step may " +
                             "take): the grammar is too ambiguous; simplify it");
  }
  empty_.assign(trie_->vocab_size(), 0);
  return empty_;
}

void GrammarConstraint::Accept(int32_t token) {
  if (trie_->IsEnd(token)) return;
  if (!state_.Advance(trie_->bytes(token)) && state_.overflowed()) Fail();
}

}  // namespace promptcache
