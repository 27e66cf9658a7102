#!/usr/bin/env bash
# install-deps.sh installs what the tests and the demo use, only what is missing; idempotent, and silent but
# for errors and what it installs. The one place tools come from:
#
#   scripts/install-deps.sh packages      # Debian packages, as root, in one apt transaction:
#                                         # iproute2 iptables nftables conntrack curl git (rule readers, cluster),
#                                         # chromium (the landing page's browser test),
#                                         # prometheus-alertmanager (the live alert drill; its service unused)
#   scripts/install-deps.sh netfilter     # only iproute2 iptables nftables: what the real-kernel tests of
#                                         # nodeprobe/kernelrules and nodeprobe/arrivals run (they call this)
#   scripts/install-deps.sh promtool      # Prometheus' promtool   } built from the Go module proxy at the pinned
#   scripts/install-deps.sh prometheus    # Prometheus itself      } version into $LT_TOOLS_BIN (.tools/bin)
#   scripts/install-deps.sh release       # the release pipeline's tools, built from the Go module proxy at
#                                         # pinned versions into $LT_TOOLS_BIN: goreleaser, syft (its SBOMs),
#                                         # krew and krew's validate-krew-manifest (the release test)
#   scripts/install-deps.sh lint          # staticcheck and actionlint (make lint), built from the Go module
#                                         # proxy at pinned versions into $LT_TOOLS_BIN
#   scripts/install-deps.sh vuln          # govulncheck (make vulncheck), the same way
#   scripts/install-deps.sh               # packages, promtool and prometheus (make deps)
#
# promtool and prometheus are built in one `go install` (their shared packages compile once) with Prometheus'
# own build tags that leave out every service discovery but Kubernetes' (remove_all_sd, enable_kubernetes_sd):
# the tests use only kubernetes_sd_configs and static targets, and the cloud SDKs were most of the build. A
# binary is rebuilt when `go version -m` shows another Prometheus version or other tags. Alertmanager comes
# from Debian: its Go module lacks the UI assets and does not build from the module proxy.
# The release tools are the versions .goreleaser.yaml is written for. Every tool built from the module proxy is
# rebuilt when `go version -m` shows another version of its module.
# The cluster binaries (etcd, Kubernetes) are e2e/build-bins.sh's: they are cached by their pinned go.mod.
# Every pinned version below has a `# renovate:` line above it: .github/renovate.json's regex manager reads the
# module (the Go module proxy's versions) from it and proposes updates (deploy/check/renovate_test.go holds every
# pin here to having one).
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
# renovate: datasource=go depName=github.com/prometheus/prometheus
PROMETHEUS_VERSION=v0.316.0
PROMETHEUS_TAGS=remove_all_sd,enable_kubernetes_sd
# The release pipeline's tools: binary, module, version, package.
RELEASE_TOOLS=(
	# renovate: datasource=go depName=github.com/goreleaser/goreleaser/v2
	"goreleaser github.com/goreleaser/goreleaser/v2 v2.15.1 github.com/goreleaser/goreleaser/v2"
	# renovate: datasource=go depName=github.com/anchore/syft
	"syft github.com/anchore/syft v1.57.1 github.com/anchore/syft/cmd/syft"
	# renovate: datasource=go depName=sigs.k8s.io/krew
	"krew sigs.k8s.io/krew v0.4.3 sigs.k8s.io/krew/cmd/krew"
	# renovate: datasource=go depName=sigs.k8s.io/krew
	"validate-krew-manifest sigs.k8s.io/krew v0.4.3 sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
# The linters make lint runs: binary, module, version, package. staticcheck's version must know the Go release
# go.mod names; actionlint checks the GitHub workflows.
LINT_TOOLS=(
	# renovate: datasource=go depName=honnef.co/go/tools
	"staticcheck honnef.co/go/tools v0.8.2 honnef.co/go/tools/cmd/staticcheck"
	# renovate: datasource=go depName=github.com/rhysd/actionlint
	"actionlint github.com/rhysd/actionlint v1.7.12 github.com/rhysd/actionlint/cmd/actionlint"
)
# govulncheck (make vulncheck): binary, module, version, package. It reads the Go vulnerability database at
# vuln.go.dev, so it runs where that is reachable (the GitHub workflow), not in make lint.
VULN_TOOLS=(
	# renovate: datasource=go depName=golang.org/x/vuln
	"govulncheck golang.org/x/vuln v1.10.0 golang.org/x/vuln/cmd/govulncheck"
)
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${LT_TOOLS_BIN:-$repo/.tools/bin}"

# missing_packages <command=package ...> prints the packages of the commands that are not installed, once each.
missing_packages() {
	local pair
	for pair in "$@"; do
		command -v "${pair%%=*}" >/dev/null 2>&1 || echo "${pair#*=}"
	done | sort -u
}

# packages <command=package ...>: installs the packages of the commands that are missing, as root. apt runs
# under a lock of our own: `go test` runs the real-kernel packages' tests side by side, and each may call this;
# the one that waited looks again once it holds the lock.
packages() {
	local missing
	mapfile -t missing < <(missing_packages "$@")
	((${#missing[@]})) || return 0
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: missing packages ${missing[*]}; run as root (or install them)" >&2
		return 1
	fi
	mkdir -p /run/lock
	exec {lock}>/run/lock/localtraffic-install-deps
	flock "$lock"
	mapfile -t missing < <(missing_packages "$@")
	if ((${#missing[@]})); then
		echo "install-deps: installing ${missing[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q >&2
		# prometheus-alertmanager's postinst would start its service where an init system runs; nothing uses it.
		apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
	fi
	exec {lock}>&-
}
NETFILTER=(ip=iproute2 iptables-legacy-save=iptables iptables-nft-save=iptables nft=nftables)
PACKAGES=("${NETFILTER[@]}" conntrack=conntrack curl=curl git=git chromium=chromium
	prometheus-alertmanager=prometheus-alertmanager)

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

# built_from reports whether binary $1 was built from module $2 at version $3.
built_from() {
	[[ -x "$1" ]] || return 1
	go version -m "$1" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)"
}

# go_tools <"binary module version package" ...> builds the tools that are missing or at another version, in one
# `go install` per module version (krew's two commands share their packages).
go_tools() {
	local line name mod ver pkg
	declare -A want=()
	for line in "$@"; do
		read -r name mod ver pkg <<<"$line"
		built_from "$bin/$name" "$mod" "$ver" || want["$mod@$ver"]+=" $pkg@$ver"
	done
	((${#want[@]})) || return 0
	mkdir -p "$bin"
	for line in "${!want[@]}"; do
		echo "install-deps: first use: building${want[$line]} from the Go module proxy into $bin (kept there: later runs need no network)" >&2
		# shellcheck disable=SC2086 # one word per package
		GOBIN="$bin" GOFLAGS=-buildvcs=false CGO_ENABLED=0 go install ${want[$line]}
	done
	for line in "$@"; do
		read -r name mod ver pkg <<<"$line"
		built_from "$bin/$name" "$mod" "$ver" || { echo "install-deps: $bin/$name is not $mod $ver" >&2; return 1; }
	done
}

(($#)) || set -- packages promtool prometheus
tools=()
for what in "$@"; do
	case "$what" in
	packages) packages "${PACKAGES[@]}" ;;
	netfilter) packages "${NETFILTER[@]}" ;;
	promtool | prometheus) tools+=("$what") ;;
	release) go_tools "${RELEASE_TOOLS[@]}" ;;
	lint) go_tools "${LINT_TOOLS[@]}" ;;
	vuln) go_tools "${VULN_TOOLS[@]}" ;;
	*)
		echo "install-deps: unknown $what (packages, netfilter, promtool, prometheus, release, lint, vuln)" >&2
		exit 2
		;;
	esac
done
((${#tools[@]} == 0)) || prometheus_tools "${tools[@]}"
