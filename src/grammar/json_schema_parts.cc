// The JSON Schema compiler's types (json_schema_internal.h): for one conjunction of schemas,
// objects (properties of every member, required ones, additional properties and their names),
// arrays (prefix items, items, counts), strings (an automaton of pattern, format and lengths:
// regex_nfa.h), numbers (bounds: json_number.h), and enum/const literals.
#include <algorithm>
#include <cmath>
#include <deque>

#include "grammar/grammar.h"
#include "grammar/json_number.h"
#include "grammar/json_schema_internal.h"

namespace promptcache::grammar_internal {
namespace {

std::string Repeat(const std::string& item, int min, int max) {
  if (max < 0) return "(" + item + "){" + std::to_string(min) + ",}";
  return "(" + item + "){" + std::to_string(min) + "," + std::to_string(max) + "}";
}

// The JSON type of a value ("integer" for numbers without a fraction).
std::string TypeOf(const ojson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d ? "integer" : "number";
}

}  // namespace

Result<int> Converter::Bound(const Part& p, const char* key) const {
  auto it = p.s->find(key);
  if (it == p.s->end()) return -1;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxBound) {
    return Invalid(p.where, key, "must be an integer from 0 to " + std::to_string(kMaxBound));
  }
  return static_cast<int>(it->get<int64_t>());
}

std::set<std::string> Converter::InferTypes(const Conj& conj) {
  static const std::vector<std::pair<std::string, std::vector<const char*>>> kGroups = {
      {"object", {"properties", "required", "additionalProperties", "propertyNames"}},
      {"array", {"items", "prefixItems", "additionalItems", "minItems", "maxItems"}},
      {"string", {"minLength", "maxLength", "pattern", "format"}},
      {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}}};
  std::set<std::string> out;
  for (const Part& p : conj) {
    for (const auto& [type, keys] : kGroups) {
      for (const char* k : keys) {
        if (p.s->contains(k)) out.insert(type);
      }
    }
  }
  return out;
}

bool Converter::HasLiterals(const Conj& conj) {
  for (const Part& p : conj) {
    if (p.s->contains("enum") || p.s->contains("const")) return true;
  }
  return false;
}

Result<std::string> Converter::Literals(const Conj& conj, const std::set<std::string>& types,
                                        bool typed, int depth) {
  // The values every member's enum/const lists.
  std::vector<ojson> values;
  bool first = true, other_keywords = false;
  for (const Part& p : conj) {
    std::vector<ojson> mine;
    if (auto it = p.s->find("const"); it != p.s->end()) mine.push_back(*it);
    if (auto it = p.s->find("enum"); it != p.s->end()) {
      if (!it->is_array() || it->empty())
        return Invalid(p.where, "enum", "must be a non-empty array");
      std::vector<ojson> in_enum;
      for (const ojson& v : *it) {
        if (mine.empty() || mine[0] == v) in_enum.push_back(v);
      }
      mine = in_enum;
    }
    for (const auto& [key, value] : p.s->items()) {
      static const std::set<std::string> kNeutral = {
          "enum", "const", "type", "allOf", "$ref", "anyOf", "oneOf", "$defs", "definitions"};
      if (!kNeutral.count(key) && !SchemaAnnotations().count(key)) other_keywords = true;
    }
    if (!p.s->contains("const") && !p.s->contains("enum")) continue;
    if (first) {
      values = mine;
      first = false;
    } else {
      std::vector<ojson> both;
      for (const ojson& v : values) {
        if (std::find(mine.begin(), mine.end(), v) != mine.end()) both.push_back(v);
      }
      values = both;
    }
  }
  // Of the JSON types allowed.
  std::vector<ojson> kept;
  for (const ojson& v : values) {
    const std::string t = TypeOf(v);
    if (!typed || types.count(t) || (t == "integer" && types.count("number"))) kept.push_back(v);
  }
  if (other_keywords && !kept.empty()) {
    // The other keywords decide through the grammar they compile to: each value is fed to it.
    Conj rest;
    for (const Part& p : conj) {
      ojson c = *p.s;
      c.erase("enum");
      c.erase("const");
      owned_.push_back(std::move(c));
      rest.push_back({&owned_.back(), p.where, p.done_alternatives});
    }
    PC_ASSIGN_OR_RETURN(std::string expr, Body(rest, depth));
    std::string text = "root ::= " + (expr.empty() ? std::string("[^\\x00-\\U0010FFFF]") : expr) +
                       "\n" + JsonSharedGbnf();
    // A reference still being built (the values are inside its recursion) matches nothing
    // here: such a value is left out rather than guessed.
    for (const auto& [name, body] : rules_) {
      text += name + " ::= " + (body.empty() ? std::string("[^\\x00-\\U0010FFFF]") : body) + "\n";
    }
    auto g = Grammar::Parse(text);
    if (!g.ok()) return g.status();
    std::vector<ojson> valid;
    for (const ojson& v : kept) {
      GrammarState st(*g);
      if (st.Advance(v.dump()) && st.Complete()) valid.push_back(v);
    }
    kept = valid;
  }
  std::string alts;
  for (const ojson& v : kept) alts += (alts.empty() ? "" : " | ") + GbnfLiteral(v.dump());
  if (kept.size() <= 1) return alts;
  return NewRule(alts);
}

