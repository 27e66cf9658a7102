# localtraffic-exporter — build, test, demo. Everything installs what it needs on a fresh Debian machine as root.
GO         ?= go
export PATH := $(PATH):/usr/local/go/bin:/usr/sbin:/sbin

VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION   ?= $(shell git rev-parse HEAD 2>/dev/null)
BRANCH     ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null)
BUILD_USER ?= $(shell id -un)@$(shell hostname)
BUILD_DATE ?= $(shell date -u +%Y%m%d-%H:%M:%S)
BUILD_ENV  = VERSION=$(VERSION) REVISION=$(REVISION) BRANCH=$(BRANCH) BUILD_USER=$(BUILD_USER) BUILD_DATE=$(BUILD_DATE)

## Knobs: every variable that steers the tests, in one place (CONTRIBUTING.md lists them too; docs/knobs_test.go
## holds the three lists equal). Set one on the command line: `make e2e KEEP_LOGS=1`. The scripts and tests read
## each as the LT_ environment variable on its right, which may also be set directly.
TOOLS_BIN  ?= $(or $(LT_TOOLS_BIN),$(CURDIR)/.tools/bin)#          LT_TOOLS_BIN: where promtool, prometheus, the release tools and linters are built
E2E_CACHE  ?= $(or $(LT_E2E_CACHE),$(CURDIR)/e2e/.cache)#          LT_E2E_CACHE: where build-bins.sh caches the cluster binaries
E2E_BIN_DIR ?= $(LT_E2E_BIN_DIR)#                                  LT_E2E_BIN_DIR: prebuilt cluster binaries (skips build-bins.sh)
E2E_EXPORTER ?= $(LT_E2E_EXPORTER)#                                LT_E2E_EXPORTER: a prebuilt exporter for the e2e clusters
KEEP_LOGS  ?= $(LT_E2E_KEEP_LOGS)#                                 LT_E2E_KEEP_LOGS: 1 keeps each cluster's work directory and logs
PROM_AGREE ?= $(LT_E2E_PROM_AGREE)#                                LT_E2E_PROM_AGREE: 0 turns off the e2e check of status --prometheus
SCALE_SERVICES ?= $(or $(LT_SCALE_SERVICES),10000)#                LT_SCALE_SERVICES: TestScaleRules' Services (make scale-rules; the suite: 500)
SCALE_BENCHTIME ?= $(or $(LT_SCALE_BENCHTIME),20x)#                LT_SCALE_BENCHTIME: BenchmarkOnNode's -benchtime in TestScaleRules
SCALE_CHANGES ?= $(or $(LT_SCALE_CHANGES),5)#                      LT_SCALE_CHANGES: TestScaleRules' detection changes
SCALE_SCRAPES ?= $(or $(LT_SCALE_SCRAPES),8)#                      LT_SCALE_SCRAPES: TestScaleRules' scrapes measured per node
APILOAD_SERVICES ?= $(or $(LT_E2E_SCALE_SERVICES),2000)#           LT_E2E_SCALE_SERVICES: TestScaleAPILoad's Services (make scale-memory; the suite: 200)
FLOOD      ?= $(or $(LT_FLOOD),3s)#                                LT_FLOOD: how long BenchmarkKernelFlood floods (make bench-arrivals)
BENCH_CPU_SERVICES ?= $(or $(LT_BENCH_CPU_SERVICES),310 1000 10000)# LT_BENCH_CPU_SERVICES: BenchmarkCPUBesideKubeProxy's sizes (make bench-cpu)
BENCH_CPU_WINDOW ?= $(or $(LT_BENCH_CPU_WINDOW),5m)#               LT_BENCH_CPU_WINDOW: BenchmarkCPUBesideKubeProxy's window per size and collectors
BENCH_CPU_HEAP ?= $(LT_BENCH_CPU_HEAP_PROFILE)#                     LT_BENCH_CPU_HEAP_PROFILE: 1 keeps the exporters' allocation sampling and takes heap profiles
export LT_TOOLS_BIN := $(TOOLS_BIN)
export LT_E2E_CACHE := $(E2E_CACHE)
export LT_E2E_BIN_DIR := $(E2E_BIN_DIR)
export LT_E2E_EXPORTER := $(E2E_EXPORTER)
export LT_E2E_KEEP_LOGS := $(KEEP_LOGS)
export LT_E2E_PROM_AGREE := $(PROM_AGREE)
# CI's own: scripts/stage.sh appends each stage to the file LT_STAGES names, timed from LT_STAGES_T0 (set by
# .ci/run and scripts/ci.sh, not knobs).

