#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test:
#   1. the size rules (scripts/check_sizes.py) and clang's -Wthread-safety over
#      the annotated code (scripts/check_thread_safety.sh);
#   2. all unit, property and integration tests (ctest);
#   3. the public sharding-rule conformance cases;
#   4. the libFuzzer targets for a bounded time (MESHSERVE_FUZZ_SECONDS, default 60 each).
# Runs every stage; exits non-zero if any failed; prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

BUILD_DIR=${MESHSERVE_BUILD_DIR:-build}
passed=0
failed=0
stage() {  # name, command...
  local name=$1; shift
  echo "=== $name"
  if "$@"; then passed=$((passed + 1)); echo "=== $name: ok"
  else failed=$((failed + 1)); echo "=== $name: FAILED"; fi
}

stage "size rules (scripts/check_sizes.py)" python3 scripts/check_sizes.py
stage "thread safety (clang -Wthread-safety)" scripts/check_thread_safety.sh "$BUILD_DIR"
stage "ctest" ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --timeout 600
CONF=../shared/conformance/sharding-rules
if [ -f "$CONF/check.py" ]; then
  stage "conformance (public sharding-rule cases)" \
    python3 "$CONF/check.py" "$CONF/public-cases.json" -- "$BUILD_DIR/bin/meshserve" rules
else
  echo "=== conformance: skipped ($CONF not found beside the checkout)"
fi
if [ -x tests/fuzz/run_fuzzers.sh ]; then
  stage "fuzzers" tests/fuzz/run_fuzzers.sh "${MESHSERVE_FUZZ_SECONDS:-60}"
fi

echo "stages: $passed passed, $failed failed"
[ "$failed" = 0 ]