Result<std::unique_ptr<Nfa>> Converter::StringNfa(const Conj& conj, int* min, int* max,
                                                  bool* empty) {
  *min = 0;
  *max = -1;
  *empty = false;
  std::unique_ptr<Nfa> nfa;
  std::string where;
  auto join = [&](const Nfa& n, const std::string& w) -> Status {
    if (!nfa) {
      nfa = std::make_unique<Nfa>(n);
    } else {
      PC_ASSIGN_OR_RETURN(Nfa both, IntersectNfa(*nfa, n, "'" + where + "' and '" + w + "'"));
      *nfa = std::move(both);
    }
    where = w;
    return Status::Ok();
  };
  for (const Part& p : conj) {
    PC_ASSIGN_OR_RETURN(int lo, Bound(p, "minLength"));
    PC_ASSIGN_OR_RETURN(int hi, Bound(p, "maxLength"));
    *min = std::max(*min, lo);
    if (hi >= 0) *max = *max < 0 ? hi : std::min(*max, hi);
    if (auto it = p.s->find("pattern"); it != p.s->end()) {
      if (!it->is_string()) return Invalid(p.where, "pattern", "must be a string");
      Result<Nfa> n = PatternNfa(it->get<std::string>());
      if (!n.ok()) return Invalid(p.where, "pattern", "is refused: " + n.status().message());
      PC_RETURN_IF_ERROR(join(*n, At(p.where, "pattern")));
    }
    if (auto it = p.s->find("format"); it != p.s->end()) {
      if (!it->is_string()) return Invalid(p.where, "format", "must be a string");
      Result<const Nfa*> n = FormatNfa(it->get<std::string>());
      if (!n.ok()) return Invalid(p.where, "format", "is refused: " + n.status().message());
      PC_RETURN_IF_ERROR(join(**n, At(p.where, "format")));
    }
  }
  if (*max >= 0 && *max < *min) {
    *empty = true;
    return nfa;
  }
  if (nfa && (*min > 0 || *max >= 0)) PC_RETURN_IF_ERROR(join(LengthNfa(*min, *max), "maxLength"));
  if (nfa && nfa->Empty()) *empty = true;
  return nfa;
}

Result<std::string> Converter::String(const Conj& conj) {
  int min, max;
  bool empty;
  PC_ASSIGN_OR_RETURN(std::unique_ptr<Nfa> nfa, StringNfa(conj, &min, &max, &empty));
  if (empty) return std::string();
  if (nfa) return NewRule(NfaToJsonString(*nfa, Sink()));
  if (min == 0 && max < 0) return std::string("string");
  return NewRule("\"\\\"\" " + Repeat("char", min, max) + " \"\\\"\"");
}

