#!/usr/bin/env bash
# stage.sh runs one stage of `make test` and records how long it took, so that the CI log says where the time
# went: it prints "==> <name>" before and "<== <name>: ok|FAILED after 3m07s" after, and appends
# "<name> <status> <seconds> <start offset>" to $LT_STAGES (when set; scripts/ci.sh prints the table from it).
#   scripts/stage.sh unit go test ./...
# The command's exit status is the stage's.
#   scripts/stage.sh --table <file> <total seconds> <exit status>   # the table of a run's stages
set -uo pipefail
if [[ "${1:-}" == --table ]]; then
	echo
	echo "Stages of make test (start offset and duration, minutes:seconds; background stages overlap others):"
	awk -v total="$3" -v rc="$4" '
		function mmss(s) { return sprintf("%d:%02d", s / 60, s % 60) }
		BEGIN { printf "| %-18s | %-7s | %6s | %8s |\n|--------------------|---------|--------|----------|\n", "stage", "status", "start", "duration" }
		{ printf "| %-18s | %-7s | %6s | %8s |\n", $1, $2, mmss($4), mmss($3) }
		END { printf "| %-18s | %-7s | %6s | %8s |\n", "total", rc == 0 ? "ok" : "FAILED", "0:00", mmss(total) }
	' "$2"
	# What a failed stage left for the very end of the log (run-e2e.sh: its failed tests, a few lines each).
	if [[ -s "$2.failures" ]]; then
		echo "Failed tests, in short (the stage's log has them whole):"
		tail -n 24 "$2.failures"
	fi
	exit 0
fi
# digest: a failed stage's go test output (not -v) in short, for $LT_STAGES.failures: each --- FAIL line with
# its first two messages (a message joined with its continuation lines, cut to 300 characters), or where no
# test failed (a panic, a timeout, a build error) the first lines of what go test said instead. A stage that
# writes its own digest there and says "failed tests, in short:" (the e2e suite: its shards run -v) is left to it.
digest() {
	awk -v name="$1" '
		function flush() { if (fail != "") { print name ": " fail; for (i = 0; i < n && i < 2; i++) print "    " substr(m[i], 1, 300) } fail = ""; n = 0 }
		/^ *--- FAIL: / { flush(); fail = $0; sub(/^ +/, "", fail); failed = 1; next }
		fail != "" && /^    +[^ ]+\.go:[0-9]+: / { s = $0; sub(/^ +/, "", s); m[n++] = s; next }
		fail != "" && n > 0 && /^     +[^ ]/ { s = $0; sub(/^ +/, "", s); m[n - 1] = m[n - 1] " / " s; next }
		{ flush() }
		/^(panic: |WARNING: DATA RACE|# |FAIL\t)/ && other < 6 { o[other++] = $0 }
		END { flush(); if (!failed) for (i = 0; i < other; i++) print name ": " substr(o[i], 1, 300) }
	'
}
name="$1"
shift
start="$(date +%s)"
echo "==> $name: $*"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if ((rc != 0)) && [[ -n "${LT_STAGES:-}" ]] && ! grep -q 'failed tests, in short:' "$out"; then
	digest "$name" <"$out" >>"$LT_STAGES.failures"
fi
took=$(($(date +%s) - start))
status=ok
((rc == 0)) || status=FAILED
printf '<== %s: %s after %dm%02ds\n' "$name" "$status" $((took / 60)) $((took % 60))
if [[ -n "${LT_STAGES:-}" ]]; then
	printf '%s %s %d %d\n' "$name" "$status" "$took" $((start - ${LT_STAGES_T0:-start})) >>"$LT_STAGES"
fi
exit "$rc"
