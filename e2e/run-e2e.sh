#!/usr/bin/env bash
# run-e2e.sh runs the end-to-end suite: installs host packages, builds the pinned cluster binaries (cached under
# e2e/.cache) and the exporter, then the tests of the e2e module. Must run as root (network namespaces); as
# another user the cluster tests skip and say why.
#
#   e2e/run-e2e.sh                      # the whole suite, in four shards side by side, then alone (below)
#   e2e/run-e2e.sh -run '^TestSoak$'    # arguments go to one plain `go test ./...` (no shards)
#
# The suite's tests share clusters that are expensive to start, and run one after another within a cluster
# (package e2e's doc). They spend most of their time waiting — for kube-proxy to sync, for a blackholed
# request to time out, for an alert's `for:` — so the whole suite runs as four processes of one test binary at
# once, each with the clusters of its own tests:
#   controllers  the tests of the cluster with controllers (kube-controller-manager, kube-scheduler, agents)
#   scale        the tests that bring a cluster of their own (scale, the oldest admitted Kubernetes)
#   shared-long  the longest waits of the shared cluster (a live Prometheus' for:, the soak, a browser, exporters
#                side by side through a minute of churn or a scrape gap)
#   shared       every other test, on a shared cluster of its own
# A test that calls controllerCluster belongs to controllers, one that brings its own cluster to scale
# (TestShardsCoverControllerTests holds these lists to the code); a new shared-cluster test lands in shared.
# The tests in alone run after the shards, each with the machine to itself (their clusters are their own or the
# controllers' cluster, started anew): a client that times its own losses to milliseconds misjudges them beside
# the shards, or beside lint and the unit tests, on two cores; a test that steps the machine's wall clock would
# step it under every other test too.
# Each shard's lines are prefixed with its name as they come.
set -euo pipefail
# sudo's secure_path drops Go's usual install directory.
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
here="$(cd "$(dirname "$0")" && pwd)"
export PATH="$PATH:/usr/sbin:/sbin"
if [[ $(id -u) -eq 0 ]]; then
	"$here/../scripts/install-deps.sh" packages
	# Prebuilt binaries when LT_E2E_BIN_DIR names them (make e2e E2E_BIN_DIR=...), else the cache's.
	[[ -n "${LT_E2E_BIN_DIR:-}" ]] || LT_E2E_BIN_DIR="$("$here/build-bins.sh")"
	export LT_E2E_BIN_DIR
