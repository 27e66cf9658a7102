#!/usr/bin/env bash
# chart-push.sh pushes dist/chart/localtraffic-exporter-<version>.tgz (make chart) to oci://$CHART_REGISTRY (default
# ghcr.io/localtraffic/charts) and signs the pushed artifact keyless with cosign (the release workflow's OIDC
# identity), as the image is. HELM_REGISTRY_USER and HELM_REGISTRY_PASSWORD, when set, log helm in first.
# Users install it by version: helm install localtraffic-exporter oci://ghcr.io/localtraffic/charts/localtraffic-exporter --version X.Y.Z
set -euo pipefail
cd "$(dirname "$0")/.."
registry="${CHART_REGISTRY:-ghcr.io/localtraffic/charts}"
shopt -s nullglob
pkgs=(dist/chart/localtraffic-exporter-*.tgz)
((${#pkgs[@]} == 1)) || { echo "chart-push: want one dist/chart/localtraffic-exporter-*.tgz (make chart), found ${#pkgs[@]}" >&2; exit 1; }
for tool in helm cosign; do
	command -v "$tool" >/dev/null 2>&1 || { echo "chart-push: no $tool on PATH" >&2; exit 1; }
done
if [[ -n "${HELM_REGISTRY_USER:-}" ]]; then
	printf '%s' "${HELM_REGISTRY_PASSWORD:?HELM_REGISTRY_PASSWORD}" | helm registry login "${registry%%/*}" -u "$HELM_REGISTRY_USER" --password-stdin
fi
out="$(helm push "${pkgs[0]}" "oci://$registry" 2>&1)"
echo "$out"
digest="$(sed -n 's/^Digest: *//p' <<<"$out")"
[[ -n "$digest" ]] || { echo "chart-push: helm push printed no digest" >&2; exit 1; }
cosign sign --yes "$registry/localtraffic-exporter@$digest"
