// What the Jinja filters in filters.cc and sequence_filters.cc share: the argument list type, flag
// arguments, Jinja2's attribute paths, and the sequence filters that filters.cc registers by name.
// Internal to the jinja module.
#pragma once

#include <optional>
#include <vector>

#include "core/status.h"
#include "jinja/interpreter.h"
#include "jinja/value.h"

namespace promptcache::jinja {

using Args = std::vector<std::optional<Value>>;

inline bool Flag(const std::optional<Value>& v, bool dflt) {
  return v.has_value() ? Truthy(*v) : dflt;
}

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then index 0, each like v[part].
Result<Value> AttrPath(Interpreter& in, Value v, const Value& attribute);

Result<Value> SelectFilter(Interpreter& in, const Value& v, CallArgs args, bool attr, bool keep);
Result<Value> MapFilter(Interpreter& in, const Value& v, CallArgs args);
Result<Value> SortFilter(Interpreter& in, const Value& v, CallArgs args);
Result<Value> DictSortFilter(Interpreter& in, const Value& v, CallArgs args);
Result<Value> UniqueFilter(Interpreter& in, const Value& v, CallArgs args);
Result<Value> MinMaxFilter(Interpreter& in, const Value& v, CallArgs args, bool max);
Result<Value> SumFilter(Interpreter& in, const Value& v, CallArgs args);

}  // namespace promptcache::jinja
