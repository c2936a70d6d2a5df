// What Jinja2 cannot tell us: the user-written marks through every kind of string operation, and
// that hostile templates end in one clear error (never a crash, a hang or unbounded memory).
#include <gtest/gtest.h>

#include <string>

#include "jinja/template.h"

namespace promptcache::jinja {
namespace {

Result<MarkedText> Render(const std::string& source, const Variables& vars = {},
                          const Limits& limits = {}) {
  Result<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  RenderOptions options;
  options.limits = limits;
  return t->Render(vars, options);
}

// The rendered text with user-written bytes in [brackets].
std::string Marked(const MarkedText& text) {
  std::string out;
  size_t at = 0;
  for (const auto& [begin, end] : text.user_ranges()) {
    out += text.text().substr(at, begin - at) + "[" + text.text().substr(begin, end - begin) + "]";
    at = end;
  }
  return out + text.text().substr(at);
}

std::string RenderMarked(const std::string& source) {
  Variables vars;
  vars.SetString("u", "ab<|x|>cd", /*user_written=*/true);
  EXPECT_TRUE(
      vars.SetJson("j", nlohmann::ordered_json::parse(R"({"k": "v\"<|y|>", "n": [1, "é"]})"), true)
          .ok());
  Result<MarkedText> text = Render(source, vars);
  EXPECT_TRUE(text.ok()) << source << ": " << text.status().message();
  return text.ok() ? Marked(*text) : "";
}

TEST(JinjaMarks, FollowUserTextThroughStringOperations) {
  EXPECT_EQ(RenderMarked("<{{ u }}>"), "<[ab<|x|>cd]>");
  EXPECT_EQ(RenderMarked("{{ '<' + u + '>' }}"), "<[ab<|x|>cd]>");
  EXPECT_EQ(RenderMarked("{{ '(' ~ u ~ ')' }}"), "([ab<|x|>cd])");
  EXPECT_EQ(RenderMarked("{{ u[2:7] }}|{{ u[::-1] }}|{{ u[0] }}"), "[<|x|>]|[dc>|x|<ba]|[a]");
  EXPECT_EQ(RenderMarked("{{ u|upper }}"), "[AB<|X|>CD]");
  EXPECT_EQ(RenderMarked("{{ u|replace('<|x|>', '<|t|>') }}"), "[ab]<|t|>[cd]");
  EXPECT_EQ(RenderMarked("{{ ('  ' ~ u ~ '  ')|trim }}"), "[ab<|x|>cd]");
  EXPECT_EQ(RenderMarked("{{ u.split('<|x|>') }}"), "['[ab]', '[cd]']");
  EXPECT_EQ(RenderMarked("{{ [u, 'lit']|join('<|j|>') }}"), "[ab<|x|>cd]<|j|>lit");
  EXPECT_EQ(RenderMarked("{{ j|tojson }}"), "{\"[k]\": \"[v\\\"<|y|>]\", \"[n]\": [1, \"[é]\"]}");
  EXPECT_EQ(RenderMarked("{{ j.k|string }}{{ j|string }}"),
            "[v\"<|y|>]{'[k]': '[v\"<|y|>]', '[n]': [1, '[é]']}");
  EXPECT_EQ(RenderMarked("{% set s %}<{{ u }}>{% endset %}{{ s|trim }}"), "<[ab<|x|>cd]>");
  EXPECT_EQ(RenderMarked("{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(u)|upper }}"),
            "<[AB<|X|>CD]>");
  EXPECT_EQ(RenderMarked("{{ '{}-{}'.format(u, 1) }}|{{ '%s!' % u }}"),
            "[ab<|x|>cd]-1|[ab<|x|>cd]!");
  EXPECT_EQ(RenderMarked("{{ u|escape }}"), "[ab&lt;|x|&gt;cd]");
  EXPECT_EQ(RenderMarked("{{ u|length }} {{ u|int }}"), "9 0");
}

TEST(JinjaErrors, NameTheLine) {
  Result<MarkedText> r = Render("line 1\n{% if true %}\n{{ 1 + 'a' }}\n{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("line 3: ", 0), 0u) << r.status().message();
  Result<MarkedText> p = Render("a\nb\n{% for x in y %}\n");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "line 3: unexpected end of template, expected 'endfor' or 'else'");
  Result<MarkedText> e = Render("{{ raise_exception('Roles must alternate') }}");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "line 1: Roles must alternate");
}

// A hostile template must end in a one-line error: a budget of steps, depth or bytes stops it
// (without one these would run for hours or exhaust memory; ctest's timeout catches a hang).
// The test does not time it: how long the budget takes depends on the machine's load.
void ExpectBoundedFailure(const std::string& source, StatusCode code, const Limits& limits = {}) {
  Result<MarkedText> r = Render(source, {}, limits);
  EXPECT_FALSE(r.ok()) << source.substr(0, 80);
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), code) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaLimits, DeepSourceNesting) {
  ExpectBoundedFailure("{{ " + Repeat("(", 100000) + "1" + Repeat(")", 100000) + " }}",
                       StatusCode::kInvalidArgument);
  ExpectBoundedFailure("{{ " + Repeat("not ", 100000) + "1 }}", StatusCode::kInvalidArgument);
  ExpectBoundedFailure("{{ " + Repeat("-", 100000) + "1 }}", StatusCode::kInvalidArgument);
  ExpectBoundedFailure("{{ 1" + Repeat(" + 1", 100000) + " }}", StatusCode::kInvalidArgument);
  ExpectBoundedFailure("{{ x" + Repeat(".a", 100000) + " }}", StatusCode::kInvalidArgument);
  ExpectBoundedFailure("{{ x" + Repeat("|trim", 100000) + " }}", StatusCode::kInvalidArgument);
  ExpectBoundedFailure(Repeat("{% if true %}", 100000) + Repeat("{% endif %}", 100000),
                       StatusCode::kInvalidArgument);
  ExpectBoundedFailure("{{ [" + Repeat("[", 100000) + Repeat("]", 100000) + "] }}",
                       StatusCode::kInvalidArgument);
}

