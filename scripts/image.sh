#!/usr/bin/env bash
# image.sh builds the exporter's image from this clone with the Dockerfile at the root (the build stage compiles
# natively and cross-compiles, so no emulation is needed for any platform).
#
#   scripts/image.sh build   every platform of IMAGE_PLATFORMS, tagged IMAGE; pushed with IMAGE_PUSH=1, else
#                            written as an OCI archive to dist/image/ (docker) or kept as a local manifest list
#                            (podman): a multi-platform image cannot be loaded into docker's image store
#   scripts/image.sh load    the host's platform only, into the local image store, then into the kind cluster
#                            KIND_CLUSTER (kind load docker-image / kind load image-archive for podman)
#   scripts/image.sh print   what `build` would run, one command a line (no engine needed)
#
# make image / make image-load call it with IMAGE_REGISTRY, IMAGE_REPOSITORY and IMAGE_TAG (the version) and the
# build arguments of scripts/build.sh (VERSION, REVISION, BRANCH, BUILD_USER, BUILD_DATE). CONTAINER_ENGINE picks
# docker (with buildx) or podman; empty: whichever answers first. Without either it says so in one line and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
case "$mode" in
build | load | print) ;;
*)
	echo "usage: image.sh build|load|print" >&2
	exit 2
	;;
esac

registry="${IMAGE_REGISTRY:-ghcr.io}"
repository="${IMAGE_REPOSITORY:-localtraffic/localtraffic-exporter}"
tag="${IMAGE_TAG:-${VERSION:-dev}}"
image="${registry:+${registry%/}/}$repository:$tag"
# The platforms of the base image, registry.k8s.io/build-image/distroless-iptables: kube-proxy's server
# platforms (k8s.io/kubernetes hack/lib/golang.sh, KUBE_SUPPORTED_SERVER_PLATFORMS).
platforms="${IMAGE_PLATFORMS:-linux/amd64,linux/arm64,linux/ppc64le,linux/s390x}"
args=()
for v in VERSION REVISION BRANCH BUILD_USER BUILD_DATE; do
	args+=(--build-arg "$v=${!v:-unknown}")
done
archive="dist/image/localtraffic-exporter_${tag}.oci.tar"

if [[ $mode == print ]]; then
	if [[ ${IMAGE_PUSH:-} == 1 ]]; then out=(--push); else out=(--output "type=oci,dest=$archive"); fi
	echo "docker buildx build --platform $platforms ${args[*]} --tag $image ${out[*]} ."
	exit 0
fi

engine="${CONTAINER_ENGINE:-}"
if [[ -z $engine ]]; then
	if command -v docker >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
		engine=docker
	elif command -v podman >/dev/null 2>&1; then
		engine=podman
	fi
fi
if [[ -z $engine ]] || ! command -v "$engine" >/dev/null 2>&1; then
	echo "image.sh: no container engine: install docker with buildx (or podman), or use the release image ghcr.io/localtraffic/localtraffic-exporter" >&2
	exit 1
fi

# load's platform: the host's, as the engine names it.
host="linux/$(go env GOARCH)"

case "$engine:$mode" in
docker:build)
	# The default "docker" driver builds one platform at a time: a docker-container builder of our own builds all.
	docker buildx inspect localtraffic >/dev/null 2>&1 || docker buildx create --name localtraffic --driver docker-container >/dev/null
	if [[ ${IMAGE_PUSH:-} == 1 ]]; then out=(--push); else
		mkdir -p dist/image
		out=(--output "type=oci,dest=$archive")
	fi
	docker buildx build --builder localtraffic --platform "$platforms" "${args[@]}" --tag "$image" "${out[@]}" .
	[[ ${IMAGE_PUSH:-} == 1 ]] && echo "pushed $image ($platforms)" || echo "wrote $archive: $image ($platforms)"
	;;
podman:build)
	podman manifest rm "$image" >/dev/null 2>&1 || true
	podman build --platform "$platforms" "${args[@]}" --manifest "$image" .
	if [[ ${IMAGE_PUSH:-} == 1 ]]; then podman manifest push --all "$image" "docker://$image"; fi
	echo "built $image ($platforms)"
	;;
docker:load)
	docker buildx build --platform "$host" "${args[@]}" --tag "$image" --load .
	kind load docker-image --name "${KIND_CLUSTER:-kind}" "$image"
	;;
podman:load)
	podman build --platform "$host" "${args[@]}" --tag "$image" .
	mkdir -p dist/image
	podman save --format oci-archive -o "dist/image/localtraffic-exporter_${tag}_load.tar" "$image"
	kind load image-archive --name "${KIND_CLUSTER:-kind}" "dist/image/localtraffic-exporter_${tag}_load.tar"
	;;
esac
if [[ $mode == load ]]; then
	echo "loaded $image into kind cluster ${KIND_CLUSTER:-kind}; install with:"
	echo "  kubectl apply -k deploy/overlays/own-image   # after setting its images: entry to $image"
	echo "  helm install localtraffic-exporter deploy/helm/localtraffic-exporter -n localtraffic-system --wait --set image.registry=$registry,image.repository=$repository,image.tag=$tag"
fi