Result<std::string> Converter::Number(const Conj& conj, bool integer) {
  std::optional<NumberBound> lo, hi;
  for (const Part& p : conj) {
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      auto it = p.s->find(key);
      if (it == p.s->end()) continue;
      const std::string k = key;
      const bool lower = k == "minimum" || k == "exclusiveMinimum";
      if (it->is_boolean()) {  // draft 4: exclusiveMinimum: true makes minimum exclusive
        if (k == "minimum" || k == "maximum") return Invalid(p.where, key, "must be a number");
        continue;
      }
      if (!it->is_number()) return Invalid(p.where, key, "must be a number");
      Result<Decimal> d = Decimal::Parse(it->dump());
      if (!d.ok()) return Invalid(p.where, key, "is refused: " + d.status().message());
      bool exclusive = k[0] == 'e';
      if (!exclusive) {
        auto flag = p.s->find(lower ? "exclusiveMinimum" : "exclusiveMaximum");
        exclusive = flag != p.s->end() && flag->is_boolean() && flag->get<bool>();
      }
      std::optional<NumberBound>& b = lower ? lo : hi;
      const int c = b ? Compare(*d, b->value) : 0;
      if (!b || (lower ? c > 0 : c < 0)) {
        b = NumberBound{*d, exclusive};
      } else if (c == 0) {
        b->exclusive = b->exclusive || exclusive;
      }
    }
  }
  if (!lo && !hi) return std::string(integer ? "integer" : "number");
  const std::string e = NumberRangeGbnf(lo, hi, integer, Sink());
  return e.empty() ? e : NewRule(e);
}

Status Converter::ObjectMembers(const Conj& conj, Conj* name_conj, Conj* extra_values, bool* extras,
                                bool* closed) const {
  for (const Part& p : conj) {
    // Property names: what every member's propertyNames allows (string keywords only).
    if (auto it = p.s->find("propertyNames"); it != p.s->end()) {
      const std::string w = At(p.where, "propertyNames");
      if (!it->is_object()) return Invalid(p.where, "propertyNames", "must be a schema");
      for (const auto& [key, v] : it->items()) {
        static const std::set<std::string> kOk = {"type",      "pattern", "format",     "minLength",
                                                  "maxLength", "title",   "description"};
        if (!kOk.count(key)) return Unsupported(w, key);
        if (key == "type" && v != "string") return Unsupported(w, "type");
      }
      name_conj->push_back({&*it, w});
    }
    if (auto it = p.s->find("additionalProperties"); it != p.s->end()) {
      if (it->is_boolean()) {
        *(it->get<bool>() ? extras : closed) = true;
      } else if (it->is_object()) {
        *extras = true;
        extra_values->push_back({&*it, At(p.where, "additionalProperties")});
      } else {
        return Invalid(p.where, "additionalProperties", "must be a boolean or a schema");
      }
    }
  }
  return Status::Ok();
}

// One more property: a name not listed (and allowed by propertyNames), its value valid against
// the additionalProperties schemas. "" when there is none.
Result<std::string> Converter::ExtraPair(const Conj& values, const std::vector<std::string>& names,
                                         const Nfa* name_nfa, int depth) {
  std::string v = "value";
  if (!values.empty()) {
    PC_ASSIGN_OR_RETURN(v, Rule(values, depth + 1));
  }
  Nfa keys = ExcludeNfa(names);
  if (name_nfa) {
    PC_ASSIGN_OR_RETURN(keys, IntersectNfa(keys, *name_nfa, "propertyNames"));
  }
  if (v.empty() || keys.Empty()) return std::string();
  return NewRule(NfaToJsonString(keys, Sink()) + " ws \":\" ws " + v + " ws");
}

Result<std::string> Converter::Object(const Conj& conj, int depth) {
  std::vector<std::string> names;
  std::set<std::string> required;
  PC_RETURN_IF_ERROR(ObjectNames(conj, &names, &required));
  Conj name_conj, extra_values;
  bool extras = false, closed = false;
  PC_RETURN_IF_ERROR(ObjectMembers(conj, &name_conj, &extra_values, &extras, &closed));
  int nmin = 0, nmax = -1;
  bool no_names = false;
  std::unique_ptr<Nfa> name_nfa;
  if (!name_conj.empty()) {
    PC_ASSIGN_OR_RETURN(name_nfa, StringNfa(name_conj, &nmin, &nmax, &no_names));
    if (!name_nfa && !no_names) name_nfa = std::make_unique<Nfa>(LengthNfa(nmin, nmax));
  }
  std::vector<std::string> kv;
  std::vector<bool> req;
  for (const std::string& name : names) {
    const bool allowed = !no_names && (!name_nfa || name_nfa->Matches(name));
    PC_ASSIGN_OR_RETURN(const std::string v, PropertyValue(conj, name, allowed, depth));
    if (v.empty()) {
      if (required.count(name)) return std::string();
      continue;
    }
    kv.push_back(GbnfLiteral(ojson(name).dump()) + " ws \":\" ws " + v + " ws");
    req.push_back(required.count(name) > 0);
  }
  // Properties beyond the listed ones: where a member asks for them (true or a schema) and none
  // closes the object.
  std::string end_rest = "\"\"", end_first = "\"\"";
  if (extras && !closed && !no_names) {
    PC_ASSIGN_OR_RETURN(const std::string pair,
                        ExtraPair(extra_values, names, name_nfa.get(), depth));
    if (!pair.empty()) {
      end_rest = NewRule("(\",\" ws " + pair + ")*");
      end_first = "(" + pair + " " + end_rest + ")?";
    }
  }
  return ObjectRule(kv, req, end_rest, end_first);
}