TEST(JinjaLimits, RunawayRendering) {
  ExpectBoundedFailure(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
      "{% endfor %}",
      StatusCode::kResourceExhausted);
  ExpectBoundedFailure("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
                       StatusCode::kResourceExhausted);
  ExpectBoundedFailure("{% macro m(n) %}{{ m(n + 1) ~ 'x' * n }}{% endmacro %}{{ m(1) }}",
                       StatusCode::kResourceExhausted);
  ExpectBoundedFailure(
      "{% set ns = namespace(s='xx') %}{% for i in range(100) %}"
      "{% set ns.s = ns.s + ns.s %}{% endfor %}",
      StatusCode::kResourceExhausted);
  ExpectBoundedFailure("{{ 'x' * 1000000000000 }}", StatusCode::kResourceExhausted);
  ExpectBoundedFailure("{{ [1] * 1000000000000 }}", StatusCode::kResourceExhausted);
  ExpectBoundedFailure("{% set s = 'x' * 10000000 %}{{ s.replace('x', s) }}",
                       StatusCode::kResourceExhausted);
  ExpectBoundedFailure(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
      "{% set ns.l = [ns.l] %}{% endfor %}",
      StatusCode::kResourceExhausted);
  ExpectBoundedFailure(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
      "{% set ns.l = ns.l + [ns.l] %}{% endfor %}",
      StatusCode::kResourceExhausted);
  Limits small;
  small.max_output_bytes = 1000;
  ExpectBoundedFailure("{% for i in range(1000) %}0123456789{% endfor %}",
                       StatusCode::kResourceExhausted, small);
}

TEST(JinjaLimits, CyclesAreFreedAndPrinted) {
  // A namespace holding itself (and a macro holding its scope) must neither recurse without
  // end when printed nor leak (the fuzzer's LeakSanitizer checks the second).
  ExpectBoundedFailure("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
                       StatusCode::kInvalidArgument);
  Result<MarkedText> r = Render(
      "{% macro m() %}x{% endmacro %}{% set ns = namespace(f=m) %}{% set ns.ns = ns %}"
      "{% for i in [1] %}{% set ns.loop = loop %}{% endfor %}{{ ns.f() }}");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->text(), "x");
}

TEST(JinjaLimits, UnsafeOrUnsupportedTagsAreRefused) {
  for (const char* source :
       {"{% include 'x' %}", "{% extends 'x' %}", "{% import 'x' as y %}",
        "{% block b %}{% endblock %}", "{% do x %}", "{% for x in y recursive %}{% endfor %}"}) {
    Result<Template> t = Template::Parse(source);
    EXPECT_FALSE(t.ok()) << source;
  }
}

}  // namespace
}  // namespace promptcache::jinja
