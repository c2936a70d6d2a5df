#include "jinja/template.h"

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/json.h"
#include "jinja/parser.h"

namespace promptcache::jinja {

Status Variables::SetJson(const std::string& name, const nlohmann::ordered_json& value,
                          bool user_written, const TrustedString& trusted) {
  PC_ASSIGN_OR_RETURN(Value v, FromJson(value, user_written, trusted));
  values_[name] = std::move(v);
  return Status::Ok();
}

void Variables::SetString(const std::string& name, std::string_view value, bool user_written) {
  values_[name] = Value::String(Text(std::string(value), user_written));
}

void Variables::SetBool(const std::string& name, bool value) { values_[name] = Value::Bool(value); }

Result<Template> Template::Parse(std::string_view source) {
  PC_ASSIGN_OR_RETURN(Body body, jinja::Parse(source));
  return Template(std::make_shared<const Body>(std::move(body)));
}

Result<MarkedText> Template::Render(const Variables& variables,
                                    const RenderOptions& options) const {
  std::unordered_map<std::string, Value> globals;
  AddGlobalFunctions(globals);
  for (const auto& [name, value] : variables.values_) globals[name] = value;
  Interpreter::Clock now = options.now;
  if (!now) {
    now = [] {
      const std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      return tm;
    };
  }
  Interpreter interpreter(globals, options.limits, std::move(now));
  PC_ASSIGN_OR_RETURN(Text text, interpreter.Run(*body_));
  return text.ToMarkedText();
}

}  // namespace promptcache::jinja
