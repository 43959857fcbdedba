#!/usr/bin/env python3
"""Renders Jinja templates with Jinja2 itself in Hugging Face transformers' chat-template
environment, for tests/core/test_chat_template.cpp (the oracle kvscope's renderer is compared to).

    python3 jinja_oracle.py CASES.json

CASES.json is a JSON array of {"template": str, "context": {...}}. Prints a JSON array with, per
case, {"text": rendered} or {"error": "<ExceptionType>: <message>"}. The environment is
transformers' (utils/chat_template_utils.py): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with loop controls and the {% generation %} tag, tojson(ensure_ascii=False,
indent, separators, sort_keys), raise_exception and strftime_now.
Exit status 3 when jinja2 cannot be imported (the test then skips).
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox
except ImportError:
    sys.exit(3)


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    out = []
    for case in cases:
        try:
            out.append({"text": env.from_string(case["template"]).render(**case["context"])})
        except Exception as e:  # every failure is a result to compare, not a crash
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
