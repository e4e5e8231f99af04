#!/usr/bin/env python3
"""Runs `meshserve rules` on tests/conformance/extra-cases.json and checks it.

usage: run_extra_cases.py --meshserve BIN [--cases FILE]

Every case names its source (a JAX test or source line) in "source". A case
passes when the outcome kind matches; for results the spec is equal after
canonicalisation (a one-name list equals the name, [] equals null, trailing
nulls ignored) and "unreduced", "varying" and "type_str" are equal where
expected; for errors the expected phrase must be in the message. Exit 0 only
when every case passes; 77 (skipped) when the binary is missing.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def canon_spec(spec):
    out = []
    for e in spec or []:
        if isinstance(e, list):
            e = None if not e else (e[0] if len(e) == 1 else tuple(e))
        out.append(e)
    while out and out[-1] is None:
        out.pop()
    return tuple(out)


def check(case, got):
    exp = case["expect"]
    if got is None:
        return "no output line"
    if "error" in exp:
        if "error" not in got:
            return f"expected an error with {exp['error']!r}, got {got}"
        if exp["error"].lower() not in got["error"].lower():
            return f"error {got['error']!r} lacks {exp['error']!r}"
        return None
    if "error" in got:
        return f"expected spec {exp.get('spec')}, got error {got['error']!r}"
    if canon_spec(got.get("spec")) != canon_spec(exp.get("spec")):
        return f"spec {got.get('spec')} != expected {exp.get('spec')}"
    for key in ("unreduced", "varying"):
        if key in exp and sorted(got.get(key) or []) != sorted(exp[key]):
            return f"{key} {got.get(key)} != expected {exp[key]}"
    if "type_str" in exp and got.get("type_str") != exp["type_str"]:
        return f"type_str {got.get('type_str')!r} != expected {exp['type_str']!r}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshserve", required=True)
    ap.add_argument("--cases", default=os.path.join(HERE, "extra-cases.json"))
    args = ap.parse_args()
    if not os.access(args.meshserve, os.X_OK):
        print(f"skipped: {args.meshserve} is not built")
        return 77
    cases = json.load(open(args.cases))
    missing = [c["id"] for c in cases if not c.get("source")]
    if missing:
        print(f"cases without a source: {missing}")
        return 1
    proc = subprocess.run([args.meshserve, "rules", args.cases], capture_output=True,
                          text=True, timeout=120)
    got = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            obj = json.loads(line)
            got[obj.get("id")] = obj
    failures = 0
    for case in cases:
        why = check(case, got.get(case["id"]))
        if why is not None:
            failures += 1
            print(f"FAIL {case['id']} ({case['op']}; {case['source']}): {why}")
    print(f"{len(cases) - failures}/{len(cases)} cases pass")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
