#!/usr/bin/env python3
"""regen.py: re-render the chat-template cases with Python Jinja2, as Hugging Face transformers does.

A cases file (../shared/data/chat-templates/cases.json) maps a case name to
{"chat_template": str, "data": {variables}, "expected": str}. This script renders every template with
the variables in "data", in a Jinja2 environment configured the way transformers configures it for
apply_chat_template (transformers/utils/chat_template_utils.py, _compile_jinja_template):

  * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
  * extensions: jinja2.ext.loopcontrols, and a {% generation %} ... {% endgeneration %} block that
    renders its body unchanged (transformers uses it to track assistant tokens; the text is the same)
  * the tojson filter replaced by json.dumps(x, ensure_ascii=False, indent=indent,
    separators=separators, sort_keys=False): no key sorting, no ASCII escaping, no HTML escaping
  * globals raise_exception(message), which raises TemplateError(message), and strftime_now(format),
    here with the clock fixed at 2025-07-10 12:00:00 so the output is reproducible

It then reports how many renders equal the committed "expected" byte for byte and lists the others.

Usage:
  python3 scripts/templates/regen.py [--cases FILE]              compare; exit 1 if any case differs
  python3 scripts/templates/regen.py [--cases FILE] --write OUT  also write FILE's cases to OUT with
                                                                 "expected" replaced by the new render
  -v / --verbose                                                 show the first difference of each

Needs only Jinja2 (Debian: apt-get install python3-jinja2). The reference outputs were made with
Jinja2 3.1.6; the script prints the version it runs with.
"""

import argparse
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEFAULT_CASES = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/data/chat-templates/cases.json")
)

# The fixed "now" of strftime_now, as in the committed expectations.
FIXED_NOW = datetime(2025, 7, 10, 12, 0, 0)


class GenerationBlock(Extension):
    """{% generation %}body{% endgeneration %}: renders body as if the tags were not there.

    transformers wraps the body in a call that records where the assistant's text starts and ends
    (for return_assistant_tokens_mask); the rendered text itself is the body's, unchanged.
    """

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno  # the "generation" name token
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        # A CallBlock calls _render with `caller`, a macro that renders the body.
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' replacement for Jinja's tojson: keeps key order and non-ASCII characters and
    # does not HTML-escape (Jinja's own tojson sorts keys and escapes <, >, &, ').
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationBlock, loopcontrols],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, case):
    """Returns (True, text) or (False, "ErrorType: message")."""
    try:
        return True, env.from_string(case["chat_template"]).render(**case["data"])
    except Exception as e:  # a template may raise on purpose (raise_exception)
        return False, f"{type(e).__name__}: {e}"


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    lo = max(0, i - 40)
    return i, a[lo : i + 40], b[lo : i + 40]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="cases file (default: ../shared/data/chat-templates/cases.json)")
    ap.add_argument("--write", metavar="OUT", help="write the cases with regenerated expectations to OUT")
    ap.add_argument("-v", "--verbose", action="store_true", help="show where each differing case differs")
    args = ap.parse_args()

    with open(args.cases, encoding="utf-8") as f:
        raw = f.read()
    cases = json.loads(raw)
    env = make_env()

    print(f"jinja2 {jinja2.__version__}, python {sys.version.split()[0]}, {len(cases)} cases from {args.cases}")
    matched, differ, failed = 0, [], []
    out = {}
    for name, case in cases.items():
        ok, text = render(env, case)
        if not ok:
            failed.append((name, text))
            out[name] = case  # keep the old expectation; nothing better to write
            continue
        if text == case.get("expected"):
            matched += 1
        else:
            differ.append((name, text))
        out[name] = {**case, "expected": text}

    print(f"match: {matched}/{len(cases)} byte for byte")
    for name, text in differ:
        print(f"DIFFERS: {name}")
        if args.verbose:
            i, want, got = first_difference(cases[name]["expected"], text)
            print(f"  at char {i}:\n    expected {want!r}\n    rendered {got!r}")
    for name, err in failed:
        print(f"RAISED:  {name}: {err}")

    if args.write:
        # Same layout as the committed file: one-space indent, UTF-8 unescaped.
        text = json.dumps(out, ensure_ascii=False, indent=1)
        if raw.endswith("\n"):
            text += "\n"
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {args.write}")

    sys.exit(0 if matched == len(cases) else 1)


if __name__ == "__main__":
    main()
