// Helpers shared by the grammar engine's test files.
#pragma once

#include <memory>
#include <string_view>

#include "grammar/grammar.h"

namespace promptcache {

// Whole-string acceptance: every byte accepted and the grammar complete at the end (a state that
// overflows its limits on the way just refuses).
inline bool AcceptsWhole(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarState st(g);
  return st.Advance(s) && st.Complete();
}

}  // namespace promptcache
