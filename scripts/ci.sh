#!/usr/bin/env bash
# ci.sh is `make test`: every test there is, on a fresh Debian machine as root, in stages whose durations the
# log shows (scripts/stage.sh) and $LT_STAGES records for the table .ci/run prints at the end.
#
# Two cores do all the work, so the order is chosen by what each stage waits for, not by habit:
#   - host packages first (apt; everything after needs some of them);
#   - the cluster binaries (etcd and five Kubernetes commands, the largest build), Prometheus' tools and the
#     release tools (goreleaser, syft, krew: e2e's TestReleaseSnapshot) start in the background at once and build
#     while the foreground stages run; the fuzzers, the real-kernel rule tests and the tests' own sleeps leave
#     CPU for them;
#   - the e2e suite last, once everything it runs is built.
# A failing stage does not stop the independent ones: one run reports every failure. A stage whose inputs
# failed is not run, and says so. The exit status is 1 when any stage failed.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo" || exit 1
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
export LT_STAGES_T0="${LT_STAGES_T0:-$(date +%s)}"
logs="$(mktemp -d)"
own_table=0 # run by hand (not .ci/run): print the table here
if [[ -z "${LT_STAGES:-}" ]]; then
	export LT_STAGES="$logs/stages"
	own_table=1
fi
finish() {
	local rc=$?
	((own_table)) && scripts/stage.sh --table "$LT_STAGES" $(($(date +%s) - LT_STAGES_T0)) "$rc"
	rm -rf "$logs"
}
trap finish EXIT
failed=()
declare -A pids

stage() { # stage <name> <command...>: in the foreground
	scripts/stage.sh "$@" || failed+=("$1")
}
background() { # background <name> <command...>: its log is printed when await collects it
	scripts/stage.sh "$@" >"$logs/$1.log" 2>&1 &
	pids[$1]=$!
	echo "... $1 runs in the background; its log follows when it ends"
}
await() { # await <name>: wait for a background stage, print its log; status 1 when it failed
	local rc=0
	wait "${pids[$1]}" || rc=$?
	sed "s/^/[$1] /" "$logs/$1.log"
	if ((rc != 0)); then
		failed+=("$1")
		return 1
	fi
}
skip() { # skip <name> <reason>
	echo "<== $1: SKIPPED: $2"
	[[ -n "${LT_STAGES:-}" ]] && printf '%s %s %d %d\n' "$1" SKIPPED 0 $(($(date +%s) - LT_STAGES_T0)) >>"$LT_STAGES"
	failed+=("$1")
}

stage packages scripts/install-deps.sh packages || { echo "ci: host packages missing, nothing else can run" >&2; exit 1; }
background cluster-binaries e2e/build-bins.sh
background prometheus-tools scripts/install-deps.sh promtool prometheus
background release-tools scripts/install-deps.sh release
stage lint make --no-print-directory lint
stage unit make --no-print-directory unit
stage fuzz make --no-print-directory fuzz-ci
stage check-deploy make --no-print-directory check-deploy
tools_ok=1
await prometheus-tools || tools_ok=0
if ((tools_ok)); then
	stage check-alerts make --no-print-directory check-alerts
else
	skip check-alerts "Prometheus' tools did not build"
fi
release_ok=1
await release-tools || release_ok=0
bins_ok=1
await cluster-binaries || bins_ok=0
if ((tools_ok && bins_ok && release_ok)); then
	stage e2e make --no-print-directory e2e
else
	skip e2e "the cluster binaries, Prometheus' tools or the release tools did not build"
fi

if ((${#failed[@]})); then
	echo "ci: failed: ${failed[*]}" >&2
	exit 1
fi
echo "ci: every stage passed"
