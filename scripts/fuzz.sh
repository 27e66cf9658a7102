#!/usr/bin/env bash
# Runs every Fuzz target of every package of the Go modules under ROOT (default: the repository) for FUZZTIME
# each (default 2m), one after another. A target that fails leaves its crasher where go test writes it,
# <package>/testdata/fuzz/<Target>/<hash>: commit that file and it becomes a regression test that plain
# `go test` replays. Every target runs even after a failure; the exit status is 1 if any failed.
#   FUZZTIME=15s scripts/fuzz.sh          # what `make fuzz-ci` (part of `make test`) runs
#   scripts/fuzz.sh /path/to/module       # another tree (the self-test below uses one)
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
fuzztime="${FUZZTIME:-2m}"
go="${GO:-go}"
# Two fuzzing workers: the fuzzer's default is one per CPU, and CI machines are small.
parallel="${FUZZPARALLEL:-2}"
# A target that executes fewer inputs than this in its time found nothing because it tried nothing (seeded with
# whole rulesets, one target once ran 19 executions in 15 s where the others ran 30,000 and more): it fails. The
# floor sits well below what a healthy target runs on a loaded machine (FuzzParseKubeProxyTime once stalled at
# 966 beside the e2e suite), so it catches a target that cannot run, not a busy machine.
minexecs="${FUZZMINEXECS:-200}"
failed=()
summary=()
cd "$root" || exit 1
marker="$(mktemp)" # crashers written after this are new
trap 'rm -f "$marker"' EXIT
# Packages with a Fuzz target: found by grep first so that `go test -list` compiles only those.
mapfile -t dirs < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Z0-9_]' . 2>/dev/null |
	grep -v -e '/\.cache/' -e '/testdata/' | xargs -r -n1 dirname | sort -u)
for dir in "${dirs[@]}"; do
	# The module the package belongs to: the nearest go.mod above it.
	mod="$dir"
	while [ ! -f "$mod/go.mod" ] && [ "$mod" != "." ]; do mod="$(dirname "$mod")"; done
	rel="./${dir#"$mod"}"; rel="${rel/\/\//\/}"
	targets="$(cd "$mod" && "$go" test -list '^Fuzz' "$rel" | grep '^Fuzz')" || {
		echo "fuzz: listing the targets of $dir failed" >&2; failed+=("$dir (list)"); continue; }
	for t in $targets; do
		log="$(mktemp)"
		started="$(mktemp)" # this target's crashers are newer than this
		# Below the floor the target runs once more, and the second run decides: a machine that stalled every
		# worker for seconds (beside the e2e suite's release build, FuzzParseNFTJSON once ran 109 inputs and then
		# none for 12 s, where it runs thousands a second) recovers; a target that cannot run fails again.
		for attempt in 1 2; do
			(cd "$mod" && "$go" test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" -parallel "$parallel" "$rel") >"$log" 2>&1
			rc=$?
			execs="$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)"
			if [ $attempt -eq 1 ] && [ $rc -eq 0 ] && [ "${execs:-0}" -lt "$minexecs" ]; then
				echo "fuzz: $dir $t: ${execs:-0} executions in $fuzztime, fewer than the floor of $minexecs: once more" >&2
				continue
			fi
			break
		done
		# Go's fuzzing coordinator (go1.26) can fail a target with a bare "context deadline exceeded" when
		# -fuzztime ends while a worker is mid-call (go.dev/issue/75804, fixed in go1.27): no input failed and
		# no crasher is written. Only that, with no new crasher and the corpus replaying clean, is not a failure.
		if [ $rc -ne 0 ] && grep -qx $'\tcontext deadline exceeded\|    context deadline exceeded' "$log" &&
			[ -z "$(find "$dir/testdata/fuzz/$t" -type f -newer "$started" 2>/dev/null)" ] &&
			(cd "$mod" && "$go" test -count=1 -run "^${t}\$" "$rel") >>"$log" 2>&1; then
			echo "fuzz: $dir $t: the fuzzing coordinator's end-of-fuzztime race (go.dev/issue/75804), no crasher, corpus replays clean" >&2
			rc=0
		fi
		rm -f "$started"
		if [ $rc -eq 0 ] && [ "${execs:-0}" -lt "$minexecs" ]; then
			echo "fuzz: $dir $t: ${execs:-0} executions in $fuzztime, fewer than the floor of $minexecs (FUZZMINEXECS): seed it with small inputs" >&2
			rc=1
		fi
		if [ $rc -ne 0 ]; then
			cat "$log" >&2
			failed+=("$dir $t")
			summary+=("FAIL $dir $t execs=${execs:-0}")
		else
			summary+=("ok   $dir $t execs=${execs:-0}")
		fi
		rm -f "$log"
	done
done
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: ${#failed[@]} target(s) failed; crashers kept (commit them as regression tests):" >&2
	(cd "$root" && find . -path '*/testdata/fuzz/*' -type f -newer "$marker" 2>/dev/null | grep -v '/\.cache/') >&2
	exit 1
fi
