//go:build tools

// Package tools pins kube-rbac-proxy, which the e2e harness runs in front of an exporter bound to 127.0.0.1 in a
// node's network namespace, as the DaemonSet's sidecar does (build-bins.sh builds it).
package tools

import _ "github.com/brancz/kube-rbac-proxy/cmd/kube-rbac-proxy"
