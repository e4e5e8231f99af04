#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang, core-only, ASan+UBSan)
# and runs each for SECONDS seconds on a seed corpus generated from the
# public conformance cases. Exits non-zero if a build fails or any target
# finds a crash.
#
#   tests/fuzz/run_fuzzers.sh 60
# MESHSERVE_FUZZ_SEED (default 1) fixes libFuzzer's seed so a CI run can be
# reproduced; a crash input found once belongs in tests/fuzz/regressions/.
set -u -o pipefail
SECONDS_EACH="${1:-60}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${ROOT}/build-fuzz"
CASES="${MESHSERVE_PUBLIC_CASES:-${ROOT}/../shared/conformance/sharding-rules/public-cases.json}"
JOBS="${JOBS:-2}"

cmake -S "${ROOT}" -B "${BUILD}" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMESHSERVE_CORE_ONLY=ON -DMESHSERVE_BUILD_FUZZERS=ON -DMESHSERVE_BUILD_TESTS=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
  >"${BUILD}.cmake.log" 2>&1 || { echo "cmake failed, see ${BUILD}.cmake.log"; exit 1; }
cmake --build "${BUILD}" -j"${JOBS}" --target partition_spec_fuzz sharding_text_fuzz rules_case_fuzz \
  || { echo "fuzzer build failed"; exit 1; }

CORPUS="${BUILD}/corpus"
mkdir -p "${CORPUS}/partition_spec" "${CORPUS}/rules_case" "${CORPUS}/sharding_text"
# Seed corpus: every spec and every case of the public file, one per file.
if [[ -f "${CASES}" ]]; then
  python3 - "${CASES}" "${CORPUS}" <<'PY'
import json, sys, os
cases = json.load(open(sys.argv[1]))
out = sys.argv[2]
def pyspec(spec):
    def e(x):
        if x is None: return "None"
        if isinstance(x, list): return "(" + ", ".join(repr(a) for a in x) + ("," if len(x) == 1 else "") + ")"
        return repr(x)
    return "P(" + ", ".join(e(x) for x in (spec or [])) + ")"
n = 0
for i, c in enumerate(cases):
    open(os.path.join(out, "rules_case", f"case{i}.json"), "w").write(json.dumps([c]))
    for inp in c.get("inputs", []):
        open(os.path.join(out, "partition_spec", f"spec{n}.txt"), "w").write(pyspec(inp.get("spec")))
        n += 1
open(os.path.join(out, "rules_case", "all.json"), "w").write(json.dumps(cases))
PY
fi
# Inputs that once crashed a target are kept in tests/fuzz/regressions/ and
# replayed first, every run.
for d in partition_spec rules_case; do
  if compgen -G "${ROOT}/tests/fuzz/regressions/${d}/*" >/dev/null; then
    cp "${ROOT}/tests/fuzz/regressions/${d}/"* "${CORPUS}/${d}/"
  fi
done
printf "P('x', unreduced={'y'})" >"${CORPUS}/partition_spec/unreduced.txt"
printf "PartitionSpec(('a', 'b'), None)" >"${CORPUS}/partition_spec/tuple.txt"
# The text-forms target starts from the spec seeds plus a mesh and a box.
cp "${CORPUS}/partition_spec/"* "${CORPUS}/sharding_text/"
printf "mesh[x=2,y=3,z=2:Auto]" >"${CORPUS}/sharding_text/mesh.txt"
printf "[0:4, 2:8]" >"${CORPUS}/sharding_text/box.txt"

status=0
for target in partition_spec_fuzz sharding_text_fuzz rules_case_fuzz; do
  dir="${CORPUS}/${target%_fuzz}"
  echo "== ${target}: ${SECONDS_EACH}s on $(ls "${dir}" | wc -l) seeds"
  mkdir -p "${BUILD}/artifacts/${target}"
  if ! "${BUILD}/fuzz/${target}" -max_total_time="${SECONDS_EACH}" -max_len=4096 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -seed="${MESHSERVE_FUZZ_SEED:-1}" \
      -artifact_prefix="${BUILD}/artifacts/${target}/" "${dir}" \
      >"${BUILD}/${target}.log" 2>&1; then
    echo "FAIL ${target}: see ${BUILD}/${target}.log and ${BUILD}/artifacts/${target}/"
    tail -30 "${BUILD}/${target}.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "${BUILD}/${target}.log" | tail -2
    echo "ok ${target}"
  fi
done
exit ${status}
