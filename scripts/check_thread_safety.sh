#!/usr/bin/env bash
# clang's -Wthread-safety over the code that carries absl::Mutex annotations
# (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED, ABSL_LOCKS_EXCLUDED, ...).
#
#   scripts/check_thread_safety.sh [BUILD_DIR]
#
# gcc ignores the annotations, so the main build cannot check them. This
# re-runs, syntax-only (no code generation), every compile command of
# BUILD_DIR/compile_commands.json for our sources under common/base,
# common/metrics, server/ and client/ (a unity batch as one command; tests
# only when they declare annotated state themselves) with clang++ -Wthread-safety
# -Werror=thread-safety, so an
# unguarded access or a lock taken in the wrong order fails the test command.
# Needs a configured and built BUILD_DIR (generated protobuf headers).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-${MESHSERVE_BUILD_DIR:-build}}
command -v clang++ >/dev/null || { echo "check_thread_safety: clang++ not installed"; exit 1; }
[ -f "$BUILD_DIR/compile_commands.json" ] ||
  { echo "check_thread_safety: no $BUILD_DIR/compile_commands.json (configure first)"; exit 1; }
python3 - "$BUILD_DIR/compile_commands.json" "$PWD" <<'PY' > "$BUILD_DIR/thread_safety_commands.txt"
import json, os, shlex, sys
root = sys.argv[2]
DIRS = ("common/base/", "common/metrics/", "server/", "client/")
def sources(path):
    # A unity batch (MESHSERVE_UNITY_BUILD) stands for the sources it includes.
    if "/Unity/unity_" not in path:
        return [path]
    return [line.split('"')[1] for line in open(path) if line.startswith("#include")]
ANNOTATIONS = ("ABSL_GUARDED_BY", "ABSL_PT_GUARDED_BY", "LOCKS_REQUIRED", "ABSL_LOCKS_EXCLUDED",
               "ABSL_LOCK_RETURNED", "ABSL_ACQUIRED_")
def checked(path):
    # A test is checked when it declares annotated state of its own; the code it
    # calls is checked where it is defined (calls from outside a class cannot
    # name its private mutexes, so a test without annotations adds nothing).
    rel = os.path.relpath(path, root)
    if not rel.startswith(DIRS):
        return False
    if not rel.endswith("_test.cc"):
        return True
    text = open(path).read()
    return any(a in text for a in ANNOTATIONS)
for entry in json.load(open(sys.argv[1])):
    if not any(checked(s) for s in sources(entry["file"])):
        continue
    args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
    out, skip = ["clang++"], False
    for i, a in enumerate(args[1:], 1):
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        # GCC's precompiled header (MESHSERVE_TEST_PCH) is not clang's: the
        # sources include what they use, so the check goes without it.
        if a == "-include" and args[i + 1].endswith("cmake_pch.hxx"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD", "-Werror", "-Winvalid-pch") or a.endswith("ccache"):
            continue
        out.append(a)
    out += ["-fsyntax-only", "-Wno-unknown-warning-option", "-Wthread-safety",
            "-Werror=thread-safety"]
    print(entry["directory"] + "\t" + shlex.join(out))
PY
n=$(wc -l < "$BUILD_DIR/thread_safety_commands.txt")
echo "check_thread_safety: $n files"
failed=0
while IFS=$'\t' read -r dir cmd; do
  printf '%s\0%s\0' "$dir" "$cmd"
done < "$BUILD_DIR/thread_safety_commands.txt" |
  xargs -0 -n2 -P"$(nproc)" sh -c 'cd "$0" && eval "$1"' || failed=1
if [ "$failed" != 0 ]; then echo "check_thread_safety: FAILED"; exit 1; fi
echo "check_thread_safety: $n files, no thread-safety warning"
