// JSON in and out of the interpreter: conversation data (messages, tools) arrives as JSON and
// becomes values (its strings marked as user-written when it comes from a user), and the tojson
// filter writes values back as Python's json.dumps does, which is how Hugging Face registers it
// (ensure_ascii off, optional indent, separators and sort_keys), not Jinja2's HTML-safe default.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "jinja/text.h"
#include "jinja/value.h"

namespace promptcache::jinja {

// Whether the string `value`, found under object key `key` in user-written JSON, is trusted all
// the same (a message's "role" that is a standard role name).
using TrustedString = std::function<bool(std::string_view key, std::string_view value)>;

// JSON objects keep their key order (nlohmann::ordered_json), as Python's json.loads does.
// InvalidArgument past kMaxNesting levels.
Result<Value> FromJson(const nlohmann::ordered_json& json, bool user_written,
                       const TrustedString& trusted = nullptr);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // none: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// InvalidArgument for values JSON cannot hold (Undefined, namespaces, macros, tuple keys).
Status DumpJson(const Value& v, const JsonDumpOptions& options, TextBuilder& out, int depth = 0);

}  // namespace promptcache::jinja