Status Converter::ObjectNames(const Conj& conj, std::vector<std::string>* names,
                              std::set<std::string>* required) const {
  for (const Part& p : conj) {
    if (auto it = p.s->find("properties"); it != p.s->end()) {
      if (!it->is_object()) return Invalid(p.where, "properties", "must be an object");
      for (const auto& [name, sub] : it->items()) {
        if (std::find(names->begin(), names->end(), name) == names->end()) names->push_back(name);
      }
    }
    if (auto it = p.s->find("required"); it != p.s->end()) {
      if (!it->is_array()) return Invalid(p.where, "required", "must be an array of names");
      for (const ojson& r : *it) {
        if (!r.is_string()) return Invalid(p.where, "required", "must be an array of names");
        required->insert(r.get<std::string>());
      }
    }
  }
  for (const std::string& r : *required) {
    if (std::find(names->begin(), names->end(), r) == names->end()) names->push_back(r);
  }
  return Status::Ok();
}

Result<std::string> Converter::PropertyValue(const Conj& conj, const std::string& name,
                                             bool allowed, int depth) {
  Conj values;
  for (const Part& p : conj) {
    auto props = p.s->find("properties");
    auto add = p.s->find("additionalProperties");
    if (props != p.s->end() && props->contains(name)) {
      values.push_back({&(*props)[name], At(p.where, "properties." + name)});
    } else if (add != p.s->end() && add->is_boolean() && !add->get<bool>()) {
      allowed = false;
    } else if (add != p.s->end() && add->is_object()) {
      values.push_back({&*add, At(p.where, "additionalProperties")});
    }
  }
  std::string v;
  if (allowed) {
    if (values.empty()) {
      v = "value";
    } else {
      PC_ASSIGN_OR_RETURN(v, Rule(values, depth + 1));
    }
  }
  return v;
}

std::string Converter::ObjectRule(const std::vector<std::string>& kv, const std::vector<bool>& req,
                                  const std::string& end_rest, const std::string& end_first) {
  // rest[i]: properties i.. after at least one; first[i]: properties i.. before any.
  const size_t n = kv.size();
  std::vector<std::string> rest(n + 1), first(n + 1);
  rest[n] = end_rest;
  first[n] = end_first;
  for (size_t i = n; i-- > 0;) {
    const std::string with = "\",\" ws " + kv[i] + " " + rest[i + 1];
    rest[i] = NewRule(req[i] ? with : "(\",\" ws " + kv[i] + ")? " + rest[i + 1]);
    const std::string start = kv[i] + " " + rest[i + 1];
    first[i] = NewRule(req[i] ? start : start + " | " + first[i + 1]);
  }
  if (n == 0 && end_first == "\"\"") return NewRule("\"{\" ws \"}\"");
  return NewRule("\"{\" ws " + first[0] + " \"}\"");
}

// An array schema's members together: each one's tuple (prefixItems, or draft 7's items array)
// and what it says of the later items, and the bounds they all allow.
struct ArrayPlan {
  struct Shape {
    const ojson* prefix = nullptr;  // an array of schemas
    const ojson* rest = nullptr;    // a schema or a boolean; null: any
    std::string where, rest_where;
  };
  std::vector<Shape> shapes;
  int min = 0, max = -1;  // max -1: none
  size_t k = 0;           // the longest tuple

