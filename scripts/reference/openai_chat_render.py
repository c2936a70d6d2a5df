#!/usr/bin/python3
"""Renders OpenAI chat-completion request bodies through chat templates with Jinja2 itself: the
reference that promptcache's server-side conversion (tools, tool calls, tool results) and
rendering are tested against (src/server/tool_prompt_test.cc).

The request is turned into the template's variables here, independently of promptcache, the way
OpenAI-compatible servers built on Hugging Face transformers do (vLLM): "developer" is read as
"system", text parts are joined, an assistant's tool-call arguments that are a JSON object's text
become that object (templates index into them or write them with tojson), `tools` is passed
unless tool_choice is "none" (or the list is empty), and add_generation_prompt is on; an
assistant's reasoning_content is its message's field of that name, and chat_template_kwargs are
further variables (as vLLM passes them). A template
that refuses object arguments (it concatenates them as text: Functionary v3.2) is rendered again
with each object as its compact JSON text, as llama.cpp does for such templates; one that fails
on a calling turn's null content (Qwen3 searches it for '</think>') is rendered again with "" for
it, as llama.cpp passes "" to templates that need a string there. FireFunction v2's
template reads `functions` (the offered tools as JSON indented by 2, "" for none) and `datetime`
("%b %d %Y %H:%M:%S GMT") instead of `tools`: they are passed to a template that names them.

Input (a JSON file named on the command line):
  {"now": "2024-07-26T10:30:00",
   "cases": [{"template": "...", "body": {...}, "bos_token": "...", "eos_token": "..."}, ...]}
Output (stdout): for each case {"ok": true, "text": "..."} or {"ok": false, "error": "..."}.
"""
import json
import os
import sys
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja2_render import make_environment  # noqa: E402


def arguments_as_text(v):
    for m in v["messages"]:
        for c in m.get("tool_calls", []):
            args = c["function"]["arguments"]
            if isinstance(args, dict):
                c["function"]["arguments"] = json.dumps(args, ensure_ascii=False,
                                                        separators=(",", ":"))
    return v


def content_as_empty(v):
    for m in v["messages"]:
        if m.get("tool_calls") and m["content"] is None:
            m["content"] = ""
    return v


def render_first(template, case):
    """The first form the template takes: as converted, then arguments as text, then null
    contents as "" (with each), as llama.cpp retries a template that refuses them."""
    forms = [lambda v: v, arguments_as_text, content_as_empty,
             lambda v: content_as_empty(arguments_as_text(v))]
    for i, form in enumerate(forms):
        try:
            return template.render(**form(variables(case)))
        except TypeError:
            if i == len(forms) - 1:
                raise


def convert_message(m):
    out = {"role": "system" if m["role"] == "developer" else m["role"]}
    content = m.get("content")
    if isinstance(content, list):
        content = "".join(part["text"] for part in content)
    calls = m.get("tool_calls") or []
    if content is None and not calls:
        content = ""
    out["content"] = content
    if calls:
        converted = []
        for c in calls:
            args = c["function"].get("arguments", {})
            if isinstance(args, str):
                try:
                    parsed = json.loads(args)
                    if isinstance(parsed, dict):
                        args = parsed
                except ValueError:
                    pass
            converted.append({"id": c["id"], "type": "function",
                              "function": {"name": c["function"]["name"], "arguments": args}})
        out["tool_calls"] = converted
    if m.get("reasoning_content") is not None:
        out["reasoning_content"] = m["reasoning_content"]
    if m["role"] == "tool":
        out["tool_call_id"] = m["tool_call_id"]
        if m.get("name") is not None:
            out["name"] = m["name"]
    return out


def variables(case):
    body = case["body"]
    # chat_template_kwargs: further variables, as vLLM passes them to apply_chat_template; the
    # ones set here win.
    v = dict(body.get("chat_template_kwargs") or {})
    v.update({"messages": [convert_message(m) for m in body["messages"]],
         "add_generation_prompt": True,
         "bos_token": case["bos_token"], "eos_token": case["eos_token"]})
    tools = body.get("tools")
    if tools and body.get("tool_choice") != "none":
        v["tools"] = tools
    if "functools[" in case["template"]:
        v["functions"] = json.dumps(v["tools"], indent=2, ensure_ascii=False) if "tools" in v else ""
        v["datetime"] = case["now"].strftime("%b %d %Y %H:%M:%S GMT")
    return v


def main():
    request = json.load(open(sys.argv[1], encoding="utf-8"))
    env = make_environment(datetime.fromisoformat(request.get("now", "2024-07-26T10:30:00")))
    results = []
    now = datetime.fromisoformat(request.get("now", "2024-07-26T10:30:00"))
    for case in request["cases"]:
        case["now"] = now
        try:
            template = env.from_string(case["template"])
            text = render_first(template, case)
            results.append({"ok": True, "text": text})
        except Exception as e:  # a rejection is a result to compare, not a crash
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
