#!/usr/bin/env python3
"""Validates JSON texts against their schemas with python3-jsonschema (the oracle
for response_format): formats are checked too (format_checker() below).

  jsonschema_check.py CASES.json

CASES.json: [{"schema": {...}, "texts": ["...", ...]}, ...]. Prints every text
that does not parse or validate; exit 1 if any, 77 when jsonschema is missing.
"""
import datetime
import json
import re
import sys

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is not installed")
    sys.exit(77)


def format_checker():
    """Draft 2020-12's format checker, with RFC 3339 date-time and time
    checked here: jsonschema checks them only with rfc3339-validator, which
    Debian does not package."""
    base = getattr(jsonschema, "draft202012_format_checker", None) or jsonschema.FormatChecker()
    fc = jsonschema.FormatChecker(formats=())
    fc.checkers = dict(base.checkers)
    offset = r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
    full_time = r"[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?" + offset

    @fc.checks("date-time", raises=ValueError)
    def date_time(s):
        if not isinstance(s, str):
            return True
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt]" + full_time, s):
            return False
        datetime.datetime.fromisoformat(s.upper().replace("Z", "+00:00"))
        return True

    @fc.checks("time", raises=ValueError)
    def time(s):
        if not isinstance(s, str):
            return True
        if not re.fullmatch(full_time, s):
            return False
        datetime.time.fromisoformat(s.upper().replace("Z", "+00:00"))
        return True

    return fc


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=format_checker())


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    bad = total = 0
    for case in cases:
        schema = case["schema"]
        v = validator(schema)
        for text in case["texts"]:
            total += 1
            try:
                value = json.loads(text)
            except ValueError as e:
                bad += 1
                print(f"does not parse ({e}): {text!r}\n  schema {json.dumps(schema)}")
                continue
            errors = list(v.iter_errors(value))
            if errors:
                bad += 1
                print(f"invalid ({errors[0].message}): {text!r}\n  schema {json.dumps(schema)}")
    print(f"{total - bad} of {total} texts parse and validate")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
