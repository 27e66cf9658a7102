#!/usr/bin/env bash
# release-version.sh keeps the one version the repository's install instructions name in step with the release
# tag: the chart's appVersion (and version), deploy/base's image tag, and the versioned references in the README
# and docs (go install ...@vX, release download URLs, archive names, the image tag, git clone --branch vX).
#
#   scripts/release-version.sh show            # the version: v0.1.0
#   scripts/release-version.sh check [vX.Y.Z]  # every reference names the same version (and it is vX.Y.Z);
#                                              # the release workflow runs it with the tag, deploy/check without
#   scripts/release-version.sh set vX.Y.Z      # before tagging: rewrite every reference to vX.Y.Z
set -euo pipefail
cd "$(dirname "$0")/.."
chart=deploy/helm/localtraffic-exporter/Chart.yaml
kustomization=deploy/base/kustomization.yaml
docs=(README.md deploy/README.md deploy/helm/localtraffic-exporter/README.md docs/audit.md mixin/README.md)
semver='v[0-9]+\.[0-9]+\.[0-9]+'
# The contexts in the docs where a version means the release (never, e.g., kube-proxy's v1.37.2): go install and
# jb install @vX, release downloads, the image tag, clone --branch / ?ref=, and archive names (_X.Y.Z_).
ctx='(localtraffic-exporter[^ ]*@|releases/download/|localtraffic-exporter:|--branch[ =]|[?]ref=|localtraffic-exporter/)'
# The chart's own version, without the v: `helm install ... --version X.Y.Z`.
refs="$ctx$semver|_[0-9]+\.[0-9]+\.[0-9]+_|--version [0-9]+\.[0-9]+\.[0-9]+"

show() { sed -n 's/^appVersion: *//p' "$chart"; }

# references prints file:version for every versioned reference.
references() {
	local f
	echo "$chart:$(show)"
	echo "$chart:v$(sed -n 's/^version: *//p' "$chart")"
	echo "$kustomization:$(sed -n 's/^ *newTag: *//p' "$kustomization")"
	for f in "${docs[@]}"; do
		grep -oE "$refs" "$f" | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | sed "s|^|$f:v|" || true
	done
}

case "${1:-}" in
show) show ;;
check)
	want="${2:-$(show)}"
	if [[ ! "$want" =~ ^${semver}$ ]]; then
		echo "release-version: $want is not v<major>.<minor>.<patch>" >&2
		exit 2
	fi
	bad="$(references | grep -v ":$want\$" || true)"
	if [[ -n "$bad" ]]; then
		echo "release-version: these name another version than $want (scripts/release-version.sh set $want):" >&2
		echo "$bad" >&2
		exit 1
	fi
	;;
set)
	new="${2:?usage: release-version.sh set vX.Y.Z}"
	[[ "$new" =~ ^${semver}$ ]] || { echo "release-version: $new is not v<major>.<minor>.<patch>" >&2; exit 2; }
	old="$(show)"
	sed -i -E "s/^appVersion: .*/appVersion: $new/; s/^version: .*/version: ${new#v}/" "$chart"
	sed -i -E "s/^( *newTag: ).*/\1$new/" "$kustomization"
	for f in "${docs[@]}"; do
		sed -i -E "s#${ctx}${old//./\\.}#\1$new#g; s#_${old#v}_#_${new#v}_#g; s#--version ${old#v}#--version ${new#v}#g" "$f"
	done
	"$0" check "$new"
	;;
*)
	echo "usage: release-version.sh show | check [vX.Y.Z] | set vX.Y.Z" >&2
	exit 2
	;;
esac
