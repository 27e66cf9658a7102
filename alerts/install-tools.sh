#!/usr/bin/env bash
# install-tools.sh installs the tools the alert tests need and prints nothing but errors. Idempotent: a tool
# already built from the pinned module version is kept.
#
#   alerts/install-tools.sh promtool                 # promtool check/test rules (make test)
#   alerts/install-tools.sh prometheus alertmanager  # the live drill in e2e/alerts_test.go
#
# promtool and prometheus come from the Go module proxy (github.com/prometheus/prometheus, pinned below; its
# go.mod has no replace directives, so `go install module@version` builds it as released). Building both takes
# a few minutes on two cores; the result is cached in $LT_TOOLS_BIN (default <repo>/.tools/bin, gitignored).
# alertmanager is Debian's prometheus-alertmanager package (the Go module lacks its UI assets and does not build
# from the module proxy); the package's own service is not used: the test runs the binary itself.
set -euo pipefail
PROMETHEUS_VERSION=v0.316.0
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${LT_TOOLS_BIN:-$repo/.tools/bin}"
mkdir -p "$bin"

# built_from reports whether binary $1 was built from github.com/prometheus/prometheus at $PROMETHEUS_VERSION.
built_from() {
	[[ -x "$1" ]] && go version -m "$1" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/prometheus/prometheus[[:space:]]+${PROMETHEUS_VERSION}([[:space:]]|$)"
}

install_go_tool() {
	local name="$1"
	if built_from "$bin/$name"; then
		return 0
	fi
	GOBIN="$bin" GOFLAGS=-buildvcs=false go install "github.com/prometheus/prometheus/cmd/$name@$PROMETHEUS_VERSION"
	built_from "$bin/$name" || { echo "install-tools: $bin/$name is not built from prometheus $PROMETHEUS_VERSION" >&2; exit 1; }
}

install_alertmanager() {
	if command -v prometheus-alertmanager >/dev/null 2>&1 || [[ -x /usr/bin/prometheus-alertmanager ]]; then
		return 0
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	# The package's postinst would start its service where an init system runs; the test never uses it.
	apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null
}

[[ $# -gt 0 ]] || set -- promtool
for tool in "$@"; do
	case "$tool" in
	promtool | prometheus) install_go_tool "$tool" ;;
	alertmanager) install_alertmanager ;;
	*)
		echo "install-tools: unknown tool $tool (promtool, prometheus, alertmanager)" >&2
		exit 2
		;;
	esac
done
