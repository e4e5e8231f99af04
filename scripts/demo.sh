#!/usr/bin/env bash
# The README's main command (after scripts/setup.sh has built build/bin):
# starts `meshserve local` with 8 workers serving examples/models, waits for
# `ready`, sends a request to `linear` (the seed's first example) and to
# `swiglu` (the seed's FSDP+TP block, also with a per-request out_sharding),
# prints each result's JAX type string and sharding grid, shows how swiglu is
# typed at the seed's shapes (`describe`) and the cluster (`status`), then
# stops the cluster.
#
# Environment: MESHSERVE_BIN_DIR (build/bin), MESHSERVE_PORT (8500, or a free
# port if 8500 is taken), MESHSERVE_WORKERS (8), MESHSERVE_MODEL_DIR
# (examples/models).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${MESHSERVE_BIN_DIR:-build/bin}
WORKERS=${MESHSERVE_WORKERS:-8}
MODEL_DIR=${MESHSERVE_MODEL_DIR:-examples/models}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
for b in meshserve meshserve-coordinator meshserve-worker; do
  [ -x "$BIN/$b" ] || { echo "demo: $BIN/$b not built (run scripts/setup.sh)" >&2; exit 1; }
done

port_free() { "$PY" -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1])))" "$1" 2>/dev/null; }
if [ -n "${MESHSERVE_PORT:-}" ]; then
  PORT=$MESHSERVE_PORT
elif port_free 8500; then
  PORT=8500
else
  PORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
fi
TARGET=127.0.0.1:$PORT

WORK=$(mktemp -d /tmp/meshserve-demo-XXXXXX)
LOCAL_PID=""
cleanup() {
  if [ -n "$LOCAL_PID" ] && kill -0 "$LOCAL_PID" 2>/dev/null; then
    kill -TERM "$LOCAL_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$LOCAL_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$LOCAL_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n=== %s\n' "$*"; }

step "meshserve local --workers $WORKERS --model_dir $MODEL_DIR --port $PORT"
"$BIN/meshserve" local --workers "$WORKERS" --model_dir "$MODEL_DIR" --port "$PORT" \
  --log_dir "$WORK/logs" >"$WORK/local.out" 2>"$WORK/local.err" &
LOCAL_PID=$!
for _ in $(seq 1 3000); do  # up to 300 s
  if grep -q "ready" "$WORK/local.out" 2>/dev/null; then break; fi
  if ! kill -0 "$LOCAL_PID" 2>/dev/null; then
    cat "$WORK/local.out" "$WORK/local.err" >&2
    echo "demo: meshserve local exited before ready" >&2
    exit 1
  fi
  sleep 0.1
done
if ! grep -q "ready" "$WORK/local.out"; then
  cat "$WORK/local.out" "$WORK/local.err" >&2
  echo "demo: not ready after 300 s (logs: $WORK/logs)" >&2
  exit 1
fi
grep "ready" "$WORK/local.out"

"$PY" - "$WORK" <<'EOF'
import sys
import numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/x_linear.npy", rng.standard_normal((64, 32)).astype(np.float32))
np.save(sys.argv[1] + "/x_swiglu.npy", rng.standard_normal((8, 16, 2048)).astype(np.float32))
EOF

step "linear: nnx.Linear(32, 32), kernel P(None, 'data'), x P('data'), out_sharding P('data')"
"$BIN/meshserve" infer --target "$TARGET" --model linear --input "x=$WORK/x_linear.npy" \
  --output_dir "$WORK/out"

step "swiglu: FSDP + TP, down_proj with out_sharding P('fsdp', None, 'model')"
"$BIN/meshserve" infer --target "$TARGET" --model swiglu --input "x=$WORK/x_swiglu.npy" \
  --output_dir "$WORK/out"

step "swiglu with a per-request out_sharding y=P('fsdp', None, None) (all-reduce over model)"
"$BIN/meshserve" infer --target "$TARGET" --model swiglu --input "x=$WORK/x_swiglu.npy" \
  --out_sharding "y=P('fsdp', None, None)" --output_dir "$WORK/out2"
"$PY" -c "import numpy as np, sys; a=np.load(sys.argv[1]); b=np.load(sys.argv[2]); \
print('same values under both out_shardings: max |diff| = %.3g' % float(np.max(np.abs(a-b))))" \
  "$WORK/out/y.npy" "$WORK/out2/y.npy"

step "describe swiglu at the seed's shapes (x = [8, 4096, 2048])"
"$BIN/meshserve" describe --target "$TARGET" swiglu --input_shape x=8,4096,2048

step "status"
"$BIN/meshserve" status --target "$TARGET"

step "stopping the cluster"
kill -TERM "$LOCAL_PID"
wait "$LOCAL_PID" || true
LOCAL_PID=""
cat "$WORK/local.out"
