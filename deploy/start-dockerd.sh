#!/usr/bin/env bash
# Starts a Docker engine in the background if none answers (machines where only
# the client is installed). Installs docker.io and docker-compose if missing.
set -euo pipefail
if ! command -v dockerd >/dev/null || ! command -v docker-compose >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose
fi
if docker info >/dev/null 2>&1; then exit 0; fi
nohup dockerd --iptables=false --ip-masq=false >/tmp/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { echo "dockerd up"; exit 0; }
  sleep 1
done
echo "dockerd did not start; see /tmp/dockerd.log" >&2
exit 1
