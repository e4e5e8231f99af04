#!/usr/bin/env bash
# Makes the `debian:bookworm-slim` base image locally when no image registry
# can be reached (a user with a registry does not need this: docker pulls it).
# Uses debootstrap against the apt mirror this machine already uses.
set -euo pipefail
if docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  echo "debian:bookworm-slim already present"; exit 0
fi
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
# The mirror: $MIRROR if set, else the URIs: of the first stanza of the
# machine's own apt sources (deb822) whose Suites: has bookworm (a third-party
# source listed first is skipped), else the first URIs: at all, else the first
# `deb` line of sources.list. No fallback host.
if [ -z "${MIRROR:-}" ]; then
  MIRROR=$(awk '
    function flush() { if (!done && uri != "" && suite) { print uri; done = 1 } uri = ""; suite = 0 }
    FNR == 1 { flush() }
    /^[[:space:]]*$/ { flush(); next }
    $1 == "URIs:" { uri = $2 }
    $1 == "Suites:" { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite = 1 }
    END { flush() }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
fi
if [ -z "${MIRROR:-}" ]; then
  MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
fi
if [ -z "${MIRROR:-}" ]; then
  MIRROR=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list 2>/dev/null || true)
fi
[ -n "${MIRROR:-}" ] || { echo "make-base-image: no apt mirror found in /etc/apt; set MIRROR=URL" >&2; exit 1; }
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR"
tar -C "$ROOTFS" -c . | docker import - debian:bookworm-slim
echo "imported debian:bookworm-slim from $MIRROR"
