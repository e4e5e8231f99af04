#!/usr/bin/env bash
# The docker-compose check (tests/compose/compose_check.py) from nothing: a
# Docker engine (deploy/start-dockerd.sh), the base image where no registry is
# reachable (deploy/make-base-image.sh), the images (`docker-compose build`),
# the host's CLI and Python client (scripts/setup.sh), then the check.
#
#   tests/compose/run.sh            # as root (apt-get, dockerd)
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/start-dockerd.sh
deploy/make-base-image.sh
docker-compose build
[ -x build/bin/meshserve ] || scripts/setup.sh
exec /usr/bin/python3 tests/compose/compose_check.py --bin_dir build/bin "$@"