.PHONY: all build test check deps unit check-alerts bench-arrivals bench-cpu check-deploy e2e e2e-exposure demo generate fuzz fuzz-ci soak scale scale-rules scale-memory bench lint vulncheck release release-snapshot image image-load chart chart-push

all: build

## build: bin/kubectl-localtraffic (the kubectl plugin) and bin/localtraffic-exporter, with scripts/build.sh, which
## the image's build stage runs as well.
build:
	$(BUILD_ENV) scripts/build.sh bin/kubectl-localtraffic ./cmd/kubectl-localtraffic
	$(BUILD_ENV) scripts/build.sh bin/localtraffic-exporter ./cmd/localtraffic-exporter

## image: the exporter's image from this clone (the Dockerfile), for every platform its base image has (linux/amd64,
## arm64, ppc64le, s390x; IMAGE_PLATFORMS narrows it), named IMAGE_REGISTRY/IMAGE_REPOSITORY:IMAGE_TAG (default
## ghcr.io/localtraffic/localtraffic-exporter:<git describe>), with docker buildx or podman (scripts/image.sh).
## IMAGE_PUSH=1 pushes it; otherwise docker leaves an OCI archive in dist/image/ (a multi-platform image does not
## fit docker's own image store). Without a container engine it says so in one line and fails.
## image-load: the same image for this machine's platform only, loaded into the kind cluster KIND_CLUSTER (kind).
IMAGE_REGISTRY   ?= ghcr.io
IMAGE_REPOSITORY ?= localtraffic/localtraffic-exporter
IMAGE_TAG        ?= $(VERSION)
IMAGE_ENV = $(BUILD_ENV) IMAGE_REGISTRY=$(IMAGE_REGISTRY) IMAGE_REPOSITORY=$(IMAGE_REPOSITORY) IMAGE_TAG=$(IMAGE_TAG)
image:
	@$(IMAGE_ENV) scripts/image.sh build

image-load:
	@$(IMAGE_ENV) scripts/image.sh load

