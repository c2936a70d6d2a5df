// The built-in filters, tests, methods and global functions of the interpreter: what Jinja2
// provides, what Python's str, dict and list methods do when a template calls them, and the
// globals Hugging Face adds for chat templates (raise_exception, strftime_now; tojson with its
// json.dumps semantics). Each reads its arguments the way the Python function would (positional
// or by keyword, with the same defaults).
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "jinja/value.h"

namespace promptcache::jinja {

// Filters and tests a template may name (checked when parsing, as Jinja2 does).
bool IsFilterName(std::string_view name);
bool IsTestName(std::string_view name);

Result<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& input,
                          CallArgs args);
Result<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& input, CallArgs args);

// What `self.name` is when self is a str, list, tuple or dict: a bound method, an undefined value
// for a method that would mutate (Jinja2's immutable sandbox refuses them), or nullopt when the
// type has no such attribute.
std::optional<Value> FindMethod(const Value& self, std::string_view name);

// The global functions: range, dict, namespace, cycler, joiner, raise_exception, strftime_now.
void AddGlobalFunctions(std::unordered_map<std::string, Value>& globals);

// Python-style argument binding for a built-in `fn(names...)`: the values by parameter, nullopt
// where an optional parameter was not given. InvalidArgument for too many positional arguments,
// an unknown or repeated keyword, or a missing required parameter (the first `required` ones).
Result<std::vector<std::optional<Value>>> BindArgs(std::string_view fn, CallArgs args,
                                                   std::initializer_list<std::string_view> names,
                                                   size_t required = 0);

}  // namespace promptcache::jinja
