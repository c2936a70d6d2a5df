// Bounds on one render of a template. A template is untrusted code (it comes from a model file or
// a user's file), so every resource a render can consume is capped, and going past a cap ends the
// render with ResourceExhausted instead of exhausting the machine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace promptcache::jinja {

struct Limits {
  size_t max_output_bytes = size_t(64) << 20;  // the rendered text
  size_t max_string_bytes = size_t(64) << 20;  // any one string value
  size_t max_list_items = size_t(1) << 20;     // any one list or dict
  size_t max_created_bytes = size_t(1) << 30;  // strings, lists and dicts built in all
  int64_t max_steps = 20'000'000;              // statements and expressions evaluated
  int max_depth = 600;                         // nested evaluation (macro calls included)
};

}  // namespace promptcache::jinja