## release-snapshot: the release pipeline (.goreleaser.yaml) without publishing, offline. Into dist/: the archives
## of both binaries for every platform, checksums.txt, an SPDX SBOM per archive and the krew manifest
## (dist/krew/localtraffic.yaml) written from the archives. The image is left out (--skip=docker): it needs a
## Docker engine with buildx, which the tag workflow has; so is signing (--skip=sign): keyless signing needs the
## workflow's OIDC identity. First use fetches from the Go module proxy and builds into TOOLS_BIN goreleaser, syft,
## krew and validate-krew-manifest at the versions scripts/install-deps.sh pins (it says so as it builds them);
## every later run is offline.
## GORELEASER_CONFIG: another configuration (e2e/release_test.go narrows the targets to linux/amd64).
GORELEASER_CONFIG ?= .goreleaser.yaml
# goreleaser reads the commit through git, and in a clone without a remote gives up on all of it (commit "none"):
# there, name the repository's own remote to git through the environment.
NO_REMOTE_ENV = $(if $(shell git ls-remote --get-url 2>/dev/null),,GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url \
	GIT_CONFIG_VALUE_0=https://github.com/localtraffic/localtraffic-exporter)
release-snapshot:
	scripts/install-deps.sh release
	$(NO_REMOTE_ENV) PATH="$(TOOLS_BIN):$$PATH" goreleaser release --snapshot --clean --skip=docker,sign --config $(GORELEASER_CONFIG)

## release: what .github/workflows/release.yml runs on a tag (GITHUB_TOKEN set, logged in to ghcr.io, buildx,
## cosign, an OIDC token): the GitHub release with everything above, signed keyless, and the multi-arch image,
## signed and with provenance. The release notes are the tag's section of CHANGELOG.md (scripts/release-notes.sh),
## not the git log; without one the release stops before it starts.
release:
	scripts/install-deps.sh release
	notes="$$(mktemp)" && scripts/release-notes.sh $(VERSION) >"$$notes" && \
		PATH="$(TOOLS_BIN):$$PATH" goreleaser release --clean --release-notes "$$notes"

## chart: the Helm chart packaged as dist/chart/localtraffic-exporter-<version>.tgz (helm package; needs helm).
## chart-push: that package pushed as an OCI artifact to CHART_REGISTRY (ghcr.io/localtraffic/charts) and signed
## keyless with cosign (scripts/chart-push.sh; the release workflow runs it after make release).
CHART_REGISTRY ?= ghcr.io/localtraffic/charts
chart:
	@command -v helm >/dev/null 2>&1 || { echo "make chart: no helm on PATH (deploy/check packages the chart with helm's library)" >&2; exit 1; }
	helm package deploy/helm/localtraffic-exporter --destination dist/chart

chart-push: chart
	CHART_REGISTRY=$(CHART_REGISTRY) scripts/chart-push.sh

## test: every test there is — unit, real-kernel rule readers, fuzzing, alerts (promtool), deploy checks and the
## live-cluster e2e suite. As root on a fresh Debian machine it installs what it needs first. scripts/ci.sh runs
## the stages (the cluster binaries and Prometheus build in the background) and prints each one's duration.
test:
	scripts/ci.sh

## deps: host packages and Go tools the tests use (idempotent).
deps:
	scripts/install-deps.sh

## lint: gofmt over every module; go vet over the root and e2e modules (alerts and deploy/check vet in their
## targets); staticcheck over every module of go.work, after vet, in one process: it reuses the packages vet
## compiled into the build cache. Its second pass, without tests and only for unused code, finds production code
## that only tests use (e2e's package is all test support, deploy/check's all tests). actionlint checks the GitHub
## workflows (and, where shellcheck is installed, their run steps). Timings: docs/performance.md.
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	scripts/install-deps.sh lint
	$(TOOLS_BIN)/actionlint
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	$(TOOLS_BIN)/staticcheck ./... ./e2e/... ./alerts/... ./deploy/check/...
	$(TOOLS_BIN)/staticcheck -tests=false -checks U1000 ./... ./alerts/...

## vulncheck: govulncheck (pinned in scripts/install-deps.sh) over every module of go.work: fails on a known
## vulnerability the code reaches. It reads the Go vulnerability database at vuln.go.dev, and fails when that
## cannot be reached: the GitHub workflow runs it; .ci/run's machine cannot reach it, so make lint leaves it out.
vulncheck:
	scripts/install-deps.sh vuln
	$(TOOLS_BIN)/govulncheck ./... ./e2e/... ./alerts/... ./deploy/check/...

## check: everything that needs neither root nor a cluster, as any user: gofmt and vet, every test of the root
## module (the real-kernel ones need root and say so when they skip), the fuzz corpora (plain go test replays
## every seed and kept crasher), the alerts with promtool (built once into TOOLS_BIN), the chart and kustomize
## renders and deploy checks, and the docs checked against the code. Go's test cache makes a second run quick.
## Timings: CONTRIBUTING.md.
check:
	scripts/install-deps.sh promtool
	@$(MAKE) --no-print-directory lint
	$(GO) test ./...
	cd alerts && $(GO) vet ./... && $(GO) test ./...
	cd deploy/check && $(GO) vet ./... && $(GO) test ./...

## unit: the root module's tests. As root this includes the rule readers' real-kernel tests. The race detector
## runs where there is concurrency to race: every package but NORACE_PKGS, which run no goroutines of their own
## (pure computation over API objects, or a CLI). That spares a race build of the 342 packages only the plugin
## imports (cli-runtime and kubectl's printers); a new package races unless it is added here.
NORACE_PKGS = ./cmd/kubectl-localtraffic/ ./cmd/kubectl-localtraffic/internal/placement/ ./kubeview/kubeviewtest/ \
	$(foreach p,audit cli clitest clusterview draincheck exporters status,./cmd/kubectl-localtraffic/internal/$(p)/)
unit:
	$(GO) test -race -count=1 -timeout 20m \
		$$($(GO) list ./... | grep -v -x -F $(foreach p,$(NORACE_PKGS),-e $(shell $(GO) list $(p))))
	$(GO) test -count=1 -timeout 20m $(NORACE_PKGS)

check-alerts:
	cd alerts && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

check-deploy:
	cd deploy/check && $(GO) vet ./... && $(GO) test -count=1 -timeout 30m ./...

e2e:
	e2e/run-e2e.sh

## e2e-exposure: the exposure recorder held to a client's own lost connections on the cluster with controllers
## (TestExposureMatchesLostConnections) by itself. The suite runs it alone after its shards: its client times its
## losses to 20 ms and needs the machine to itself. About 2 minutes with the cluster binaries built.
e2e-exposure:
	e2e/run-e2e.sh -run '^TestExposureMatchesLostConnections$$'

## soak: the e2e cluster under churn, restarts and hostile peers for SOAK (default 30m); the e2e suite runs it
## for 3 minutes. Figures: docs/performance.md.
SOAK ?= 30m
soak:
	SOAK=$(SOAK) e2e/run-e2e.sh -run '^TestSoak$$' -timeout 90m

## scale: the long scale runs behind the suite's short variants (about 25 minutes on 2 cores): scale-rules, then
## scale-memory.
scale: scale-rules scale-memory

## scale-rules: the rule reader and the exporter on a real kube-proxy v1.37.2's rules for 10,000 Local Services
## (legacy and nft iptables backends, nftables mode): steady state vs a bare save, detection, CPU per scrape
## (TestScaleRules; the suite runs it at 500 Services). Figures: docs/performance.md.
scale-rules:
	LT_SCALE_SERVICES=$(SCALE_SERVICES) LT_SCALE_BENCHTIME=$(SCALE_BENCHTIME) LT_SCALE_CHANGES=$(SCALE_CHANGES) \
		LT_SCALE_SCRAPES=$(SCALE_SCRAPES) e2e/run-e2e.sh -run '^TestScaleRules$$' -timeout 90m

## scale-memory: the exporter's RSS with no Service and 200, 1,000, 2,000 Local Services of 100 remote endpoints
## (BenchmarkExporterMemory), then one exporter's and one kube-proxy's API server load at 2,000 Services
## (TestScaleAPILoad). The suite runs both at 200 Services. Figures: docs/performance.md.
scale-memory:
	e2e/run-e2e.sh -run '^$$' -bench '^BenchmarkExporterMemory$$' -benchtime 1x -timeout 60m
	LT_E2E_SCALE_SERVICES=$(APILOAD_SERVICES) e2e/run-e2e.sh -run '^TestScaleAPILoad$$' -timeout 60m

## demo: a real cluster on this machine showing the blackhole and its fix; Ctrl-C tears it down.
demo:
	e2e/run-demo.sh

## generate: the dashboard (Go, alerts/dashgen), the PrometheusRule and dashboard ConfigMap, the Helm chart's
## copies of both. alerts' TestGeneratedFilesUpToDate fails while a committed file differs.
generate:
	cd alerts && $(GO) run ./cmd/generate

## fuzz: every Fuzz target of every package (go test -list '^Fuzz'), FUZZTIME each (default 2m). A failing target
## leaves its crasher in <package>/testdata/fuzz/<Target>/: commit it, and go test replays it from then on.
FUZZTIME ?= 2m
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) scripts/fuzz.sh

