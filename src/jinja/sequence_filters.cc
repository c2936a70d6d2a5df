// Jinja2's filters over sequences: select/reject(attr), map, sort, dictsort, unique, min/max and
// sum, which filters.cc registers by name. They look items up by attribute path, compare by sort
// key and sort stably, as Jinja2 does.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "jinja/builtins.h"
#include "jinja/code_points.h"
#include "jinja/filter_helpers.h"
#include "jinja/interpreter.h"
#include "jinja/str_ops.h"

namespace promptcache::jinja {

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then index 0, each like v[part].
Result<Value> AttrPath(Interpreter& in, Value v, const Value& attribute) {
  if (!attribute.is_string()) return in.GetItem(v, attribute);
  const std::string& path = attribute.text().str();
  size_t at = 0;
  while (true) {
    const size_t dot = path.find('.', at);
    const std::string part = path.substr(at, dot - at);
    Value key = Value::Trusted(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
          return IsDigit(static_cast<unsigned char>(c));
        })) {
      key = Value::Int(std::strtoll(part.substr(0, 18).c_str(), nullptr, 10));
    }
    PC_ASSIGN_OR_RETURN(v, in.GetItem(v, key));
    if (dot == std::string::npos) return v;
    at = dot + 1;
  }
}

namespace {

// The key filters sort and compare by: the attribute (if given), lower-cased unless
// case_sensitive.
Result<Value> SortKey(Interpreter& in, const Value& item, const std::optional<Value>& attribute,
                      bool case_sensitive) {
  Value key = item;
  if (attribute.has_value() && !attribute->is_none()) {
    PC_ASSIGN_OR_RETURN(key, AttrPath(in, item, *attribute));
  }
  if (!case_sensitive && key.is_string()) {
    return Value::String(ChangeCase(key.text(), CaseChange::kLower));
  }
  return key;
}

// Sorts `items` by `keys` (parallel), stably, as Python's sorted().
Status SortByKeys(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    Result<int> c = reverse ? Compare(keys[b], keys[a], "<") : Compare(keys[a], keys[b], "<");
    if (!c.ok() && error.ok()) error = c.status();
    return c.ok() && *c < 0;
  });
  PC_RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
  return Status::Ok();
}

}  // namespace

// ---- Filters over sequences ------------------------------------------------------------------

Result<Value> SelectFilter(Interpreter& in, const Value& v, CallArgs args, bool attr, bool keep) {
  std::vector<Value> items;
  if (Truthy(v)) {  // Jinja2 iterates only a true value: none selects nothing
    PC_ASSIGN_OR_RETURN(items, in.Iterate(v));
  }
  std::vector<Value>& pos = args.positional;
  std::optional<Value> attribute;
  if (attr) {
    if (pos.empty()) return InvalidArgument("selectattr/rejectattr need an attribute name");
    attribute = pos.front();
    pos.erase(pos.begin());
  }
  std::string test;
  if (!pos.empty()) {
    if (!pos.front().is_string()) return InvalidArgument("the test name must be a string");
    test = pos.front().text().str();
    pos.erase(pos.begin());
    if (!items.empty() && !IsTestName(test)) {
      return InvalidArgument("no test named '" + test + "'");
    }
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    PC_RETURN_IF_ERROR(in.Charge(1));
    Value subject = item;
    if (attribute) {
      PC_ASSIGN_OR_RETURN(subject, AttrPath(in, item, *attribute));
    }
    bool pass;
    if (test.empty()) {
      pass = Truthy(subject);
    } else {
      PC_ASSIGN_OR_RETURN(pass, ApplyTest(in, test, subject, args));
    }
    if (pass == keep) out.push_back(item);
  }
  return in.NewGenerator(std::move(out));
}

