#!/usr/bin/env python3
"""The docs' rules (docs/ is reference; dated run notes live in notebook/), checked:

- no dated line in docs/*.md: a date (2026-12-05), a month name with a day
  ("December 5", "5 Dec"), a clock time in UTC ("23:50 UTC") or a "stop N"
  stamp. The latest measured table may name the commit it was measured on;
  history goes to notebook/ (not checked) or to git;
- docs/PARAMETERS.md has at most 200 lines;
- every repo path that docs/*.md, README.md and each folder's README.md name
  exists in `git ls-files`. A repo path is a whitespace-separated word inside
  `backticks` that starts with one of the tree's top-level folders (as git
  lists them) and ends in a file name with an extension, e.g.
  `server/worker/peer_stream.h`; trailing punctuation and a ":line" or
  "#anchor" suffix are dropped. Words with a placeholder mark (* < > { } $ or
  "...") or a folder named in capitals (`examples/lm/NAME/config.json`) are
  skipped, and so are generated files (*.pb.h, *.pb.cc, *_pb2.py,
  *_pb2_grpc.py: build outputs). build/ is not a tracked folder, so build/
  outputs are never checked. Relative markdown links [text](target) are
  checked too, resolved from the file's folder (http(s):, mailto: and #
  links skipped);

  scripts/check_docs.py [ROOT]     exit 1 and a list when a rule is broken
"""
import os
import re
import subprocess
import sys

MAX_PARAMETERS_LINES = 200
MONTHS = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|"
          r"Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
DATED = [
    (re.compile(r"\b20\d\d-\d\d-\d\d\b"), "a date"),
    (re.compile(r"\b%s\.? \d{1,2}\b|\b\d{1,2} %s\b" % (MONTHS, MONTHS)), "a month and day"),
    (re.compile(r"\b\d{1,2}:\d\d(?:-\d{1,2}:\d\d)? UTC\b"), "a clock time"),
    (re.compile(r"\bstop \d+\b", re.IGNORECASE), "a 'stop N' stamp"),
]
PLACEHOLDER = re.compile(r"[*<>{}$]|\.\.\.")
GENERATED = re.compile(r"(\.pb\.h|\.pb\.cc|_pb2\.py|_pb2_grpc\.py)$")
BACKTICKED = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return {f for f in out if f}


def docs_to_check(files):
    docs = sorted(f for f in files if re.fullmatch(r"docs/[^/]+\.md", f))
    readmes = sorted(f for f in files if f == "README.md" or f.endswith("/README.md"))
    return docs, readmes


def dated_problems(path, lines):
    out = []
    for i, line in enumerate(lines, 1):
        for pattern, what in DATED:
            m = pattern.search(line)
            if m:
                out.append("%s:%d: %s (%r): dated notes go to notebook/" % (
                    path, i, what, m.group(0)))
                break
    return out


def path_problems(path, lines, files, dirs, top):
    out = []
    word_re = re.compile(r"^(?:%s)/[\w./+-]*\w\.\w+$" % "|".join(re.escape(t) for t in top))
    for i, line in enumerate(lines, 1):
        for span in BACKTICKED.findall(line):
            for word in span.split():
                word = word.rstrip(".,;:)]'\"").lstrip("(['\"")
                word = re.sub(r"(:\d+|#[\w-]*)$", "", word)
                if PLACEHOLDER.search(word) or GENERATED.search(word) or \
                        any(part.isupper() for part in word.split("/")[:-1]):
                    continue
                if word_re.match(word) and word not in files:
                    out.append("%s:%d: `%s` is not in git ls-files" % (path, i, word))
        for target in LINK.findall(line):
            if re.match(r"^(https?:|mailto:|#)", target):
                continue
            target = target.split("#")[0]
            full = os.path.normpath(os.path.join(os.path.dirname(path), target))
            if full not in files and full not in dirs:
                out.append("%s:%d: link (%s) is not in git ls-files" % (path, i, target))
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = tracked(root)
    dirs = {os.path.dirname(f) for f in files}
    dirs |= {d for f in dirs for d in [f.rsplit("/", k)[0] for k in range(f.count("/") + 1)]}
    top = sorted({f.split("/")[0] for f in files if "/" in f})
    docs, readmes = docs_to_check(files)
    problems = []
    for f in docs + readmes:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        if f in docs:
            problems += dated_problems(f, lines)
        problems += path_problems(f, lines, files, dirs, top)
        n = len(lines) - (lines[-1:] == [""])
        if f == "docs/PARAMETERS.md" and n > MAX_PARAMETERS_LINES:
            problems.append("%s: %d lines (at most %d)" % (f, n, MAX_PARAMETERS_LINES))
    print("\n".join(problems + ["check_docs: %d problem(s)" % len(problems)]))
    return int(bool(problems))


if __name__ == "__main__":
    sys.exit(main())
