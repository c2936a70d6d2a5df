#!/usr/bin/python3
"""Renders Jinja templates with Jinja2 itself, the way Hugging Face transformers renders chat
templates: the reference that promptcache's own Jinja interpreter is tested against.

Input (a JSON file named on the command line, or stdin):
  {"now": "2024-07-26T10:30:00",            # what strftime_now() reads (naive local time)
   "cases": [{"template": "...", "variables": {...}}, ...]}
Output (stdout): one JSON list with, for each case, {"ok": true, "text": "..."} or
  {"ok": false, "error": "TypeName: message"}.

The environment is transformers' (chat_template_utils): an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and a {% generation %} block, tojson as
json.dumps with ensure_ascii off, raise_exception raising TemplateError and strftime_now.
Run it with Debian's /usr/bin/python3 and python3-jinja2. Exits 2 when Jinja2 is missing.
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    sys.stderr.write(f"jinja2_render.py: Jinja2 is not installed ({e}); apt install python3-jinja2\n")
    sys.exit(2)


class GenerationBlock(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body (transformers uses it to find the
    assistant's tokens; the text is the same)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    source = open(sys.argv[1], encoding="utf-8") if len(sys.argv) > 1 else sys.stdin
    request = json.load(source)
    now = datetime.fromisoformat(request.get("now", "2024-07-26T10:30:00"))
    env = make_environment(now)
    compiled = {}
    results = []
    for case in request["cases"]:
        try:
            template = compiled.get(case["template"])
            if template is None:
                template = env.from_string(case["template"])
                compiled[case["template"]] = template
            results.append({"ok": True, "text": template.render(**case["variables"])})
        except Exception as e:  # any failure is a result to compare, not a crash
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
