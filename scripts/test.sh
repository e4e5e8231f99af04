#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test:
#   1. the size rules (scripts/check_sizes.py) and clang's -Wthread-safety over
#      the annotated code (scripts/check_thread_safety.sh);
#   2. all unit, property and integration tests (ctest);
#   3. the public sharding-rule conformance cases;
#   4. the C++ unit and in-process integration tests again under AddressSanitizer
#      + UndefinedBehaviorSanitizer (scripts/sanitizer_tests.sh asan, build-asan/);
#   5. the libFuzzer targets, built in that same directory, each for a bounded
#      time after replaying its regression inputs (MESHSERVE_FUZZ_SECONDS,
#      default 20 each);
#   6. the concurrency tests under ThreadSanitizer (scripts/sanitizer_tests.sh
#      tsan, build-tsan/).
# MESHSERVE_SANITIZERS=0 skips stages 4-6 (a quick local run).
# Runs every stage; exits non-zero if any failed; prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

BUILD_DIR=${MESHSERVE_BUILD_DIR:-build}
passed=0
failed=0
stage() {  # name, command...; prints the stage's wall time
  local name=$1 start=$SECONDS; shift
  echo "=== $name"
  if "$@"; then passed=$((passed + 1)); echo "=== $name: ok ($((SECONDS - start)) s)"
  else failed=$((failed + 1)); echo "=== $name: FAILED ($((SECONDS - start)) s)"; fi
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
if [ "${MESHSERVE_SANITIZERS:-1}" != 0 ]; then
  stage "asan+ubsan tests (scripts/sanitizer_tests.sh asan)" scripts/sanitizer_tests.sh asan
  stage "fuzzers (tests/fuzz/run_fuzzers.sh)" tests/fuzz/run_fuzzers.sh "${MESHSERVE_FUZZ_SECONDS:-20}"
  stage "tsan tests (scripts/sanitizer_tests.sh tsan)" scripts/sanitizer_tests.sh tsan
else
  echo "=== sanitizers and fuzzers: skipped (MESHSERVE_SANITIZERS=0)"
fi

echo "stages: $passed passed, $failed failed"
[ "$failed" = 0 ]
