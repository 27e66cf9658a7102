#!/bin/sh
# build.sh OUT PACKAGE builds one of this repository's binaries the one way they are built: `make build` and the
# image's build stage (Dockerfile) both run it; the release archives come from .goreleaser.yaml, whose flags
# deploy/check holds to the same ones. Static (CGO_ENABLED=0: the runtime image's C library is for iptables and
# nft, not for us), -trimpath, and the version information of localtraffic_build_info and --version from the
# environment: VERSION, REVISION, BRANCH, BUILD_USER, BUILD_DATE ("unknown" when unset). GOOS and GOARCH
# cross-compile as usual. POSIX sh: the golang image's /bin/sh runs it too.
set -eu
[ $# -eq 2 ] || { echo "usage: build.sh OUT PACKAGE" >&2; exit 2; }
v=github.com/prometheus/common/version
CGO_ENABLED=0 exec go build -trimpath \
	-ldflags "-X $v.Version=${VERSION:-unknown} -X $v.Revision=${REVISION:-unknown} -X $v.Branch=${BRANCH:-unknown} -X $v.BuildUser=${BUILD_USER:-unknown} -X $v.BuildDate=${BUILD_DATE:-unknown}" \
	-o "$1" "$2"