  void Cap(int n) { max = max < 0 ? n : std::min(max, n); }
  // The schemas of position i (i >= k: any later position).
  Converter::Conj At(size_t i) const {
    Converter::Conj c;
    for (const Shape& s : shapes) {
      if (s.prefix && i < s.prefix->size()) {
        c.push_back(
            {&(*s.prefix)[i], Converter::At(s.where, "prefixItems[" + std::to_string(i) + "]")});
      } else if (s.rest && s.rest->is_object()) {
        c.push_back({s.rest, s.rest_where});
      }
    }
    return c;
  }
};

Result<ArrayPlan> Converter::ReadArray(const Conj& conj) const {
  ArrayPlan plan;
  for (const Part& p : conj) {
    ArrayPlan::Shape s;
    s.where = p.where;
    auto items = p.s->find("items");
    auto prefix = p.s->find("prefixItems");
    if (prefix != p.s->end()) {
      if (!prefix->is_array()) return Invalid(p.where, "prefixItems", "must be an array");
      s.prefix = &*prefix;
    }
    if (items != p.s->end() && items->is_array()) {  // draft 7 tuples: items [...], additionalItems
      if (s.prefix) return Invalid(p.where, "items", "must be a schema beside prefixItems");
      s.prefix = &*items;
      auto more = p.s->find("additionalItems");
      if (more != p.s->end()) s.rest = &*more, s.rest_where = At(p.where, "additionalItems");
    } else if (items != p.s->end()) {
      s.rest = &*items;
      s.rest_where = At(p.where, "items");
    }
    if (s.rest && !s.rest->is_boolean() && !s.rest->is_object()) {
      return Invalid(p.where, "items", "must be a schema");
    }
    if (s.prefix) plan.k = std::max(plan.k, s.prefix->size());
    if (s.rest && s.rest->is_boolean() && !s.rest->get<bool>()) {
      plan.Cap(static_cast<int>(s.prefix ? s.prefix->size() : 0));
    }
    PC_ASSIGN_OR_RETURN(int lo, Bound(p, "minItems"));
    PC_ASSIGN_OR_RETURN(int hi, Bound(p, "maxItems"));
    plan.min = std::max(plan.min, lo);
    if (hi >= 0) plan.Cap(hi);
    plan.shapes.push_back(s);
  }
  return plan;
}

Result<std::string> Converter::Array(const Conj& conj, int depth) {
  PC_ASSIGN_OR_RETURN(ArrayPlan plan, ReadArray(conj));
  return ArrayRule(plan, depth);
}

Result<std::string> Converter::ArrayRule(ArrayPlan& plan, int depth) {
  const int min = plan.min;
  const int& max = plan.max;  // lowered by the items no value can match
  const size_t k = plan.k;
  std::vector<std::string> item;
  for (size_t i = 0; i < k && (max < 0 || static_cast<int>(i) < max); ++i) {
    Conj c = plan.At(i);
    std::string r = "value";
    if (!c.empty()) {
      PC_ASSIGN_OR_RETURN(r, Rule(c, depth + 1));
    }
    if (r.empty()) {
      plan.Cap(static_cast<int>(i));
      break;
    }
    item.push_back(r);
  }
  std::string later = "value";
  if (max < 0 || static_cast<int>(k) < max) {
    Conj c = plan.At(k);
    if (!c.empty()) {
      PC_ASSIGN_OR_RETURN(later, Rule(c, depth + 1));
    }
    if (later.empty()) plan.Cap(static_cast<int>(k));
  }
  if (max >= 0 && max < min) return std::string();
  if (max == 0) return NewRule("\"[\" ws \"]\"");
  // The items after the first: the explicit ones (each optional from minItems on), then the
  // later ones' repeat.
  const int e = static_cast<int>(item.size());
  auto tail = [&](int t) -> std::string {
    if (max >= 0 && max <= t) return "";
    return Repeat("\",\" ws " + later + " ws", std::max(0, min - t), max < 0 ? -1 : max - t);
  };
  std::string after = tail(std::max(e, 1));
  for (int i = e - 1; i >= 1; --i) {
    const std::string inner = "\",\" ws " + item[i] + " ws" + (after.empty() ? "" : " " + after);
    after = NewRule(i < min ? inner : "(" + inner + ")?");
  }
  const std::string head = e > 0 ? item[0] : later;
  const std::string list = head + " ws" + (after.empty() ? "" : " " + after);
  return NewRule("\"[\" ws " + (min > 0 ? list : "(" + list + ")?") + " \"]\"");
}

}  // namespace promptcache::grammar_internal
