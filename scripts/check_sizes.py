#!/usr/bin/env python3
"""The tree's size rules (docs/architecture.md, "Standing rules"), checked:

- a production .cc file (not *_test.cc, not under a testing/ folder, not a
  fuzz target or benchmark) has at most 450 lines;
- a function in such a file has at most 80 lines, unless the comment block
  right above it carries a written reason: a line containing "Over 80 lines:".

  scripts/check_sizes.py [ROOT]     exit 1 and a list when a rule is broken

Functions are found by brace matching at namespace level (a line ending in
"{" whose brace closes a body that is not a namespace, class, struct, enum or
an initializer); good enough for this tree's clang-format style.
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
REASON = "Over 80 lines:"
NOT_FUNCTION = re.compile(r"^\s*(namespace|class|struct|enum|union|extern)\b|=\s*\{$|^\s*(static\s+)?(const\s+)?(constexpr\s+)?[\w:<>,\s]*\s\w+\[\]\s*=")


def production_sources(root):
    files = subprocess.run(["git", "-C", root, "ls-files", "*.cc"], capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        parts = f.split("/")
        if f.endswith("_test.cc") or "testing" in parts or parts[0] in ("bench",) or \
                f.startswith("tests/") or f.endswith("_fuzz.cc"):
            continue
        yield f


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//")[0]


def functions(lines):
    """(start line index, end line index, has_reason) of each namespace-level body."""
    depth = 0
    in_raw = False
    start = None
    opened_at_depth = None
    out = []
    for i, raw in enumerate(lines):
        if 'R"(' in raw:
            in_raw = True
        if in_raw:
            if ')"' in raw:
                in_raw = False
            continue
        line = strip(raw)
        for ch in line:
            if ch == "{":
                if start is None and not NOT_FUNCTION.search(line.rstrip()) and \
                        _at_namespace_level(lines, i, depth):
                    start, opened_at_depth = i, depth
                depth += 1
            elif ch == "}":
                depth -= 1
                if start is not None and depth == opened_at_depth:
                    out.append((start, i, _has_reason(lines, start)))
                    start = None
    return out


_NS_DEPTH = {}


def _at_namespace_level(lines, i, depth):
    # Depth counts namespace braces too; a function body opens at the depth of
    # the enclosing namespaces. Track namespaces opened so far.
    ns = sum(1 for l in lines[:i] if re.match(r"^\s*namespace\b.*\{\s*$", strip(l))) - \
        sum(1 for l in lines[:i] if re.match(r"^\}\s*//\s*namespace", l))
    return depth == ns


def _has_reason(lines, start):
    j = start - 1
    # the signature may span lines above the brace line
    while j >= 0 and lines[j].strip() and not lines[j].lstrip().startswith("//") and \
            not lines[j].rstrip().endswith((";", "}")):
        j -= 1
    while j >= 0 and lines[j].lstrip().startswith("//"):
        if REASON in lines[j]:
            return True
        j -= 1
    return False


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    for f in production_sources(root):
        lines = open(os.path.join(root, f), encoding="utf-8").read().split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if n > MAX_FILE_LINES:
            problems.append("%s: %d lines (at most %d)" % (f, n, MAX_FILE_LINES))
        for s, e, reason in functions(lines):
            length = e - s + 1
            if length > MAX_FUNCTION_LINES and not reason:
                sig = lines[s].strip()
                problems.append("%s:%d: function of %d lines (at most %d, or a comment "
                                "'%s <why>' above it): %s" % (f, s + 1, length,
                                                              MAX_FUNCTION_LINES, REASON, sig))
    for p in problems:
        print(p)
    print("check_sizes: %d problem(s)" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
