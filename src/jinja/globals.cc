// Argument binding for builtins and the global functions: range, dict, namespace, cycler, joiner,
// and Hugging Face's raise_exception and strftime_now.
#include <cstring>
#include <ctime>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"

namespace promptcache::jinja {

Result<std::vector<std::optional<Value>>> BindArgs(std::string_view fn, CallArgs args,
                                                   std::initializer_list<std::string_view> names,
                                                   size_t required) {
  std::vector<std::optional<Value>> bound(names.size());
  if (args.positional.size() > names.size()) {
    return InvalidArgument(std::string(fn) + "() takes at most " + std::to_string(names.size()) +
                           " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = std::move(args.positional[i]);
  for (auto& [key, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return InvalidArgument(std::string(fn) + "() got an unexpected keyword argument '" + key +
                             "'");
    }
    auto& slot = bound[it - names.begin()];
    if (slot.has_value()) {
      return InvalidArgument(std::string(fn) + "() got multiple values for argument '" + key + "'");
    }
    slot = std::move(value);
  }
  for (size_t i = 0; i < required; ++i) {
    if (!bound[i].has_value()) {
      return InvalidArgument(std::string(fn) + "() missing required argument '" +
                             std::string(names.begin()[i]) + "'");
    }
  }
  return bound;
}

namespace {

// namespace(): an object whose attributes {% set ns.attr = ... %} may change.
class Namespace : public Object {
 public:
  std::string_view TypeName() const override { return "Namespace"; }
  Value GetAttr(std::string_view name) override {
    for (const auto& [n, v] : attrs_) {
      if (n == name) return v;
    }
    return Value::Undefined("'Namespace object' has no attribute '" + std::string(name) + "'");
  }
  Status SetAttr(std::string_view name, Value value) override {
    for (auto& [n, v] : attrs_) {
      if (n == name) {
        v = std::move(value);
        return Status::Ok();
      }
    }
    attrs_.emplace_back(std::string(name), std::move(value));
    return Status::Ok();
  }
  Status AppendRepr(TextBuilder& out, int depth) const override {
    out.AppendTrusted("<Namespace {");
    for (size_t i = 0; i < attrs_.size(); ++i) {
      out.AppendTrusted((i > 0 ? ", '" : "'") + attrs_[i].first + "': ");
      PC_RETURN_IF_ERROR(jinja::AppendRepr(attrs_[i].second, out, depth + 1));
    }
    out.AppendTrusted("}>");
    return Status::Ok();
  }
  void Clear() override { attrs_.clear(); }

 private:
  std::vector<std::pair<std::string, Value>> attrs_;
};

// cycler(a, b, ...): .next() walks the items round, .current is the next one, .reset() restarts.
class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view TypeName() const override { return "Cycler"; }
  Value GetAttr(std::string_view name) override;
  void Clear() override { items_.clear(); }

 private:
  class Method;
  std::vector<Value> items_;
  size_t pos_ = 0;
};

class Cycler::Method : public Callable {
 public:
  Method(std::shared_ptr<Cycler> c, bool next) : c_(std::move(c)), next_(next) {}
  std::string_view name() const override { return next_ ? "next" : "reset"; }
  Result<Value> Call(Interpreter& in, CallArgs args) const override {
    if (!next_) {
      c_->pos_ = 0;
      return Value::None();
    }
    if (c_->items_.empty()) return InvalidArgument("cycler has no items");
    Value v = c_->items_[c_->pos_];
    c_->pos_ = (c_->pos_ + 1) % c_->items_.size();
    return v;
  }

 private:
  std::shared_ptr<Cycler> c_;
  bool next_;
};

Value Cycler::GetAttr(std::string_view name) {
  if (name == "current" && !items_.empty()) return items_[pos_];
  if (name == "next" || name == "reset") {
    return Value::MakeCallable(std::make_shared<Method>(shared_from_this(), name == "next"));
  }
  return Value::Undefined("'Cycler object' has no attribute '" + std::string(name) + "'");
}

// joiner(sep): "" the first time it is called, `sep` afterwards.
class Joiner : public Callable {
 public:
  explicit Joiner(Value sep) : sep_(std::move(sep)) {}
  std::string_view name() const override { return "joiner"; }
  Result<Value> Call(Interpreter& in, CallArgs args) const override {
    if (!used_) {
      used_ = true;
      return Value::Trusted("");
    }
    return sep_;
  }

 private:
  Value sep_;
  mutable bool used_ = false;
};

// A global function implemented by a plain C++ function.
class Builtin : public Callable {
 public:
  using Fn = Result<Value> (*)(Interpreter&, CallArgs);
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
  std::string_view name() const override { return name_; }
  Result<Value> Call(Interpreter& in, CallArgs args) const override {
    return fn_(in, std::move(args));
  }

 private:
  std::string name_;
  Fn fn_;
};

Result<Value> Range(Interpreter& in, CallArgs args) {
  if (!args.keyword.empty()) return InvalidArgument("range() takes no keyword arguments");
  const auto& a = args.positional;
  if (a.empty() || a.size() > 3) return InvalidArgument("range expected 1 to 3 arguments");
  for (const Value& v : a) {
    if (!v.is_integral()) {
      return InvalidArgument("'" + TypeName(v) + "' object cannot be interpreted as an integer");
    }
  }
  const int64_t start = a.size() == 1 ? 0 : a[0].integer();
  const int64_t stop = a.size() == 1 ? a[0].integer() : a[1].integer();
  const int64_t step = a.size() == 3 ? a[2].integer() : 1;
  if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
  // Jinja2's sandbox refuses ranges of more than 100000 items.
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (items.size() >= 100000) {
      return InvalidArgument("range too big, maximum size for range is 100000");
    }
    items.push_back(Value::Int(i));
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  PC_RETURN_IF_ERROR(in.Account(items.size() * sizeof(Value)));
  std::string repr = "range(" + std::to_string(start) + ", " + std::to_string(stop);
  if (step != 1) repr += ", " + std::to_string(step);
  return Value::Range(std::move(items), repr + ")");
}

Result<Value> MakeDict(Interpreter& in, CallArgs args) {
  if (!args.positional.empty()) return InvalidArgument("dict() takes keyword arguments only");
  DictData dict;
  for (auto& [key, value] : args.keyword) dict.Set(Value::Trusted(key), std::move(value));
  return in.NewDict(std::move(dict));
}

Result<Value> MakeNamespace(Interpreter& in, CallArgs args) {
  auto ns = std::make_shared<Namespace>();
  if (args.positional.size() > 1) return InvalidArgument("namespace() takes at most one mapping");
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (!init.is_dict()) return InvalidArgument("namespace() argument must be a mapping");
    for (const auto& [key, value] : init.dict().entries) {
      if (!key.is_string()) return InvalidArgument("namespace() keys must be strings");
      PC_RETURN_IF_ERROR(ns->SetAttr(key.text().str(), value));
    }
  }
  for (auto& [key, value] : args.keyword) PC_RETURN_IF_ERROR(ns->SetAttr(key, std::move(value)));
  PC_RETURN_IF_ERROR(in.Track(ns));
  return Value::MakeObject(ns);
}

Result<Value> MakeCycler(Interpreter& in, CallArgs args) {
  auto c = std::make_shared<Cycler>(std::move(args.positional));
  return Value::MakeObject(c);
}

Result<Value> MakeJoiner(Interpreter& in, CallArgs args) {
  PC_ASSIGN_OR_RETURN(auto a, BindArgs("joiner", std::move(args), {"sep"}));
  return Value::MakeCallable(std::make_shared<Joiner>(a[0].value_or(Value::Trusted(", "))));
}

Result<Value> RaiseException(Interpreter& in, CallArgs args) {
  PC_ASSIGN_OR_RETURN(auto a, BindArgs("raise_exception", std::move(args), {"message"}, 1));
  PC_ASSIGN_OR_RETURN(Text message, ToText(*a[0], 4096));
  return InvalidArgument(message.str());
}

Result<Value> StrftimeNow(Interpreter& in, CallArgs args) {
  PC_ASSIGN_OR_RETURN(auto a, BindArgs("strftime_now", std::move(args), {"format"}, 1));
  if (!a[0]->is_string()) return InvalidArgument("strftime_now() format must be a string");
  const std::string& format = a[0]->text().str();
  if (format.empty()) return Value::Trusted("");
  const std::tm now = in.Now();
  // strftime returns 0 both for "too small" and for an empty result: grow a few times.
  for (size_t size = 256; size <= (size_t(1) << 20); size *= 16) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &now);
    if (n > 0) return Value::Trusted(buf.substr(0, n));
  }
  return Value::Trusted("");
}

}  // namespace

void AddGlobalFunctions(std::unordered_map<std::string, Value>& globals) {
  const std::pair<const char*, Builtin::Fn> kFunctions[] = {
      {"range", Range},
      {"dict", MakeDict},
      {"namespace", MakeNamespace},
      {"cycler", MakeCycler},
      {"joiner", MakeJoiner},
      {"raise_exception", RaiseException},
      {"strftime_now", StrftimeNow},
  };
  for (const auto& [name, fn] : kFunctions) {
    globals.emplace(name, Value::MakeCallable(std::make_shared<Builtin>(name, fn)));
  }
}

}  // namespace promptcache::jinja
