#!/bin/sh
# Makes a development CA and meshserve's two identities in DIR (created if
# missing; existing files are replaced):
#
#   ca.pem                  the cluster's CA (self-signed; its key ca.key stays in DIR)
#   member.pem, member.key  coordinator and workers: CN=meshserve-member,
#                           URI SAN spiffe://meshserve/member (the identity the
#                           servers check), extendedKeyUsage serverAuth+clientAuth,
#                           DNS/IP SANs localhost, 127.0.0.1, meshserve-member (the
#                           name cluster-internal channels verify, whatever address a
#                           peer has), the compose services (coordinator, worker) and
#                           the Kubernetes Services (meshserve-coordinator, ...)
#   client.pem, client.key  clients: CN=meshserve-client, URI SAN
#                           spiffe://meshserve/client, extendedKeyUsage clientAuth
#
#   scripts/make-dev-certs.sh DIR [EXTRA_DNS_NAME ...]
#
# Extra arguments are added to the member certificate's DNS SANs (a host name
# clients use to reach the coordinator). For development only: the CA key is
# unencrypted. Needs openssl (installed with apt-get when missing, as root).
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [EXTRA_DNS_NAME ...]" >&2
  exit 2
fi
dir=$1
shift
if ! command -v openssl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y openssl >/dev/null
  else
    echo "$0: openssl is missing (apt-get install -y openssl)" >&2
    exit 1
  fi
fi
mkdir -p "$dir"
days=825
sans="DNS:localhost,IP:127.0.0.1,DNS:meshserve-member,DNS:coordinator,DNS:worker"
sans="$sans,DNS:meshserve-coordinator,DNS:meshserve-coordinator.default.svc"
sans="$sans,DNS:meshserve-coordinator.default.svc.cluster.local"
sans="$sans,DNS:*.meshserve-worker.default.svc.cluster.local"
for name in "$@"; do sans="$sans,DNS:$name"; done
sans="$sans,URI:spiffe://meshserve/member"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/member.ext" <<MEXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$sans
MEXT
cat >"$tmp/client.ext" <<CEXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
subjectAltName=URI:spiffe://meshserve/client
CEXT

openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" \
  -subj "/O=meshserve/CN=meshserve development CA" \
  -keyout "$dir/ca.key" -out "$dir/ca.pem" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }

# issue NAME CN: NAME.key, NAME.pem signed by the CA with NAME.ext.
issue() {
  openssl req -new -newkey rsa:2048 -nodes -sha256 -subj "/O=meshserve/CN=$2" \
    -keyout "$dir/$1.key" -out "$tmp/$1.csr" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
  openssl x509 -req -sha256 -days "$days" -in "$tmp/$1.csr" -CA "$dir/ca.pem" \
    -CAkey "$dir/ca.key" -CAcreateserial -CAserial "$tmp/ca.srl" -extfile "$tmp/$1.ext" \
    -out "$dir/$1.pem" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
}
issue member meshserve-member
issue client meshserve-client
chmod 600 "$dir/ca.key" "$dir/member.key" "$dir/client.key"
# Containers run the servers as another user than the one making the files.
chmod 644 "$dir/ca.pem" "$dir/member.pem" "$dir/client.pem"
echo "make-dev-certs: CA, member and client certificates in $dir"
