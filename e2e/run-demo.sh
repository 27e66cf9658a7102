#!/usr/bin/env bash
# run-demo.sh is `make demo`: the blackhole drill on a real cluster on this machine, kept up until Ctrl-C.
# As root on a fresh Debian it installs the host tools it needs and builds the pinned binaries first (cached).
# Arguments go to the demo (-nodes N, -nftables-nodes N, -wait=false, -v).
set -euo pipefail
# sudo's secure_path drops Go's usual install directory.
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
here="$(cd "$(dirname "$0")" && pwd)"
export PATH="$PATH:/usr/sbin:/sbin"
if [[ $(id -u) -ne 0 ]]; then
	echo "demo: needs root for network namespaces (try: sudo make demo)" >&2
	exit 1
fi
"$here/../scripts/install-deps.sh" packages
echo "==> Building etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubectl (cached after the first run)" >&2
[[ -n "${LT_E2E_BIN_DIR:-}" ]] || LT_E2E_BIN_DIR="$("$here/build-bins.sh")"
export LT_E2E_BIN_DIR
cd "$here"
go build -o .cache/demo ./cmd/demo
exec .cache/demo "$@"
