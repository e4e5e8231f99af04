#!/bin/sh
# Container entrypoint: `coordinator` or `worker` (or any command).
#   MESHSERVE_COORDINATOR   host:port of the coordinator   (worker; default coordinator:8500)
#   MESHSERVE_PORT          port to serve on               (default 8500 / 7000)
#   MESHSERVE_MODEL_DIR     model directory                (default /opt/meshserve/models)
#   MESHSERVE_MIN_WORKERS   workers to wait for before placing models (default 1)
set -e
role=${1:-coordinator}
shift || true
case "$role" in
  coordinator)
    exec meshserve-coordinator --host 0.0.0.0 --port "${MESHSERVE_PORT:-8500}" \
      --model_dir "${MESHSERVE_MODEL_DIR:-/opt/meshserve/models}" \
      --min_workers "${MESHSERVE_MIN_WORKERS:-1}" "$@" ;;
  worker)
    port=${MESHSERVE_PORT:-7000}
    # Peers and the coordinator reach this container by its own address.
    addr=$(hostname -i | awk '{print $1}')
    exec meshserve-worker --host 0.0.0.0 --port "$port" --advertise "$addr:$port" \
      --coordinator "${MESHSERVE_COORDINATOR:-coordinator:8500}" "$@" ;;
  *)
    exec "$role" "$@" ;;
esac
