// The values a Jinja template computes with, modelled on the Python objects Jinja2 hands around:
// Undefined, None, bool, int, float, str (as Text, with its user-written marks), list, tuple, dict
// (insertion-ordered), and objects (namespace(), loop, cycler) and callables (macros, built-in
// functions, bound string/dict methods). Comparisons, truth values, str() and repr() follow
// Python, because templates print them (a dict printed with `|string` shows Python's repr).
//
// Lists and dicts are immutable, as in Jinja2's ImmutableSandboxedEnvironment, so they are
// shared, not copied. Their nesting depth is bounded when they are built (kMaxNesting), so no
// recursive walk over a value can exhaust the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "jinja/text.h"

namespace promptcache::jinja {

class Interpreter;
class Object;
class Callable;
struct ListData;
struct DictData;

// Deepest nesting of lists and dicts a value may have.
constexpr int kMaxNesting = 256;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // also tuples
    kDict,
    kObject,
    kCallable,
  };

  Value() : kind_(Kind::kUndefined) {}
  // `hint` is the error raised when the undefined value is used ("'x' is undefined").
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(Text text);
  static Value String(std::shared_ptr<const Text> text);
  static Value Trusted(std::string_view s) { return String(Text(std::string(s))); }
  // InvalidArgument when the result would nest deeper than kMaxNesting.
  static Result<Value> List(std::vector<Value> items, bool tuple = false);
  // A Python range object: a sequence of ints that prints as `repr` ("range(0, 3)") and has no
  // JSON form.
  static Value Range(std::vector<Value> items, std::string repr);
  static Result<Value> Dict(DictData dict);
  static Value MakeObject(std::shared_ptr<Object> object);
  static Value MakeCallable(std::shared_ptr<const Callable> callable);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  // bool, int or float (Python's bool is an int).
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  // bool or int.
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }

  bool boolean() const { return b_; }
  // For bool and int.
  int64_t integer() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  // For any number.
  double number() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(integer()); }
  const Text& text() const;
  std::shared_ptr<const Text> text_ptr() const;
  const std::vector<Value>& items() const;
  bool is_tuple() const { return kind_ == Kind::kList && b_; }
  bool is_range() const;
  const std::string& range_repr() const;
  const DictData& dict() const;
  Object* object() const;
  std::shared_ptr<Object> object_ptr() const;
  const Callable* callable() const;
  const std::string& undefined_hint() const;
  // Lists and dicts: 1 + the nesting of their items; others 0.
  int nesting() const;
  // Bytes this value holds directly (string bytes, list/dict slots), for the render's budget.
  size_t Footprint() const;

 private:
  // The factories' constructors: a kind with its payload.
  Value(Kind kind, bool b) : kind_(kind), b_(b) {}
  Value(Kind kind, int64_t i) : kind_(kind), i_(i) {}
  Value(Kind kind, double f) : kind_(kind), f_(f) {}
  Value(Kind kind, std::shared_ptr<void> ptr, bool b = false)
      : kind_(kind), b_(b), ptr_(std::move(ptr)) {}

  Kind kind_;
  bool b_ = false;  // kBool: the value; kList: a tuple
  union {
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<void> ptr_;
};

struct ListData {
  std::vector<Value> items;
  int nesting = 1;
  std::string range_repr;  // a range object's repr; empty for lists and tuples
};

// An insertion-ordered dict. String keys are indexed; other keys (numbers, None, tuples) are
// compared one by one with Python's ==.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  int nesting = 1;

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Replaces the value of an equal key, or appends.
  void Set(Value key, Value value);

 private:
  std::unordered_map<std::string, size_t> index_;
};

// A mutable object with attributes (namespace(), loop, cycler()).
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string_view TypeName() const = 0;
  // An undefined value when there is no such attribute.
  virtual Value GetAttr(std::string_view name) = 0;
  // Only namespaces accept assignments.
  virtual Status SetAttr(std::string_view name, Value value);
  // Python's repr, e.g. "<Namespace {'a': 1}>".
  virtual Status AppendRepr(TextBuilder& out, int depth) const;
  // Drops every value it holds, to break reference cycles when a render ends.
  virtual void Clear() {}
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string_view name() const = 0;
  virtual Result<Value> Call(Interpreter& in, CallArgs args) const = 0;
  // "<Macro 'm'>"-like text for str().
  virtual std::string Repr() const;
};

// Python's type(v).__name__: "str", "int", "dict", "NoneType", "Undefined", ...
std::string TypeName(const Value& v);
// Python's bool(v).
bool Truthy(const Value& v);
// Python's ==. Undefined equals only Undefined.
bool Equal(const Value& a, const Value& b);
// Python's <, <=, >, >= as a three-way result (<0, 0, >0); InvalidArgument for types Python
// cannot order ("'<' not supported between instances of 'str' and 'int'").
Result<int> Compare(const Value& a, const Value& b, std::string_view op);
// Python's repr of a float ("1.0", "1e+16", "0.1").
std::string FloatRepr(double f);
// Python's str(v) and repr(v), marks kept. Undefined prints as "" (Jinja2's default Undefined).
Status AppendStr(const Value& v, TextBuilder& out);
Status AppendRepr(const Value& v, TextBuilder& out, int depth = 0);
// str(v) as a Text, capped at `cap` bytes (ResourceExhausted past it).
Result<Text> ToText(const Value& v, size_t cap);

}  // namespace promptcache::jinja
