#!/usr/bin/env bash
# release-notes.sh vX.Y.Z prints the section of CHANGELOG.md for that version (Keep a Changelog: the lines under
# "## [X.Y.Z] - YYYY-MM-DD" up to the next "## ["), which `make release` hands goreleaser as the release notes
# (--release-notes) instead of the git log. No such section, or an empty one: one line on stderr, exit 1, and no
# release. Before tagging, rename "## [Unreleased]" to the version and the date, and open a new Unreleased above.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:?usage: release-notes.sh vX.Y.Z}"
[[ "$tag" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release-notes: $tag is not v<major>.<minor>.<patch>" >&2; exit 2; }
version="${tag#v}"
notes="$(awk -v v="$version" '
	/^## \[/ { if (found) exit; if (index($0, "## [" v "] - ") == 1) { found = 1; next } }
	found { print }
' CHANGELOG.md)"
if [[ -z "${notes//[[:space:]]/}" ]]; then
	echo "release-notes: CHANGELOG.md has no section \"## [$version] - <date>\" with entries" >&2
	exit 1
fi
printf '%s\n' "$notes" | sed -e '/./,$!d'
