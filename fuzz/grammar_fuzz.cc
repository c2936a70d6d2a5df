// libFuzzer target for the grammar engine's untrusted inputs: a request's GBNF text and JSON
// schema. Each input is parsed as GBNF and converted as a JSON schema; whatever is accepted is
// run: the recognizer is fed the input's own bytes (and their halves) and asked for its key,
// and a schema's generated GBNF must parse (the converter only writes grammars it can read;
// one past the parser's size or ambiguity bounds is refused there, which is allowed).
// To reach deep into both parsers without committed seeds, the input is also spliced into a few
// valid grammars and schemas (the first byte picks one, the rest replaces its tail).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace promptcache {
namespace {

constexpr const char* kGrammars[] = {
    ("root ::= (expr \"=\" ws term \"\\n\")+\nexpr ::= term ([-+*/] term)*\n"
     "term ::= [a-z]+ ws | [0-9]+ ws | \"(\" ws expr \")\" ws\nws ::= [ \\t]*\n"),
    "root ::= item{1,3}\nitem ::= \"- \" [^\\n\\u2028]+ \"\\n\"\n",
    "root ::= \"a\"? (\"b\" | \"c\")* . [\\x00-\\x7f]{2,}\n",
};
constexpr const char* kSchemas[] = {
    R"({"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"enum":[1,"x",null]}},"required":["a"],"additionalProperties":false})",
    R"({"$defs":{"n":{"type":"array","items":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"integer"}]}}},"$ref":"#/$defs/n"})",
    R"({"type":["string","number"],"const":"k"})",
    R"({"type":"object","properties":{"n":{"type":"integer","minimum":-5,"exclusiveMaximum":1e3},"x":{"type":"number","minimum":0.25,"maximum":7}},"additionalProperties":{"type":"string","pattern":"^[a-z]+\\d?$"}})",
    R"({"type":"array","prefixItems":[{"format":"date-time"},{"type":"string","format":"ipv6","maxLength":20}],"items":{"anyOf":[{"pattern":"(a|b)*c{2,5}$"},{"format":"email"}]}})",
};

void Run(const std::string& text) {
  if (auto g = Grammar::Parse(text); g.ok()) {
    GrammarState st(*g);
    st.Accepts(text);
    GrammarState half(*g);
    if (half.Advance(text.substr(0, text.size() / 2))) half.Advance(text.substr(text.size() / 2));
    half.Complete();
    half.Finished();
    (void)half.Key();
  }
  if (auto gbnf = JsonSchemaToGbnf(text); gbnf.ok()) {
    auto g = Grammar::Parse(*gbnf);
    // A grammar past the parser's size or ambiguity bounds is a refusal (a 400), not a fault.
    const std::string why = g.ok() ? "" : g.status().message();
    const bool bound = why.find("too large") != std::string::npos ||
                       why.find("ways at one point") != std::string::npos ||
                       why.find("the start of rule") != std::string::npos;
    if (!g.ok() && !bound) {
      std::fprintf(stderr, "the converter wrote a grammar it cannot parse: %s\n%s\n",
                   g.status().message().c_str(), gbnf->c_str());
      std::abort();
    }
    if (g.ok()) {
      GrammarState st(*g);
      st.Advance(text);
    }
  }
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  const std::string input(reinterpret_cast<const char*>(data), size);
  Run(input);
  if (size >= 2) {
    const size_t pick = data[0] % 8;
    std::string base = pick < 3 ? kGrammars[pick] : kSchemas[pick - 3];
    const size_t at = data[1] % (base.size() + 1);
    Run(base.substr(0, at) + input.substr(2));
  }
  return 0;
}
