#!/usr/bin/env python3
"""response_format against a live server on noise weights: 100 chat answers
under a json_schema (some streamed), plus json_object and /v1/completions
ones; every answer must end with finish_reason "stop" well within max_tokens,
parse, and validate (python3-jsonschema, formats checked).

  json_schema_client.py http://127.0.0.1:PORT [N]    (N schema answers, default 100)
"""
import concurrent.futures
import json
import os
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is not installed")
    sys.exit(77)

BASE = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
        "id": {"type": "string", "format": "uuid"},
        "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "note": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "address", "note"],
    "additionalProperties": False,
}
MAX_TOKENS = 300


def post(path, body, stream=False):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        if not stream:
            return json.loads(r.read())
        content, finish, usage = "", None, None
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                content += (ch.get("delta") or {}).get("content") or ch.get("text") or ""
                finish = ch.get("finish_reason") or finish
        return {"content": content, "finish_reason": finish, "usage": usage}


def chat(i, schema, fmt_type="json_schema", stream=False):
    rf = {"type": fmt_type}
    if fmt_type == "json_schema":
        rf["json_schema"] = {"name": "person", "schema": schema, "strict": True}
    body = {"messages": [{"role": "user", "content": f"Describe person {i} as JSON."}], "max_tokens": MAX_TOKENS,
            "temperature": 1.0, "seed": i, "response_format": rf, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
        return post("/v1/chat/completions", body, stream=True)
    r = post("/v1/chat/completions", body)
    c = r["choices"][0]
    return {"content": c["message"]["content"], "finish_reason": c["finish_reason"], "usage": r["usage"]}


def completion(i, schema):
    body = {"prompt": "JSON:", "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": i,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}
    r = post("/v1/completions", body)
    c = r["choices"][0]
    return {"content": c["text"], "finish_reason": c["finish_reason"], "usage": r["usage"]}


def main():
    from jsonschema_check import validator as make_validator
    validator = make_validator(SCHEMA)
    any_object = jsonschema.Draft202012Validator({"type": "object"})
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for i in range(N):
            jobs.append(("schema", validator, pool.submit(chat, i, SCHEMA, "json_schema", i % 4 == 0)))
        for i in range(10):
            jobs.append(("json_object", any_object, pool.submit(chat, 1000 + i, None, "json_object", i % 2 == 0)))
        for i in range(10):
            jobs.append(("completions", validator, pool.submit(completion, 2000 + i, SCHEMA)))
    bad = 0
    tokens = []
    for kind, v, fut in jobs:
        r = fut.result()
        text = r["content"]
        n = r["usage"]["completion_tokens"] if r["usage"] else -1
        problem = None
        try:
            value = json.loads(text)
            errs = list(v.iter_errors(value))
            if errs:
                problem = "invalid: " + errs[0].message
        except ValueError as e:
            problem = f"does not parse: {e}"
        if r["finish_reason"] != "stop":
            problem = f"finish_reason {r['finish_reason']}"
        elif kind == "schema" and not 0 < n < MAX_TOKENS:
            problem = f"{n} completion tokens"
        if problem:
            bad += 1
            print(f"{kind}: {problem}: {text!r}")
        if kind == "schema":
            tokens.append(n)
    # A refusal names the keyword.
    try:
        chat(0, {"type": "string", "multipleOf": 3})
        print("an unsupported keyword was accepted")
        bad += 1
    except urllib.error.HTTPError as e:
        err = json.loads(e.read())["error"]
        if e.code != 400 or "multipleOf" not in err["message"]:
            print(f"refusal does not name the keyword: {e.code} {err}")
            bad += 1
    tokens.sort()
    print(f"{len(jobs) - bad} of {len(jobs)} answers parse and validate; schema answers took "
          f"{tokens[0]}..{tokens[-1]} tokens (median {tokens[len(tokens) // 2]}) of {MAX_TOKENS}")
    print("example:", jobs[0][2].result()["content"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
