#!/usr/bin/env bash
# install-deps.sh installs what the tests and the demo use, only what is missing; idempotent, and silent but
# for errors and what it installs. The one place tools come from:
#
#   scripts/install-deps.sh packages      # Debian packages, as root, in one apt transaction:
#                                         # iproute2 iptables nftables conntrack curl git (rule readers, cluster),
#                                         # chromium (the landing page's browser test),
#                                         # prometheus-alertmanager (the live alert drill; its service unused)
#   scripts/install-deps.sh promtool      # Prometheus' promtool   } built from the Go module proxy at the pinned
#   scripts/install-deps.sh prometheus    # Prometheus itself      } version into $LT_TOOLS_BIN (.tools/bin)
#   scripts/install-deps.sh               # all of the above (make deps)
#
# promtool and prometheus are built in one `go install` (their shared packages compile once) with Prometheus'
# own build tags that leave out every service discovery but Kubernetes' (remove_all_sd, enable_kubernetes_sd):
# the tests use only kubernetes_sd_configs and static targets, and the cloud SDKs were most of the build. A
# binary is rebuilt when `go version -m` shows another Prometheus version or other tags. Alertmanager comes
# from Debian: its Go module lacks the UI assets and does not build from the module proxy.
# The cluster binaries (etcd, Kubernetes) are e2e/build-bins.sh's: they are cached by their pinned go.mod.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
PROMETHEUS_VERSION=v0.316.0
PROMETHEUS_TAGS=remove_all_sd,enable_kubernetes_sd
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${LT_TOOLS_BIN:-$repo/.tools/bin}"

packages() {
	declare -A pkg=([ip]=iproute2 [iptables-legacy-save]=iptables [iptables-nft-save]=iptables [nft]=nftables
		[conntrack]=conntrack [curl]=curl [git]=git [chromium]=chromium [prometheus-alertmanager]=prometheus-alertmanager)
	local missing=() cmd
	for cmd in "${!pkg[@]}"; do
		command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg[$cmd]}")
	done
	((${#missing[@]})) || return 0
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: missing packages ${missing[*]}; run as root (or install them)" >&2
		return 1
	fi
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	echo "install-deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	# prometheus-alertmanager's postinst would start its service where an init system runs; nothing uses it.
	apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# built reports whether binary $1 was built from the pinned Prometheus with the pinned tags.
built() {
	[[ -x "$1" ]] || return 1
	local info
	info="$(go version -m "$1" 2>/dev/null)" || return 1
	grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/prometheus/prometheus[[:space:]]+${PROMETHEUS_VERSION}([[:space:]]|$)" <<<"$info" &&
		grep -Eq "^[[:space:]]+build[[:space:]]+-tags=${PROMETHEUS_TAGS}$" <<<"$info"
}

prometheus_tools() {
	local want=() t
	for t in "$@"; do
		built "$bin/$t" || want+=("github.com/prometheus/prometheus/cmd/$t@$PROMETHEUS_VERSION")
	done
	((${#want[@]})) || return 0
	mkdir -p "$bin"
	GOBIN="$bin" GOFLAGS=-buildvcs=false go install -tags "$PROMETHEUS_TAGS" "${want[@]}"
	for t in "$@"; do
		built "$bin/$t" || { echo "install-deps: $bin/$t is not Prometheus $PROMETHEUS_VERSION with tags $PROMETHEUS_TAGS" >&2; return 1; }
	done
}

(($#)) || set -- packages promtool prometheus
tools=()
for what in "$@"; do
	case "$what" in
	packages) packages ;;
	promtool | prometheus) tools+=("$what") ;;
	*)
		echo "install-deps: unknown $what (packages, promtool, prometheus)" >&2
		exit 2
		;;
	esac
done
((${#tools[@]} == 0)) || prometheus_tools "${tools[@]}"
