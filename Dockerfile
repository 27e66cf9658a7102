# syntax=docker/dockerfile:1
# localtraffic-exporter image.
#   make image   (scripts/image.sh: every platform of the base, tagged from the version), or by hand:
#   docker build --build-arg VERSION=$(git describe --tags --always) --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg BRANCH=$(git rev-parse --abbrev-ref HEAD) -t ghcr.io/localtraffic/localtraffic-exporter:dev .
# deploy/check/dockerfile_test.go parses this file and runs the build stage's commands on the host, so CI
# proves the image's `go build` compiles, without a Docker engine.

# ---- build: a static binary, version information in localtraffic_build_info ----
# --platform=$BUILDPLATFORM: compile natively and cross-compile for TARGETOS/TARGETARCH (buildx multi-arch;
# distroless-iptables is multi-arch), instead of compiling under emulation.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=unknown
ARG REVISION=unknown
ARG BRANCH=unknown
ARG BUILD_USER=docker
ARG BUILD_DATE=unknown
WORKDIR /src
# Dependencies first, so a source change does not re-download modules.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The one build script `make build` runs too (static, -trimpath, the version build args from the environment).
RUN GOOS=${TARGETOS} GOARCH=${TARGETARCH} scripts/build.sh bin/localtraffic-exporter ./cmd/localtraffic-exporter

# ---- runtime: kube-proxy's own base image ----
# registry.k8s.io/build-image/distroless-iptables is what kube-proxy v1.37.2 ships on (k8s.io/kubernetes
# build/common.sh pins v0.9.9). It carries iptables 1.8 with both backends (iptables-legacy-save,
# iptables-nft-save, xtables-*-multi), a statically linked nft, and kubernetes-sigs/iptables-wrappers —
# the same binaries, at the same versions, that wrote the rules the exporter reads. Beyond those only the
# few tools the wrapper needs (dash, cat, grep, ...): no package manager.
FROM registry.k8s.io/build-image/distroless-iptables:v0.9.9
COPY --from=build /src/bin/localtraffic-exporter /bin/localtraffic-exporter
# Root UID on purpose: the iptables/nft children need CAP_NET_ADMIN (+ CAP_NET_RAW) in their effective
# set, which Kubernetes gives a non-root process only through file capabilities, and those are ignored
# under no_new_privs (allowPrivilegeEscalation: false). The DaemonSet drops every other capability.
USER 0:0
EXPOSE 9746
ENTRYPOINT ["/bin/localtraffic-exporter"]
