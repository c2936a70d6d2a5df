// The JSON Schema compiler's class, shared by json_schema.cc (conjunctions, references, anyOf
// and oneOf, types) and json_schema_parts.cc (objects, arrays, strings, numbers, literals). Not
// part of the public API (json_schema.h).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "grammar/json_schema.h"
#include "grammar/regex_nfa.h"

namespace promptcache::grammar_internal {

using ojson = nlohmann::ordered_json;

// The keywords compiled, and the annotations accepted (and ignored).
const std::set<std::string>& SchemaKeywords();
const std::set<std::string>& SchemaAnnotations();

// minLength/maxLength/minItems/maxItems are at most this.
inline constexpr int kMaxBound = 1000;

struct ArrayPlan;

class Converter {
 public:
  Converter(const ojson& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  // The top expression, and the schema's own rules in *rules.
  Result<std::string> Run(std::string* rules);

 private:
  friend struct ArrayPlan;
  // One member of a conjunction: a schema and where it is ("properties.a.anyOf[1]").
  struct Part {
    const ojson* s;
    std::string where;
    bool done_alternatives = false;  // its anyOf/oneOf already chosen from
  };
  using Conj = std::vector<Part>;

  static std::string At(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  Status Unsupported(const std::string& where, const std::string& what) const;
  Status Invalid(const std::string& where, const std::string& what, const std::string& why) const;
  Status CheckKeys(const Part& p) const;
  static bool OnlyRef(const ojson& s);
  Result<const ojson*> Resolve(const ojson& ref, const std::string& where) const;

  std::string NewRule(const std::string& body);
  std::string Reserve();
  void Define(const std::string& name, std::string body);
  RuleSink Sink() {
    return {[this] { return Reserve(); },
            [this](const std::string& n, std::string b) { Define(n, std::move(b)); }};
  }

  // The expression for values valid against every member ("" when none is).
  Result<std::string> Rule(Conj conj, int depth);
  // Without combinators left: per type.
  Result<std::string> Body(const Conj& conj, int depth);
  Result<std::string> Object(const Conj& conj, int depth);
  // Object's steps: the property names in order of appearance (then the required ones no member
  // lists) and the required set; one property's value rule ("" where no member allows it; a
  // name the property names do not match starts disallowed); the rule of the listed pairs,
  // in order, optional unless required, then `end_*` (the pairs beyond them) after at least one
  // (rest) or before any (first).
  Status ObjectNames(const Conj& conj, std::vector<std::string>* names,
                     std::set<std::string>* required) const;
  Result<std::string> PropertyValue(const Conj& conj, const std::string& name, bool allowed,
                                    int depth);
  std::string ObjectRule(const std::vector<std::string>& kv, const std::vector<bool>& req,
                         const std::string& end_rest, const std::string& end_first);
  Status ObjectMembers(const Conj& conj, Conj* name_conj, Conj* extra_values, bool* extras,
                       bool* closed) const;
  Result<std::string> ExtraPair(const Conj& values, const std::vector<std::string>& names,
                                const Nfa* name_nfa, int depth);
  Result<std::string> Array(const Conj& conj, int depth);
  // An array's members read together (json_schema_parts.cc): tuples, later items, bounds.
  Result<ArrayPlan> ReadArray(const Conj& conj) const;
  // The array's rule: its explicit items, then the later ones repeated, within the bounds.
  Result<std::string> ArrayRule(ArrayPlan& plan, int depth);
  Result<std::string> String(const Conj& conj);
  Result<std::string> Number(const Conj& conj, bool integer);
  static bool HasLiterals(const Conj& conj);
  Result<std::string> Literals(const Conj& conj, const std::set<std::string>& types, bool typed,
                               int depth);
  static std::set<std::string> InferTypes(const Conj& conj);
  Status CheckDisjoint(const ojson& branches, const std::string& where) const;
  bool Disjoint(const ojson* a, const ojson* b, int depth) const;
  Result<int> Bound(const Part& p, const char* key) const;
  // The automaton of the string keywords (pattern, format, lengths) of the members, or nullptr
  // when they have none but lengths (*min, *max).
  Result<std::unique_ptr<Nfa>> StringNfa(const Conj& conj, int* min, int* max, bool* empty);

  const ojson& root_;
  const std::string prefix_;  // of the rules' names
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> refs_;
  std::deque<ojson> owned_;  // schemas made here (a member without its enum), kept in place
};

}  // namespace promptcache::grammar_internal