fi
cd "$here"
timeout=50m
if (($#)); then
	exec go test -count=1 -timeout "$timeout" -v "$@" ./...
fi

# The shards' tests (see above). Anchored alternations: -test.skip takes them joined with |.
controllersShard='^(TestDrillLive|TestNodeAgentReadinessOnDemand|TestPluginDrill|TestPluginSchedulerScenarios|TestSchedulerSpreadWithoutHonor|TestSchedulerMaxSurgeParks|TestDrainLastReplica|TestScaleDown6To2|TestDaemonSetRollingUpdate|TestFidelityDaemonSetKeepsOffWindowsAndVirtualNodes|TestDeployInstallsWhereBaselineIsEnforced|TestPluginDrainCheck)$'
scaleShard='^(TestScaleRules|TestScaleMemory|TestScaleAPILoad|TestScaleCPUBesideKubeProxy|TestOldestAdmittedKubernetes)$'
# After the shards, alone (make e2e-exposure runs the first by itself): the first's client times its own losses to
# 20 ms, the second steps the machine's wall clock.
alone='^(TestExposureMatchesLostConnections|TestRestartThroughWallClockSteps)$'
sharedLongShard='^(TestAlertsOnLivePrometheus|TestAlertsOneNotificationPerService|TestSoak|TestLandingPageInBrowserDuringDrill|TestCadenceIndependentVerdicts|TestRulesModelEqualsFullReadUnderChurn|TestRotationCheckerWhileSampling|TestAnnouncerCiliumExternalIP)$'

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The oldest admitted Kubernetes (TestOldestAdmittedKubernetes, last in the scale shard) builds from the start, niced,
# in the cores the shards leave idle while they wait; the test waits for it (build-bins.sh holds a lock), and a
# failed build fails the test, which says why.
if [[ $(id -u) -eq 0 ]]; then
	(nice -n 10 "$here/build-bins.sh" --oldest 2>&1 >/dev/null | sed -u 's/^/[oldest-build] /') &
fi
# The other packages first (the harness, the leak checker, netns, the node agent, the drill): small.
mapfile -t others < <(go list ./... | grep -v '/e2e$')
go test -count=1 -timeout "$timeout" "${others[@]}"
go test -c -o "$work/e2e.test" .

pids=()
names=()
shard() { # shard <name> <test binary flags...>: runs in the background, lines prefixed
	local name="$1"
	shift
	("$work/e2e.test" -test.count=1 -test.timeout "$timeout" -test.v "$@" 2>&1 | tee "$work/$name.log" |
		sed -u "s/^/[$name] /"
		exit "${PIPESTATUS[0]}") &
	pids+=($!)
	names+=("$name")
}
shard controllers -test.run "$controllersShard"
shard scale -test.run "$scaleShard"
shard shared-long -test.run "$sharedLongShard"
shard shared -test.skip "$controllersShard|$scaleShard|$sharedLongShard|$alone"
# failures <log>: each failed test's own messages (file.go:N: lines with their continuation lines, and the
# --- FAIL lines), at most 80 lines a test. The shards' logs run to thousands of lines and CI keeps only their
# end, where this lands.
failures() {
	awk '
		function keep(line) { buf[top, n++ % 80] = line; cnt[top] = n }
		/^=== RUN   / { if ($3 !~ /\//) { top = $3; n = 0 } }
		/^ +[^ ]+\.go:[0-9]+: / { keep($0); msg = 1; next }
		msg && /^ +[^ ]/ && !/^ *(===|---) / { keep($0); next }
		{ msg = 0 }
		/^ *--- FAIL: / { keep($0) }
		/^--- FAIL: / {
			t = $3; m = cnt[t]; s = m > 80 ? m - 80 : 0
			for (i = s; i < m; i++) print buf[t, i % 80]
		}
		/^panic: / { print; p = 20 } p-- > 0 && !/^panic: / { print }
	' "$1"
}
# digest <log>: a failed test in three lines or fewer: its --- FAIL line and two messages, each joined with its
# continuation lines and cut to 360 characters. The two are its first failures (main_test.go's failPrefix: go
# test prints an error as it prints a log, and a scenario goes on logging after one), or, where it printed none
# so (a panic, a helper of another package), its last two. CI keeps a few dozen lines of the end of its output;
# the digest of every failed shard is printed last, after the alone tests, and appended to
# $LT_STAGES.failures, which the stage table prints after itself.
digest() {
	failures "$1" | awk '
		/^ *--- FAIL: / {
			sub(/^ +/, ""); print
			if (nf > 0) for (i = 0; i < nf && i < 2; i++) print "    " substr(m[f[i]], 1, 360)
			else for (i = n > 2 ? n - 2 : 0; i < n; i++) print "    " substr(m[i], 1, 360)
			n = 0; nf = 0; next
		}
		/\.go:[0-9]+: / { sub(/^ +/, ""); if ($0 ~ /^[^ ]+\.go:[0-9]+: error:? /) f[nf++] = n; m[n++] = $0; next }
		n > 0 { sub(/^ +/, ""); m[n - 1] = m[n - 1] " / " $0 }
	'
}
rc=0
digests=()
report() { # report <index>: the shard's failure, after it ended
	rc=1
	echo "run-e2e: the ${names[$1]} shard failed; its failed tests say:" >&2
	failures "$work/${names[$1]}.log" | sed "s/^/[${names[$1]}!] /" >&2
	digests+=("$(digest "$work/${names[$1]}.log" | sed "s/^/e2e ${names[$1]}: /")")
}
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || report "$i"
done
# The shards done (and, in CI, lint and the unit tests long before them), the machine is the alone tests'.
shard alone -test.run "$alone"
wait "${pids[-1]}" || report "$((${#pids[@]} - 1))"
if ((rc)); then
	echo "run-e2e: failed tests, in short:" >&2
	printf '%s\n' "${digests[@]}" >&2
	[[ -z "${LT_STAGES:-}" ]] || printf '%s\n' "${digests[@]}" >>"$LT_STAGES.failures"
fi
exit "$rc"
