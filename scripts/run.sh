#!/usr/bin/env bash
# The main job: install and build (scripts/setup.sh), then start a local
# cluster serving the seed's models and query it (scripts/demo.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec scripts/demo.sh "$@"
