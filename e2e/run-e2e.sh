#!/usr/bin/env bash
# run-e2e.sh runs the end-to-end suite: installs host tools, builds the pinned cluster binaries (cached under
# e2e/.cache) and the exporter, then `go test` in the e2e module. Extra arguments go to go test (e.g. -run Drill).
# Must run as root (network namespaces); as another user the tests skip and say why.
set -euo pipefail
# sudo's secure_path drops Go's usual install directory.
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
here="$(cd "$(dirname "$0")" && pwd)"
export PATH="$PATH:/usr/sbin:/sbin"
if [[ $(id -u) -eq 0 ]]; then
	"$here/../scripts/install-deps.sh" packages
	LT_E2E_BIN_DIR="$("$here/build-bins.sh")"
	export LT_E2E_BIN_DIR
fi
cd "$here"
exec go test -count=1 -timeout 50m -v "$@" ./...
