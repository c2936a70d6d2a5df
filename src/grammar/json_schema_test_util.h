// What the JSON Schema tests share: a schema compiled through the converter and the GBNF parser
// (a failure is a test failure naming the schema), and a whole text fed to a fresh grammar state.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace promptcache {

inline std::shared_ptr<const Grammar> Compile(const std::string& schema) {
  auto text = JsonSchemaToGbnf(schema);
  EXPECT_TRUE(text.ok()) << schema << ": " << text.status().message();
  if (!text.ok()) return nullptr;
  auto g = Grammar::Parse(*text);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().message();
  return g.ok() ? *g : nullptr;
}

// Whether the grammar accepts `s` whole; its state must never overflow its bounds on the way.
inline bool Matches(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  if (!g) return false;
  GrammarState st(g);
  const bool ok = st.Advance(s) && st.Complete();
  EXPECT_FALSE(st.overflowed()) << s;
  return ok;
}

}  // namespace promptcache