Result<Value> MapFilter(Interpreter& in, const Value& v, CallArgs args) {
  std::vector<Value> items;
  if (Truthy(v)) {  // as select: a false value maps to nothing
    PC_ASSIGN_OR_RETURN(items, in.Iterate(v));
  }
  std::vector<Value> out;
  out.reserve(items.size());
  if (args.positional.empty()) {
    std::optional<Value> attribute, dflt;
    for (auto& [key, value] : args.keyword) {
      if (key == "attribute") {
        attribute = value;
      } else if (key == "default") {
        dflt = value;
      } else {
        return InvalidArgument("Unexpected keyword argument '" + key + "'");
      }
    }
    if (!attribute) return InvalidArgument("map requires a filter argument");
    for (const Value& item : items) {
      PC_ASSIGN_OR_RETURN(Value x, AttrPath(in, item, *attribute));
      out.push_back(x.is_undefined() && dflt ? *dflt : std::move(x));
    }
    return in.NewGenerator(std::move(out));
  }
  if (!args.positional.front().is_string()) return InvalidArgument("map needs a filter name");
  const std::string name = args.positional.front().text().str();
  args.positional.erase(args.positional.begin());
  // Jinja2 looks the filter up when it maps an item: with none, an unknown name is no error.
  if (!items.empty() && !IsFilterName(name)) {
    return InvalidArgument("no filter named '" + name + "'");
  }
  for (const Value& item : items) {
    PC_RETURN_IF_ERROR(in.Charge(1));
    PC_ASSIGN_OR_RETURN(Value x, ApplyFilter(in, name, item, args));
    out.push_back(std::move(x));
  }
  return in.NewGenerator(std::move(out));
}

Result<Value> SortFilter(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(
      Args a, BindArgs("sort", std::move(args), {"reverse", "case_sensitive", "attribute"}));
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> keys;
  for (const Value& item : items) {
    PC_ASSIGN_OR_RETURN(Value k, SortKey(in, item, a[2], Flag(a[1], false)));
    keys.push_back(std::move(k));
  }
  PC_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(items.size())));
  PC_RETURN_IF_ERROR(SortByKeys(items, keys, Flag(a[0], false)));
  return in.NewList(std::move(items));
}

Result<Value> DictSortFilter(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a,
                      BindArgs("dictsort", std::move(args), {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return InvalidArgument("dictsort needs a mapping, not " + TypeName(v));
  std::string by = "key";
  if (a[1].has_value()) {
    if (!a[1]->is_string()) return InvalidArgument("You can only sort by either 'key' or 'value'");
    by = a[1]->text().str();
  }
  if (by != "key" && by != "value") {
    return InvalidArgument("You can only sort by either 'key' or 'value'");
  }
  std::vector<Value> items, keys;
  for (const auto& [key, value] : v.dict().entries) {
    PC_ASSIGN_OR_RETURN(Value pair, in.NewList({key, value}, /*tuple=*/true));
    items.push_back(std::move(pair));
    PC_ASSIGN_OR_RETURN(Value k,
                        SortKey(in, by == "key" ? key : value, std::nullopt, Flag(a[0], false)));
    keys.push_back(std::move(k));
  }
  PC_RETURN_IF_ERROR(SortByKeys(items, keys, Flag(a[2], false)));
  return in.NewList(std::move(items));
}

Result<Value> UniqueFilter(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("unique", std::move(args), {"case_sensitive", "attribute"}));
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> out, seen;
  for (const Value& item : items) {
    PC_ASSIGN_OR_RETURN(Value key, SortKey(in, item, a[1], Flag(a[0], false)));
    if ((key.is_list() && !key.is_tuple()) || key.is_dict()) {
      return InvalidArgument("unhashable type: '" + TypeName(key) + "'");
    }
    PC_RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(seen.size() / 64 + 1)));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) {
      continue;
    }
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return in.NewGenerator(std::move(out));
}

Result<Value> MinMaxFilter(Interpreter& in, const Value& v, CallArgs args, bool max) {
  PC_ASSIGN_OR_RETURN(
      Args a, BindArgs(max ? "max" : "min", std::move(args), {"case_sensitive", "attribute"}));
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  PC_ASSIGN_OR_RETURN(Value best_key, SortKey(in, items[0], a[1], Flag(a[0], false)));
  for (size_t i = 1; i < items.size(); ++i) {
    PC_ASSIGN_OR_RETURN(Value key, SortKey(in, items[i], a[1], Flag(a[0], false)));
    PC_ASSIGN_OR_RETURN(int c, Compare(key, best_key, max ? ">" : "<"));
    if (c != 2 && (max ? c > 0 : c < 0)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Result<Value> SumFilter(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("sum", std::move(args), {"attribute", "start"}));
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  Value total = a[1].value_or(Value::Int(0));
  for (const Value& item : items) {
    Value x = item;
    if (a[0].has_value() && !a[0]->is_none()) {
      PC_ASSIGN_OR_RETURN(x, AttrPath(in, item, *a[0]));
    }
    PC_ASSIGN_OR_RETURN(total, in.Binary("+", total, x));
  }
  return total;
}

}  // namespace promptcache::jinja
