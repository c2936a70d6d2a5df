// A Jinja template interpreter, written for the chat templates that model files carry
// (`tokenizer.chat_template`) and that Hugging Face renders with Jinja2: the same output,
// character for character, for the subset of Jinja that real templates use. See
// docs/chat_templates.md for what is supported.
//
// Template text is untrusted: parsing and rendering never crash, hang or take unbounded memory;
// any failure is a Status with one line naming the template line. Strings carry the marks of
// user-written bytes (text.h) through every operation, so the rendered MarkedText tells the
// tokenizer which special-token spellings the template wrote and which a user wrote.
//
//   PC_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source));
//   jinja::Variables vars;
//   PC_RETURN_IF_ERROR(vars.SetJson("messages", messages, /*user_written=*/true));
//   vars.SetBool("add_generation_prompt", true);
//   PC_ASSIGN_OR_RETURN(MarkedText text, t.Render(vars));
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/marked_text.h"
#include "core/status.h"
#include "jinja/ast.h"
#include "jinja/json.h"
#include "jinja/limits.h"

namespace promptcache::jinja {

// The variables a template is rendered with.
class Variables {
 public:
  // JSON objects keep their key order. InvalidArgument for JSON nested too deep. `trusted` may
  // exempt some strings of user-written JSON (json.h).
  Status SetJson(const std::string& name, const nlohmann::ordered_json& value, bool user_written,
                 const TrustedString& trusted = nullptr);
  void SetString(const std::string& name, std::string_view value, bool user_written);
  void SetBool(const std::string& name, bool value);

 private:
  friend class Template;
  std::unordered_map<std::string, Value> values_;
};

struct RenderOptions {
  Limits limits;
  // The clock strftime_now() reads; unset: the local time.
  std::function<std::tm()> now;
};

class Template {
 public:
  // InvalidArgument ("line 3: unexpected end of template, expected 'endfor'") for text that is
  // not a template this interpreter runs, including unknown filters and tests.
  static Result<Template> Parse(std::string_view source);

  // InvalidArgument for a template error (raise_exception(msg) gives "line N: msg"; undefined
  // values used in operations, type errors), ResourceExhausted past the limits.
  Result<MarkedText> Render(const Variables& variables, const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace promptcache::jinja
