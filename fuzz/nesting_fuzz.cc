// libFuzzer target for issue 28's hostile inputs: deep nesting and exploding grammars through
// every parser they reach. The first byte picks the target (0 a chat body, 1 a completion body,
// 2 GBNF, 3 a JSON schema, 4 a PML schema, 5 a PML prompt; nesting_seed_gen writes seeds nested
// 100,000 deep for each). Whatever the input, this must end in a Status or an ApiError, with no
// stack overflow, within the grammar engine's budgets, and consistently:
//   - JSON nested deeper than kMaxJsonNesting is refused (bodies by the route, schemas by the
//     converter), with the message naming the bound;
//   - an accepted grammar (from GBNF, a schema or a request) is run as a constraint over a small
//     vocabulary: the mask agrees with Allows token by token until the recognizer reports an
//     overflow, and from then on nothing is allowed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_depth.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "pml/pml.h"
#include "pml/pml_fake_encoder.h"
#include "server/openai_request.h"

namespace promptcache {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "nesting_fuzz: violated: %s\n", what);
    std::abort();
  }
}

const std::shared_ptr<const VocabTrie>& Trie() {
  static const auto trie = [] {
    std::vector<std::string> tokens;
    for (char c = 'a'; c <= 'e'; ++c) tokens.emplace_back(1, c);
    for (const char* t :
         {"(", ")", "{",  "}",  "[",    "]",   "\"",  ",",   ":",  " ",  "\n",   "0",
          "1", "x", "aa", "ab", "aaaa", "{\"", "\":", "\"}", "[[", "]]", "\xc3", "\xa9"}) {
      tokens.emplace_back(t);
    }
    tokens.emplace_back("");  // the end token
    const int32_t end = static_cast<int32_t>(tokens.size()) - 1;
    return std::make_shared<const VocabTrie>(std::move(tokens), std::vector<int32_t>{end});
  }();
  return trie;
}

// A few steps of constrained decoding, taking the first allowed token each time (or the one the
// input's bytes pick).
void RunConstraint(const std::shared_ptr<const Grammar>& g, std::string_view picks) {
  Check(g->start().size() > 0, "a parsed grammar has a start state");
  GrammarConstraint c(g, Trie());
  for (size_t step = 0; step < 12; ++step) {
    const std::vector<uint8_t> mask = c.Mask();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < Trie()->vocab_size(); ++id) {
      if (mask[id]) allowed.push_back(id);
      if (c.error().ok()) Check((mask[id] != 0) == c.Allows(id), "the mask agrees with Allows");
    }
    if (!c.error().ok()) {
      Check(allowed.empty(), "nothing is allowed after an overflow");
      return;
    }
    if (allowed.empty() || c.Finished()) return;
    const size_t pick = step < picks.size() ? static_cast<uint8_t>(picks[step]) : 0;
    const int32_t next = allowed[pick % allowed.size()];
    if (Trie()->IsEnd(next)) return;
    c.Accept(next);
  }
}

void RunRequest(std::string_view body, bool chat) {
  ApiRequest r;
  const std::optional<ApiError> err = chat ? ParseChatRequest(body, RequestLimits{}, &r)
                                           : ParseCompletionRequest(body, RequestLimits{}, &r);
  if (JsonNestingDepth(body) > kMaxJsonNesting) {
    Check(err.has_value() && err->message.find("deeper than") != std::string::npos,
          "a body nested past the bound is refused for it");
    return;
  }
  if (!err && r.grammar) RunConstraint(r.grammar, body);
}

void RunSchema(std::string_view text) {
  Result<std::string> gbnf = JsonSchemaToGbnf(text);
  if (JsonNestingDepth(text) > kMaxJsonNesting) {
    Check(!gbnf.ok(), "a schema nested past the bound is refused");
    return;
  }
  if (!gbnf.ok()) return;
  // Converted schemas may still be refused by the grammar's own bounds (an enum of 5000 values).
  if (auto g = Grammar::Parse(*gbnf); g.ok()) RunConstraint(*g, text);
}

void RunPml(std::string_view text, bool schema) {
  static const FakePmlEncoder enc(FakePmlEncoder::Mode::kWords, std::nullopt, 1 << 20);
  if (schema) {
    auto s = ParseSchema(text, "/nonexistent-nesting-fuzz/s.xml", enc);
    if (s.ok()) (void)FormatLayout(*s);
  } else {
    (void)ParsePrompt(text);
  }
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      RunRequest(text, /*chat=*/true);
      break;
    case 1:
      RunRequest(text, /*chat=*/false);
      break;
    case 2:
      if (auto g = Grammar::Parse(text); g.ok()) RunConstraint(*g, text);
      break;
    case 3:
      RunSchema(text);
      break;
    default:
      RunPml(text, data[0] % 6 == 4);
      break;
  }
  return 0;
}
