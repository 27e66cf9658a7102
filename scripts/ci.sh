#!/usr/bin/env bash
# ci.sh is `make test`: every test there is, on a fresh Debian machine as root, in stages whose durations the
# log shows (scripts/stage.sh) and $LT_STAGES records for the table .ci/run prints at the end.
#
# Two cores do all the work, so the order follows the critical path, not habit. The longest chain is: build
# the cluster binaries (etcd and five Kubernetes commands, the largest build), build Prometheus and the release
# tools (goreleaser, the SBOM tool, krew: e2e's TestReleaseSnapshot), run the e2e suite (mostly waiting: its
# shards use a fraction of the cores). That chain runs in the background from the
# start at normal priority; everything else (lint, unit tests, fuzzing, the deploy and alert checks) runs in
# the foreground at a lower priority (nice), filling the cores the chain leaves idle — during the builds'
# serial links and the e2e suite's waits — without slowing the chain, whose tests have deadlines.
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

stage() { # stage <name> <command...>: in the foreground, at the foreground's lower priority
	nice -n 10 scripts/stage.sh "$@" || failed+=("$1")
}
fair() { # fair <name> <command...>: in the foreground at normal priority — for a stage with a time budget of
	# its own (fuzzing runs each target for a fixed time: niced, it would explore a fifth as much)
	scripts/stage.sh "$@" || failed+=("$1")
}
skip() { # skip <name> <reason>
	echo "<== $1: SKIPPED: $2"
	[[ -n "${LT_STAGES:-}" ]] && printf '%s %s %d %d\n' "$1" SKIPPED 0 $(($(date +%s) - LT_STAGES_T0)) >>"$LT_STAGES"
	failed+=("$1")
}

stage packages scripts/install-deps.sh packages || { echo "ci: host packages missing, nothing else can run" >&2; exit 1; }

# The critical path, in the background: its log follows when it ends (each line also names its stage).
# prometheus-tools marks its end for check-alerts, which needs promtool.
promtool_done="$logs/promtool-done"
(
	scripts/stage.sh cluster-binaries e2e/build-bins.sh || { echo "FAILED cluster-binaries" >"$logs/chain-failed"; exit 1; }
	scripts/stage.sh prometheus-tools scripts/install-deps.sh promtool prometheus
	rc=$?
	echo "$rc" >"$promtool_done"
	((rc == 0)) || { echo "FAILED prometheus-tools" >"$logs/chain-failed"; exit 1; }
	scripts/stage.sh release-tools scripts/install-deps.sh release || { echo "FAILED release-tools" >"$logs/chain-failed"; exit 1; }
	scripts/stage.sh e2e make --no-print-directory e2e || { echo "FAILED e2e" >"$logs/chain-failed"; exit 1; }
) 2>&1 | sed -u 's/^/[chain] /' &
chain=$!
echo "... cluster-binaries, prometheus-tools, release-tools, e2e run in the background, in that order; their lines start with [chain]"

stage lint make --no-print-directory lint
stage unit make --no-print-directory unit
fair fuzz make --no-print-directory fuzz-ci
stage check-deploy make --no-print-directory check-deploy
while [[ ! -e "$promtool_done" ]] && kill -0 "$chain" 2>/dev/null; do sleep 5; done
if [[ "$(cat "$promtool_done" 2>/dev/null)" == 0 ]]; then
	stage check-alerts make --no-print-directory check-alerts
else
	skip check-alerts "Prometheus' tools did not build"
fi

wait "$chain"
if [[ -e "$logs/chain-failed" ]]; then
	failed+=("$(cut -d' ' -f2 "$logs/chain-failed")")
	grep -q e2e "$logs/chain-failed" || skip e2e "$(cut -d' ' -f2 "$logs/chain-failed") failed"
fi

if ((${#failed[@]})); then
	echo "ci: failed: ${failed[*]}" >&2
	exit 1
fi
echo "ci: every stage passed"
