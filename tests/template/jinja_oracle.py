#!/usr/bin/env python3
"""The oracle for edgelm's chat-template interpreter: renders a template with
Python's jinja2, set up as Hugging Face transformers sets it up for chat
templates, once per test conversation.

    jinja_oracle.py TEMPLATE_FILE CONVERSATIONS_JSON
    jinja_oracle.py --cases CASES_JSON


CONVERSATIONS_JSON is a list of {"name": ..., "context": {...}}; each context
holds the template's variables (messages, tools, add_generation_prompt,
bos_token, ...). Prints a JSON list, one entry per conversation:
    {"name": ..., "ok": true, "output": "..."}
    {"name": ..., "ok": false, "kind": "parse"|"raise"|"error", "error": "..."}
("raise" is raise_exception(msg), whose message edgelm must reproduce.)
With --cases, CASES_JSON is {"contexts": [...], "templates": ["...", ...]}
(contexts as above, templates as text) and the output is one such list per
template.
Exits with status 3 when jinja2 is not installed.
"""
import datetime
import json
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja2 is not installed (apt-get install python3-jinja2)", file=sys.stderr)
    sys.exit(3)

# The clock strftime_now() reads: fixed, so renders are reproducible.
FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


def raise_exception(message):
    raise RaisedByTemplate(message)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' tojson: json.dumps, not jinja2's HTML-safe default.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %} tag (AssistantTracker): renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_all(source, conversations):
    results = []
    try:
        template = environment().from_string(source)
    except Exception as e:  # noqa: BLE001 - any compile failure is the answer
        return [{"name": c["name"], "ok": False, "kind": "parse", "error": f"{type(e).__name__}: {e}"}
                for c in conversations]
    for c in conversations:
        try:
            results.append({"name": c["name"], "ok": True, "output": template.render(**c["context"])})
        except RaisedByTemplate as e:
            results.append({"name": c["name"], "ok": False, "kind": "raise", "error": str(e)})
        except Exception as e:  # noqa: BLE001
            results.append({"name": c["name"], "ok": False, "kind": "error", "error": f"{type(e).__name__}: {e}"})
    return results


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--cases":
        with open(sys.argv[2], encoding="utf-8") as f:
            cases = json.load(f)
        out = [render_all(t, cases["contexts"]) for t in cases["templates"]]
    elif len(sys.argv) == 3:
        with open(sys.argv[1], encoding="utf-8", newline="") as f:
            source = f.read()
        with open(sys.argv[2], encoding="utf-8") as f:
            out = render_all(source, json.load(f))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    json.dump(out, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
