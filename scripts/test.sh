#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test:
#   1. the size rules (scripts/check_sizes.py) and the docs rules
#      (scripts/check_docs.py: no dated lines in docs/*.md, every repo path the
#      docs and READMEs name exists), two required stages;
#   2. all unit, property and integration tests (ctest);
#   3. the public sharding-rule conformance cases;
#   4. clang's -Wthread-safety over the annotated code (scripts/check_thread_safety.sh);
#   5. the C++ unit and in-process integration tests again under AddressSanitizer
#      + UndefinedBehaviorSanitizer (scripts/sanitizer_tests.sh asan, build-asan/);
#   6. the libFuzzer targets, built in that same directory, each for a bounded
#      time after replaying its regression inputs (MESHSERVE_FUZZ_SECONDS,
#      default 20 each);
#   7. the concurrency tests under ThreadSanitizer (scripts/sanitizer_tests.sh
#      tsan, build-tsan/).
# MESHSERVE_SANITIZERS=0 skips stages 4-7 (a quick local run).
#
# Time budget. MESHSERVE_TEST_BUDGET_S (default 4500 s, 0 = none) bounds the
# whole run, setup included, so that a slow machine ends with a report instead
# of being killed by CI's limit. Stages 1-3 are required: one cut short by the
# budget fails. Stages 4-7 are extra checks in cost order: one that would start
# with less than MESHSERVE_STAGE_MIN_S (default 300 s) of budget left is not
# run, and one the budget cuts short is reported as cut short; neither fails
# the run, and both are named in the last line.
# Runs every stage; exits non-zero if any failed; prints
# "stages: N passed, N failed, N not run" last.
set -uo pipefail
cd "$(dirname "$0")/.."
BUDGET=${MESHSERVE_TEST_BUDGET_S:-4500}
STAGE_MIN=${MESHSERVE_STAGE_MIN_S:-300}
RESERVE=30  # seconds kept for the report after the last stage

if [ "$BUDGET" = 0 ]; then
  scripts/setup.sh || exit 1
else
  # From a terminal, --foreground lets sudo ask for a password (then only
  # setup.sh itself is timed out, not the build it started).
  fg=(); [ -t 0 ] && fg=(--foreground)
  timeout "${fg[@]}" -k 20 $((BUDGET - RESERVE)) scripts/setup.sh
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "=== setup: FAILED, not finished within the ${BUDGET} s budget ($SECONDS s)"
    exit 1
  fi
  [ "$rc" = 0 ] || exit 1
fi
echo "=== setup: $SECONDS s"
BUILD_DIR=${MESHSERVE_BUILD_DIR:-build}
passed=0
failed=0
not_run=()

left() { echo $((BUDGET - SECONDS - RESERVE)); }

# stage required|extra name command...: runs the command within the budget left
# and prints its wall time.
stage() {
  local kind=$1 name=$2 start=$SECONDS rc limit
  shift 2
  if [ "$BUDGET" != 0 ] && [ "$kind" = extra ] && [ "$(left)" -lt "$STAGE_MIN" ]; then
    echo "=== $name: not run ($((BUDGET - SECONDS)) s of the ${BUDGET} s budget left)"
    not_run+=("$name")
    return
  fi
  echo "=== $name"
  if [ "$BUDGET" = 0 ]; then
    "$@"
  else
    limit=$(left)
    [ "$limit" -gt 0 ] || limit=1
    timeout -k 20 "$limit" "$@"
  fi
  rc=$?
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1)); echo "=== $name: ok ($((SECONDS - start)) s)"
  elif [ "$BUDGET" != 0 ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ "$kind" = extra ]; then
    echo "=== $name: cut short by the ${BUDGET} s budget after $((SECONDS - start)) s (not a failure)"
    not_run+=("$name (cut short)")
  elif [ "$BUDGET" != 0 ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; }; then
    failed=$((failed + 1))
    echo "=== $name: FAILED, cut short by the ${BUDGET} s budget after $((SECONDS - start)) s"
  else
    failed=$((failed + 1)); echo "=== $name: FAILED ($((SECONDS - start)) s, rc $rc)"
  fi
}

stage required "size rules (scripts/check_sizes.py)" python3 scripts/check_sizes.py
stage required "docs rules (scripts/check_docs.py)" python3 scripts/check_docs.py
stage required "ctest" ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --timeout 600
CONF=../shared/conformance/sharding-rules
if [ -f "$CONF/check.py" ]; then
  stage required "conformance (public sharding-rule cases)" \
    python3 "$CONF/check.py" "$CONF/public-cases.json" -- "$BUILD_DIR/bin/meshserve" rules
else
  echo "=== conformance: skipped ($CONF not found beside the checkout)"
fi
if [ "${MESHSERVE_SANITIZERS:-1}" != 0 ]; then
  stage extra "thread safety (clang -Wthread-safety)" scripts/check_thread_safety.sh "$BUILD_DIR"
  stage extra "asan+ubsan tests (scripts/sanitizer_tests.sh asan)" scripts/sanitizer_tests.sh asan
  stage extra "fuzzers (tests/fuzz/run_fuzzers.sh)" tests/fuzz/run_fuzzers.sh "${MESHSERVE_FUZZ_SECONDS:-20}"
  stage extra "tsan tests (scripts/sanitizer_tests.sh tsan)" scripts/sanitizer_tests.sh tsan
else
  echo "=== thread safety, sanitizers and fuzzers: skipped (MESHSERVE_SANITIZERS=0)"
fi

summary="stages: $passed passed, $failed failed, ${#not_run[@]} not run"
if ((${#not_run[@]})); then
  summary+=" ($(IFS=';'; echo "${not_run[*]}"); budget ${BUDGET} s, MESHSERVE_TEST_BUDGET_S=0 runs all)"
fi
echo "total: ${SECONDS} s"
echo "$summary"
[ "$failed" = 0 ]
