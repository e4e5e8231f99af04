#!/usr/bin/env bash
# Builds the libFuzzer targets in the ASan+UBSan build directory (build-asan/,
# configured by scripts/sanitizer_tests.sh: one clang build serves the
# sanitizer tests and the fuzzers), replays every input that once crashed a
# target (tests/fuzz/regressions/<target>/), then runs each target for SECONDS
# seconds on its seed corpus. Exits non-zero if a build fails, a regression
# input crashes again, or a target finds a crash.
#
#   tests/fuzz/run_fuzzers.sh 20
# Seeds: tests/fuzz/corpus/<target>/ (protobuf inputs as text, encoded here
# with protoc), the example and bad model files, and the public conformance
# cases. MESHSERVE_FUZZ_SEED (default 1) fixes libFuzzer's seed so a CI run can
# be reproduced; a crash input found once belongs in tests/fuzz/regressions/.
set -u -o pipefail
SECONDS_EACH="${1:-20}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${MESHSERVE_FUZZ_BUILD_DIR:-${MESHSERVE_ASAN_DIR:-${ROOT}/build-asan}}"
CASES="${MESHSERVE_PUBLIC_CASES:-${ROOT}/../shared/conformance/sharding-rules/public-cases.json}"
JOBS="${JOBS:-$(nproc)}"
SEEDS="${ROOT}/tests/fuzz/corpus"
TARGETS=(partition_spec_fuzz sharding_text_fuzz rules_case_fuzz model_file_fuzz safetensors_fuzz
         npy_fuzz infer_request_fuzz program_fuzz data_chunk_fuzz bytes_field_wire_fuzz
         openai_request_fuzz rest_infer_request_fuzz generate_request_fuzz tokenizer_fuzz)

MESHSERVE_ASAN_DIR="${BUILD}" "${ROOT}/scripts/sanitizer_tests.sh" configure asan || exit 1
start=${SECONDS}
cmake --build "${BUILD}" -j"${JOBS}" --target "${TARGETS[@]}" >"${BUILD}.fuzz-build.log" 2>&1 \
  || { tail -40 "${BUILD}.fuzz-build.log"; echo "fuzzer build failed"; exit 1; }
echo "-- fuzzer build: $((SECONDS - start)) s"

CORPUS="${BUILD}/corpus"
rm -rf "${CORPUS}"
for t in "${TARGETS[@]}"; do mkdir -p "${CORPUS}/${t%_fuzz}"; done
# The sharding targets: every spec and every case of the public file, one per file.
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
printf "P('x', unreduced={'y'})" >"${CORPUS}/partition_spec/unreduced.txt"
printf "PartitionSpec(('a', 'b'), None)" >"${CORPUS}/partition_spec/tuple.txt"
cp "${CORPUS}/partition_spec/"* "${CORPUS}/sharding_text/"
printf "mesh[x=2,y=3,z=2:Auto]" >"${CORPUS}/sharding_text/mesh.txt"
printf "[0:4, 2:8]" >"${CORPUS}/sharding_text/box.txt"
# Model files: the examples and the bad models of the e2e tests.
cp "${ROOT}"/examples/models/*.json "${ROOT}"/tests/integration/models_bad/*.json \
   "${ROOT}"/tests/integration/testdata/*.json "${CORPUS}/model_file/"
cp "${SEEDS}"/safetensors/* "${ROOT}"/tests/integration/models_bad/*.safetensors \
   "${CORPUS}/safetensors/"
cp "${SEEDS}"/npy/* "${CORPUS}/npy/"
cp "${SEEDS}"/data_chunk/* "${CORPUS}/data_chunk/"
cp "${SEEDS}"/openai_request/* "${CORPUS}/openai_request/"
cp "${SEEDS}"/rest_infer_request/* "${CORPUS}/rest_infer_request/"
encode() {  # dir message proto
  for f in "${SEEDS}/$1"/*.txtpb; do
    protoc --proto_path="${ROOT}/proto" --encode="$2" "${ROOT}/proto/$3" <"${f}" \
      >"${CORPUS}/$1/$(basename "${f}" .txtpb).bin" || { echo "protoc failed on ${f}"; exit 1; }
  done
}
encode infer_request inference.ModelInferRequest inference.proto
encode generate_request meshserve.GenerateRequest generate.proto
encode bytes_field_wire meshserve.ParamChunk worker_service.proto
encode program meshserve.Program program.proto

status=0
for target in "${TARGETS[@]}"; do
  short=${target%_fuzz}
  dir="${CORPUS}/${short}"
  regressions=("${ROOT}/tests/fuzz/regressions/${short}"/*)
  if [[ -e "${regressions[0]}" ]]; then  # replayed once each; then part of the corpus
    if ! "${BUILD}/fuzz/${target}" "${regressions[@]}" >"${BUILD}/${target}.replay.log" 2>&1; then
      echo "FAIL ${target}: a regression input crashes again, see ${BUILD}/${target}.replay.log"
      tail -30 "${BUILD}/${target}.replay.log"
      status=1
      continue
    fi
    cp "${regressions[@]}" "${dir}/"
    echo "== ${target}: ${#regressions[@]} regression inputs replayed"
  fi
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
    echo "ok ${target} (corpus now $(ls "${dir}" | wc -l) inputs)"
  fi
done
exit ${status}
