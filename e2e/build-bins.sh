#!/usr/bin/env bash
# build-bins.sh builds the pinned etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and
# kubectl into a cache directory keyed by the pinned module files and the Go version, and prints that directory.
# A second run with the same key is a no-op, so CI and the demo pay the ~5-10 minute build once per machine.
# `build-bins.sh --oldest` builds the oldest Kubernetes the chart admits (kube-apiserver and kube-proxy) the same
# way and prints its directory; only TestOldestAdmittedKubernetes needs it.
# kube-rbac-proxy (tools/rbacproxy, the sidecar deploy/ ships) goes into the same directory under a key of its own
# (kube-rbac-proxy.key beside it): changing its pin rebuilds it alone, not the Kubernetes binaries. It costs about
# 8 CPU-minutes on a cold Go build cache (its k8s.io v0.36 packages share nothing with the v1.37 build; measured:
# 7m46s user, 2m43s sys) and nothing once cached.
set -euo pipefail
# sudo's secure_path drops Go's usual install directory.
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
here="$(cd "$(dirname "$0")" && pwd)"
# The tools modules pin the binaries' own dependency graphs and stay outside the repository's go.work: inside the
# workspace `go build` would not find their packages ("no required module provides package").
export GOWORK=off
cache="${LT_E2E_CACHE:-$here/.cache}/bin"
version_ldflags() { # version_ldflags <module dir>: stamp the k8s.io/kubernetes version the module requires
	# (v1.37.2, not v0.0.0-master: kubectl and the apiserver's discovery show it; compatibility checks read it)
	local ver ld="-s -w"
	ver="$(sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[0-9]*\.[0-9]*\.[0-9]*\).*|\1|p' "$1/go.mod")"
	[[ -n "$ver" ]] || { echo "build-bins: $1/go.mod requires no k8s.io/kubernetes" >&2; exit 1; }
	local minor="${ver#v1.}"
	minor="${minor%%.*}"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	echo "$ld"
}
if [[ "${1:-}" == --oldest ]]; then
	# The oldest Kubernetes the chart admits (tools/kubeoldest; docs/support.md): its kube-apiserver and kube-proxy
	# in a directory of their own, beside links to the pinned etcd and kubectl (the pinned set is built first when
	# missing). Nothing else: the test that runs it starts no controllers and no kube-rbac-proxy.
	pinned="$(bash "$0")"
	# One build at a time: run-e2e.sh starts it in the background and the test asks again while it runs.
	exec 9>"$cache/oldest.lock"
	flock 9
	okey="$( (cat "$here"/tools/kubeoldest/go.mod "$here"/tools/kubeoldest/go.sum; go version) | sha256sum | cut -c1-16)"
	oout="$cache/oldest-$okey"
	if [[ ! -x "$oout/kube-apiserver" || ! -x "$oout/kube-proxy" ]]; then
		rm -rf "$oout.tmp.$$"
		mkdir -p "$oout.tmp.$$"
		ld="$(version_ldflags "$here/tools/kubeoldest")"
		(cd "$here/tools/kubeoldest" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" \
			-o "$oout.tmp.$$/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-proxy) >&2
		ln -s "$pinned/etcd" "$oout.tmp.$$/etcd"
		ln -s "$pinned/kubectl" "$oout.tmp.$$/kubectl"
		rm -rf "$oout"
		mv "$oout.tmp.$$" "$oout"
	fi
	echo "$oout"
	exit 0
fi
key="$( (cat "$here"/tools/kube/go.mod "$here"/tools/kube/go.sum "$here"/tools/etcd/go.mod "$here"/tools/etcd/go.sum; go version) | sha256sum | cut -c1-16)"
out="$cache/$key"
complete=1
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl; do
	[[ -x "$out/$b" ]] || complete=0
done
proxykey="$( (cat "$here"/tools/rbacproxy/go.mod "$here"/tools/rbacproxy/go.sum; go version) | sha256sum | cut -c1-16)"
build_proxy() { # build_proxy <dir>: kube-rbac-proxy into dir, replaced atomically (a running test may hold the old one)
	(cd "$here/tools/rbacproxy" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/kube-rbac-proxy.tmp.$$" \
		github.com/brancz/kube-rbac-proxy/cmd/kube-rbac-proxy) >&2
	mv -f "$1/kube-rbac-proxy.tmp.$$" "$1/kube-rbac-proxy"
	echo "$proxykey" >"$1/kube-rbac-proxy.key"
}
if [[ $complete -eq 1 ]]; then
	if [[ ! -x "$out/kube-rbac-proxy" || "$(cat "$out/kube-rbac-proxy.key" 2>/dev/null)" != "$proxykey" ]]; then
		build_proxy "$out"
	fi
	echo "$out"
	exit 0
fi
mkdir -p "$out.tmp"
# One go build for every Kubernetes binary: the packages they share compile once.
ld="$(version_ldflags "$here/tools/kube")"
(cd "$here/tools/kube" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$out.tmp/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl) >&2
(cd "$here/tools/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3) >&2
build_proxy "$out.tmp"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
