// Test support: renders cases with Jinja2 itself (scripts/reference/jinja2_render.py, run by
// Debian's /usr/bin/python3) and with promptcache's interpreter, so tests compare the two instead
// of hard-coding expected strings. A missing python3-jinja2 is an error, never a skip.
#pragma once

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace promptcache::jinja::testing {

struct Case {
  std::string source;                // the template
  nlohmann::ordered_json variables;  // an object: name -> value
};

struct Rendered {
  bool ok = false;
  std::string text;   // when ok
  std::string error;  // when not
};

// The fixed time strftime_now() reads in both renderers.
constexpr char kNowIso[] = "2024-07-26T10:30:00";
std::tm FixedNow();

// Every case through Jinja2, in one python process. An error when python3 or Jinja2 is missing or
// the script fails.
Result<std::vector<Rendered>> RenderWithJinja2(const std::vector<Case>& cases);

// One case through promptcache's interpreter. `bos_token` and `eos_token` are the template's
// (trusted); every other variable is user-written.
Rendered RenderWithPromptcache(const Case& c);

}  // namespace promptcache::jinja::testing
