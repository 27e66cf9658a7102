#!/usr/bin/env bash
# Proves scripts/fuzz.sh fails on a crasher and leaves it under testdata/fuzz, and fails a target that executes
# fewer inputs than its floor (run twice: a stalled machine gets a second run): a throwaway module whose one
# target fails on any input starting with 'x' (the fuzzer finds it within a second), one that never fails, and one
# that takes 200 ms an input (about 100 in each of its 10 s runs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/pkg"
printf 'module example.com/fuzzselftest\n\ngo 1.22\n' >"$tmp/go.mod"
cat >"$tmp/pkg/pkg_test.go" <<'GO'
package pkg

import (
	"testing"
	"time"
)

func FuzzCrashes(f *testing.F) {
	f.Add([]byte("a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 && b[0] == 'x' {
			t.Fatalf("crasher %q", b)
		}
	})
}

func FuzzSlow(f *testing.F) {
	f.Add(1)
	f.Fuzz(func(*testing.T, int) { time.Sleep(200 * time.Millisecond) })
}

func FuzzFine(f *testing.F) {
	f.Add(1)
	f.Fuzz(func(*testing.T, int) {})
}
GO
if FUZZTIME=10s "$here/fuzz.sh" "$tmp" >"$tmp/out" 2>&1; then
	cat "$tmp/out"; echo "fuzz self-test: fuzz.sh exited 0 despite a crasher" >&2; exit 1
fi
grep -q '^ok   ./pkg FuzzFine' "$tmp/out" || { cat "$tmp/out"; echo "fuzz self-test: FuzzFine did not run to completion" >&2; exit 1; }
grep -q '^FAIL ./pkg FuzzCrashes' "$tmp/out" || { cat "$tmp/out"; echo "fuzz self-test: FuzzCrashes not reported" >&2; exit 1; }
grep -q '^FAIL ./pkg FuzzSlow' "$tmp/out" && grep -q 'FuzzSlow: [0-9]* executions in 10s, fewer than the floor of [0-9]*: once more' "$tmp/out" &&
	grep -q 'FuzzSlow: [0-9]* executions in 10s, fewer than the floor of [0-9]* (FUZZMINEXECS)' "$tmp/out" ||
	{ cat "$tmp/out"; echo "fuzz self-test: FuzzSlow (below the execution floor) not reported" >&2; exit 1; }
ls "$tmp/pkg/testdata/fuzz/FuzzCrashes/"* >/dev/null 2>&1 || { echo "fuzz self-test: no crasher kept under testdata/fuzz" >&2; exit 1; }
# The kept file is a regression test: plain go test now fails on it.
if (cd "$tmp" && go test ./pkg/ >/dev/null 2>&1); then echo "fuzz self-test: kept crasher does not fail go test" >&2; exit 1; fi
echo "fuzz self-test: ok (crasher reported, kept, replayed by go test; a target below the execution floor runs again and fails)"
