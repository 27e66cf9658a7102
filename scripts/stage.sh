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
name="$1"
shift
start="$(date +%s)"
echo "==> $name: $*"
"$@"
rc=$?
took=$(($(date +%s) - start))
status=ok
((rc == 0)) || status=FAILED
printf '<== %s: %s after %dm%02ds\n' "$name" "$status" $((took / 60)) $((took % 60))
if [[ -n "${LT_STAGES:-}" ]]; then
	printf '%s %s %d %d\n' "$name" "$status" "$took" $((start - ${LT_STAGES_T0:-start})) >>"$LT_STAGES"
fi
exit "$rc"
