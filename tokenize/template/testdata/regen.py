#!/usr/bin/env python3
"""Regenerate the "expected" field of cases.json with Python Jinja2 configured
as Hugging Face transformers configures it (see transformers
utils/chat_template_utils.py, _compile_jinja_template).

Usage: python3 regen.py [cases.json]          # rewrite expected in place
       python3 regen.py --check [cases.json]  # only compare, exit 1 on mismatch
       python3 regen.py --render TEMPLATE VARS_JSON  # print one rendering
       python3 regen.py --semantics [semantics.json]  # refill the unit cases
       python3 regen.py --cross [cross.json]  # every template x every case's variables

Requires jinja2==3.1.6.
"""
import hashlib
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime(2025, 7, 10, 12, 0, 0)


class Generation(Extension):
    """{% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_support"), [], [], body).set_lineno(lineno)

    def _support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render(source, data):
    return compile_template(source).render(**data)


def regen_semantics(path):
    """Fill expected/error for every case of a semantics file:
    {"data": {...shared variables...}, "cases": [{"name", "template", "data"?}]}."""
    with open(path) as f:
        doc = json.load(f)
    for case in doc["cases"]:
        case.pop("expected", None)
        case.pop("error", None)
        case.pop("error_type", None)
        case.pop("error_line", None)
        data = dict(doc["data"])
        data.update(case.get("data", {}))
        try:
            case["expected"] = render(case["template"], data)
        except jinja2.exceptions.TemplateSyntaxError as e:
            case["error_type"] = "TemplateSyntaxError"
            case["error_line"] = e.lineno
            case["error"] = str(e.message)
        except Exception as e:  # noqa: BLE001
            case["error_type"] = type(e).__name__
            case["error"] = str(e)
    with open(path, "w") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return 0


def cross_variants(cases):
    """Every case's variables, then each again with add_generation_prompt
    flipped: the inputs every template is rendered with by --cross."""
    datas = [c["data"] for c in cases.values()]
    flipped = []
    for d in datas:
        e = dict(d)
        e["add_generation_prompt"] = not d.get("add_generation_prompt", False)
        flipped.append(e)
    return datas + flipped


def regen_cross(cases_path, out_path):
    """Render every template of cases.json with the variables of every case
    (and with add_generation_prompt flipped) and record, per template, a
    short SHA-256 of each output, "raise:<message>" for raise_exception, or
    "error" for any other failure."""
    with open(cases_path) as f:
        cases = json.load(f)
    datas = cross_variants(cases)
    out = {}
    for name, case in cases.items():
        tpl = compile_template(case["chat_template"])
        row = []
        for d in datas:
            try:
                text = tpl.render(**d)
                row.append(hashlib.sha256(text.encode()).hexdigest()[:16])
            except jinja2.exceptions.TemplateError as e:
                if type(e) is jinja2.exceptions.TemplateError:
                    row.append("raise:" + str(e))
                else:
                    row.append("error")
            except Exception:  # noqa: BLE001
                row.append("error")
        out[name] = row
    with open(out_path, "w") as f:
        f.write("{\n")
        f.write(",\n".join(json.dumps(k, ensure_ascii=False) + ": " + json.dumps(v, ensure_ascii=False)
                            for k, v in out.items()))
        f.write("\n}\n")
    return 0


def main(argv):
    if argv[:1] == ["--cross"]:
        return regen_cross("cases.json", argv[1] if len(argv) > 1 else "cross.json")
    if argv[:1] == ["--semantics"]:
        return regen_semantics(argv[1] if len(argv) > 1 else "semantics.json")
    if argv[:1] == ["--render"]:
        tpl = open(argv[1]).read()
        data = json.loads(open(argv[2]).read())
        try:
            sys.stdout.write(render(tpl, data))
        except Exception as e:  # noqa: BLE001
            sys.stdout.write("ERROR: %s: %s" % (type(e).__name__, e))
            return 1
        return 0
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    path = argv[0] if argv else "cases.json"
    with open(path) as f:
        cases = json.load(f)
    bad = 0
    for name, case in cases.items():
        got = render(case["chat_template"], case["data"])
        if got != case.get("expected"):
            bad += 1
            print("differs:", name)
        case["expected"] = got
    if check:
        print("%d/%d match" % (len(cases) - bad, len(cases)))
        return 1 if bad else 0
    with open(path, "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
