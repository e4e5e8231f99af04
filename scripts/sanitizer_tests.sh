#!/usr/bin/env bash
# The tests again under sanitizers, each in its own clang build directory:
#   scripts/sanitizer_tests.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer
#       (build-asan/): every C++ unit and in-process integration test (ctest
#       without the Python e2e and conformance entries, which start the
#       release binaries). The same build carries libFuzzer's coverage, so
#       tests/fuzz/run_fuzzers.sh builds its targets there.
#   scripts/sanitizer_tests.sh tsan   ThreadSanitizer (build-tsan/): the tests
#       that run threads (TSAN_TESTS below).
#   scripts/sanitizer_tests.sh configure asan|tsan   configure only.
# Only test targets are built (-O1, line tables only). A sanitizer report
# fails its test (-fno-sanitize-recover=all, halt_on_error=1).
# Suppressions, each with its reason: tests/sanitizers/*.supp.
set -u -o pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
JOBS="${JOBS:-$(nproc)}"
ASAN_DIR="${MESHSERVE_ASAN_DIR:-${ROOT}/build-asan}"
TSAN_DIR="${MESHSERVE_TSAN_DIR:-${ROOT}/build-tsan}"
SUPP="${ROOT}/tests/sanitizers"

# The concurrency tests: executors, the rendezvous, the registry, fan-out,
# the batcher, the coordinator over fake and in-process workers, the worker
# engine and its params (loads reading peers while copying local pieces), the
# threaded small-m GEMM and metrics. Left out: the tests over real
# gRPC servers (worker_service_test, inference_client_test, ...): libgrpc is
# not instrumented and hands call buffers between its own threads through
# synchronization TSan cannot see, so TSan reports gRPC's internal handoffs
# (a memcpy in libgrpc.so racing with CallOpSet::FillOps), not our code.
TSAN_TESTS=(
  elastic_executor_test rendezvous_test deadline_timer_test worker_registry_test fan_out_test batcher_test
  coordinator_test coordinator_reliability_test calls_in_flight_test program_cache_test
  coordinator_limits_test
  param_push_test
  param_versions_test
  push_sessions_test
  param_pull_test params_pull_test calibration_test
  worker_engine_test
  in_process_workers_test param_state_test param_cache_test two_phase_all_reduce_test
  compiled_programs_engine_test gemm_small_m_test buffer_pool_test metric_registry_test
  generate_scheduler_test generator_test
  kv_cache_concurrency_test kv_cache_test cached_attention_test tokenizer_test completion_run_test
  kv_store_test
)

# allocator_may_return_null: a too-large allocation returns null, as malloc does, so
# that Tensor::Create's kResourceExhausted path runs instead of ASan aborting.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=${SUPP}/ubsan.supp"
export LSAN_OPTIONS="suppressions=${SUPP}/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=${SUPP}/tsan.supp"

configure() {  # kind dir
  local kind=$1 dir=$2 extra=()
  if [[ ${kind} == asan ]]; then
    extra=(-DMESHSERVE_SANITIZER=address -DMESHSERVE_BUILD_FUZZERS=ON)
  else
    extra=(-DMESHSERVE_SANITIZER=thread -DMESHSERVE_BUILD_FUZZERS=OFF)
  fi
  cmake -S "${ROOT}" -B "${dir}" -G Ninja \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    -DMESHSERVE_WERROR=OFF "${extra[@]}" >"${dir}.cmake.log" 2>&1 \
    || { echo "cmake failed, see ${dir}.cmake.log"; tail -20 "${dir}.cmake.log"; return 1; }
}

exec 3>&1  # timed's report goes to the script's stdout even when the command's is a log
timed() {  # label command...: runs it, prints its wall time
  local start=${SECONDS} rc
  "${@:2}"
  rc=$?
  echo "-- $1: $((SECONDS - start)) s (rc ${rc})" >&3
  return ${rc}
}

case "${1:-}" in
  configure)
    dir=${ASAN_DIR}; [[ ${2:-} == tsan ]] && dir=${TSAN_DIR}
    configure "${2:-asan}" "${dir}"
    ;;
  asan)
    configure asan "${ASAN_DIR}" || exit 1
    timed "asan build" cmake --build "${ASAN_DIR}" -j"${JOBS}" --target ms_tests \
      >"${ASAN_DIR}.build.log" 2>&1 \
      || { tail -40 "${ASAN_DIR}.build.log"; echo "asan build failed"; exit 1; }
    # Not here: the Python tests over the release binaries (e2e_*, the
    # conformance cases, cli_help_test), which this build does not make.
    timed "asan ctest" ctest --test-dir "${ASAN_DIR}" -LE "e2e|conformance" -E "^cli_help_test$" \
      --output-on-failure -j"${JOBS}" --timeout 900
    ;;
  tsan)
    configure tsan "${TSAN_DIR}" || exit 1
    timed "tsan build" cmake --build "${TSAN_DIR}" -j"${JOBS}" --target "${TSAN_TESTS[@]}" \
      >"${TSAN_DIR}.build.log" 2>&1 \
      || { tail -40 "${TSAN_DIR}.build.log"; echo "tsan build failed"; exit 1; }
    regex="^($(IFS='|'; echo "${TSAN_TESTS[*]}"))\$"
    timed "tsan ctest" ctest --test-dir "${TSAN_DIR}" -R "${regex}" \
      --output-on-failure -j"${JOBS}" --timeout 900
    ;;
  *)
    echo "usage: $0 asan|tsan|configure asan|tsan" >&2
    exit 2
    ;;
esac
