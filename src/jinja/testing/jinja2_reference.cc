#include "jinja/testing/jinja2_reference.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "jinja/template.h"

namespace promptcache::jinja::testing {

std::tm FixedNow() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 10;
  tm.tm_min = 30;
  tm.tm_isdst = 0;
  timegm(&tm);  // fills in the weekday and day of the year
  return tm;
}

Result<std::vector<Rendered>> RenderWithJinja2(const std::vector<Case>& cases) {
  nlohmann::ordered_json request;
  request["now"] = kNowIso;
  request["cases"] = nlohmann::ordered_json::array();
  for (const Case& c : cases) {
    request["cases"].push_back({{"template", c.source}, {"variables", c.variables}});
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/pc_jinja2_XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return IoError("cannot create a temporary file for the Jinja2 cases");
  close(fd);
  std::ofstream(path) << request.dump();
  const std::string command = std::string("/usr/bin/python3 ") + PC_SOURCE_DIR +
                              "/scripts/reference/jinja2_render.py " + path;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::remove(path.c_str());
    return IoError("cannot run " + command);
  }
  std::string output;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = pclose(pipe);
  std::remove(path.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal("the Jinja2 reference failed (exit status " +
                    std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                    "): is python3-jinja2 installed? (apt install python3-jinja2)");
  }
  const nlohmann::json results = nlohmann::json::parse(output, nullptr, false);
  if (!results.is_array() || results.size() != cases.size()) {
    return Internal("the Jinja2 reference wrote unexpected output: " + output.substr(0, 200));
  }
  std::vector<Rendered> out;
  for (const auto& r : results) {
    Rendered x;
    x.ok = r.value("ok", false);
    x.text = r.value("text", "");
    x.error = r.value("error", "");
    out.push_back(std::move(x));
  }
  return out;
}

Rendered RenderWithPromptcache(const Case& c) {
  Rendered out;
  Result<Template> t = Template::Parse(c.source);
  if (!t.ok()) {
    out.error = t.status().message();
    return out;
  }
  Variables vars;
  for (const auto& [name, value] : c.variables.items()) {
    const bool trusted = name == "bos_token" || name == "eos_token";
    if (Status s = vars.SetJson(name, value, !trusted); !s.ok()) {
      out.error = s.message();
      return out;
    }
  }
  RenderOptions options;
  options.now = FixedNow;
  Result<MarkedText> text = t->Render(vars, options);
  if (!text.ok()) {
    out.error = text.status().message();
    return out;
  }
  out.ok = true;
  out.text = text->text();
  return out;
}

}  // namespace promptcache::jinja::testing
