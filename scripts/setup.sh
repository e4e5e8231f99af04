#!/usr/bin/env bash
# Installs what meshserve needs from Debian 12's packages (only what is
# missing), then configures and builds it into build/ (binaries in build/bin).
#
#   scripts/setup.sh            # install + build everything
#   MESHSERVE_BUILD_DIR=b scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# What builds the binaries (shared with deploy/Dockerfile), then what the
# tests, benchmarks and tools use.
mapfile -t PACKAGES < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/build-packages.txt)
PACKAGES+=(
  git
  python3 python3-numpy python3-grpcio
  python3-torch
  python3-sentencepiece
  python3-protobuf
  curl prometheus chromium
  python3-matplotlib
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD_DIR=${MESHSERVE_BUILD_DIR:-build}
# Warnings are errors here (GCC 12 builds the tree clean); MESHSERVE_WERROR=OFF
# in the environment turns that off for another compiler.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMESHSERVE_WERROR="${MESHSERVE_WERROR:-ON}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup: built into $BUILD_DIR/bin"
