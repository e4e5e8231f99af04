#!/usr/bin/env bash
# Makes the `debian:bookworm-slim` base image locally when no image registry
# can be reached (a user with a registry does not need this: docker pulls it).
# Uses debootstrap against the apt mirror this machine already uses.
set -euo pipefail
if docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  echo "debian:bookworm-slim already present"; exit 0
fi
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR"
tar -C "$ROOTFS" -c . | docker import - debian:bookworm-slim
echo "imported debian:bookworm-slim from $MIRROR"