## fuzz-ci: the same for 15 s each (part of make test), after proving the runner fails on a crasher and keeps it.
fuzz-ci:
	scripts/fuzz-selftest.sh
	FUZZTIME=15s GO=$(GO) scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./nodeprobe/kernelrules/ ./collector/ ./cmd/kubectl-localtraffic/internal/placement/

## bench-cpu: the exporter's CPU (with its iptables-save and nft children) and memory against kube-proxy's on the
## same node, over BENCH_CPU_WINDOW windows of endpoint churn and 15 s scrapes, at each of BENCH_CPU_SERVICES Local
## Services, default and opt-in collectors, iptables mode (nft backend) and nftables mode, with a CPU profile of
## each exporter (BenchmarkCPUBesideKubeProxy, as root; the suite runs TestScaleCPUBesideKubeProxy, 100 Services
## and one 40 s window). Each window is followed by one as long for the profile. The full run takes about an
## hour on 2 cores. Figures: docs/performance.md.
bench-cpu:
	LT_BENCH_CPU_SERVICES='$(BENCH_CPU_SERVICES)' LT_BENCH_CPU_WINDOW=$(BENCH_CPU_WINDOW) LT_BENCH_CPU_HEAP_PROFILE=$(BENCH_CPU_HEAP) \
		e2e/run-e2e.sh -run '^$$' -bench '^BenchmarkCPUBesideKubeProxy$$' -benchtime 1x -timeout 240m

## bench-arrivals: the arrivals meter's kernel benchmarks (as root: network namespaces), the flood for FLOOD.
## Figures: docs/performance.md.
bench-arrivals:
	LT_FLOOD=$(FLOOD) $(GO) test -run '^$$' -bench 'Kernel' -benchmem ./nodeprobe/arrivals/
