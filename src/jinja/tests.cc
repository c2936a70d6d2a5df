// Jinja2's built-in tests (`x is defined`, `x is string`, `x is equalto y`, ...).
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/code_points.h"

namespace promptcache::jinja {
namespace {

using TestFn = Result<bool> (*)(Interpreter&, const Value&, const std::vector<Value>&);

Result<bool> Defined(Interpreter&, const Value& v, const std::vector<Value>&) {
  return !v.is_undefined();
}
Result<bool> IsUndefined(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_undefined();
}
Result<bool> None(Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_none(); }
Result<bool> Boolean(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_bool();
}
Result<bool> False(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_bool() && !v.boolean();
}
Result<bool> True(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_bool() && v.boolean();
}
Result<bool> Integer(Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_int(); }
Result<bool> Float(Interpreter&, const Value& v, const std::vector<Value>&) { return v.is_float(); }
Result<bool> Number(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_number();
}
Result<bool> String(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string();
}
Result<bool> Mapping(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_dict();
}
// Python: len(v) and v.__getitem__ exist (Undefined has both).
Result<bool> Sequence(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
Result<bool> Iterable(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() ||
         (v.is_object() &&
          (v.object()->TypeName() == "LoopContext" || v.object()->TypeName() == "generator"));
}
// Undefined is callable too: calling it raises.
Result<bool> IsCallable(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_callable() || v.is_undefined();
}
Result<bool> Escaped(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() && v.text().markup();
}

Result<bool> CaseTest(const Value& v, bool upper) {
  if (v.is_undefined()) return false;
  TextBuilder out(1 << 20);
  PC_RETURN_IF_ERROR(AppendStr(v, out));
  const std::string s = out.Finish().str();
  bool cased = false;
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    if (upper ? IsLower(c) : IsUpper(c)) return false;
    cased = cased || (upper ? IsUpper(c) : IsLower(c));
  }
  return cased;
}
Result<bool> Lower(Interpreter&, const Value& v, const std::vector<Value>&) {
  return CaseTest(v, false);
}
Result<bool> Upper(Interpreter&, const Value& v, const std::vector<Value>&) {
  return CaseTest(v, true);
}

Result<Value> Mod(Interpreter& in, const Value& v, const Value& by) {
  return in.Binary("%", v, by);
}

Result<bool> Odd(Interpreter& in, const Value& v, const std::vector<Value>&) {
  PC_ASSIGN_OR_RETURN(Value m, Mod(in, v, Value::Int(2)));
  return Equal(m, Value::Int(1));
}
Result<bool> Even(Interpreter& in, const Value& v, const std::vector<Value>&) {
  PC_ASSIGN_OR_RETURN(Value m, Mod(in, v, Value::Int(2)));
  return Equal(m, Value::Int(0));
}
Result<bool> DivisibleBy(Interpreter& in, const Value& v, const std::vector<Value>& a) {
  PC_ASSIGN_OR_RETURN(Value m, Mod(in, v, a[0]));
  return Equal(m, Value::Int(0));
}

Result<bool> Eq(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return Equal(v, a[0]);
}
Result<bool> Ne(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return !Equal(v, a[0]);
}
template <int kSign, bool kOrEqual>
Result<bool> Order(Interpreter&, const Value& v, const std::vector<Value>& a) {
  PC_ASSIGN_OR_RETURN(int c, Compare(v, a[0], kSign < 0 ? "<" : ">"));
  if (c == 2) return false;
  return c == kSign || (kOrEqual && c == 0);
}
Result<bool> In(Interpreter& in, const Value& v, const std::vector<Value>& a) {
  return in.Contains(a[0], v);
}

// Python's `is`: the same object. Values here are not objects, so: None and booleans by value,
// small integers by value (CPython caches them), containers and strings by identity.
Result<bool> SameAs(Interpreter&, const Value& v, const std::vector<Value>& a) {
  const Value& o = a[0];
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined:
      return v.is_none();
    case Value::Kind::kBool:
      return v.boolean() == o.boolean();
    case Value::Kind::kInt:
      return v.integer() == o.integer() && v.integer() >= -5 && v.integer() <= 256;
    case Value::Kind::kString:
      return &v.text() == &o.text();
    case Value::Kind::kList:
      return &v.items() == &o.items();
    case Value::Kind::kDict:
      return &v.dict() == &o.dict();
    case Value::Kind::kObject:
      return v.object() == o.object();
    case Value::Kind::kCallable:
      return v.callable() == o.callable();
    default:
      return false;
  }
}

Result<bool> FilterTest(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() && IsFilterName(v.text().str());
}
Result<bool> TestTest(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() && IsTestName(v.text().str());
}

struct TestEntry {
  TestFn fn;
  size_t args;  // required arguments after the tested value
};

const std::unordered_map<std::string_view, TestEntry>& Tests() {
  static const auto* tests = new std::unordered_map<std::string_view, TestEntry>{
      {"defined", {Defined, 0}},
      {"undefined", {IsUndefined, 0}},
      {"none", {None, 0}},
      {"boolean", {Boolean, 0}},
      {"false", {False, 0}},
      {"true", {True, 0}},
      {"integer", {Integer, 0}},
      {"float", {Float, 0}},
      {"number", {Number, 0}},
      {"string", {String, 0}},
      {"mapping", {Mapping, 0}},
      {"sequence", {Sequence, 0}},
      {"iterable", {Iterable, 0}},
      {"callable", {IsCallable, 0}},
      {"escaped", {Escaped, 0}},
      {"lower", {Lower, 0}},
      {"upper", {Upper, 0}},
      {"odd", {Odd, 0}},
      {"even", {Even, 0}},
      {"divisibleby", {DivisibleBy, 1}},
      {"==", {Eq, 1}},
      {"eq", {Eq, 1}},
      {"equalto", {Eq, 1}},
      {"!=", {Ne, 1}},
      {"ne", {Ne, 1}},
      {">", {Order<1, false>, 1}},
      {"gt", {Order<1, false>, 1}},
      {"greaterthan", {Order<1, false>, 1}},
      {">=", {Order<1, true>, 1}},
      {"ge", {Order<1, true>, 1}},
      {"<", {Order<-1, false>, 1}},
      {"lt", {Order<-1, false>, 1}},
      {"lessthan", {Order<-1, false>, 1}},
      {"<=", {Order<-1, true>, 1}},
      {"le", {Order<-1, true>, 1}},
      {"in", {In, 1}},
      {"sameas", {SameAs, 1}},
      {"filter", {FilterTest, 0}},
      {"test", {TestTest, 0}},
  };
  return *tests;
}

}  // namespace

bool IsTestName(std::string_view name) { return Tests().count(name) > 0; }

Result<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& input, CallArgs args) {
  const auto it = Tests().find(name);
  if (it == Tests().end()) return InvalidArgument("no test named '" + std::string(name) + "'");
  if (!args.keyword.empty()) {
    return InvalidArgument("test '" + std::string(name) + "' takes no keyword arguments");
  }
  if (args.positional.size() != it->second.args) {
    return InvalidArgument("test '" + std::string(name) + "' takes " +
                           std::to_string(it->second.args) + " argument(s), " +
                           std::to_string(args.positional.size()) + " given");
  }
  return it->second.fn(in, input, args.positional);
}

}  // namespace promptcache::jinja
