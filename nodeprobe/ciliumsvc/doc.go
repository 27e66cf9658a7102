// Package ciliumsvc reads Cilium's service table, where Cilium replaces kube-proxy, and says through the
// dataplane seam (nodeprobe/dataplane) what each Service port's external destinations do on this node: the
// agent's REST API (GET /v1/service on its local unix socket, what `cilium-dbg service list -o json` prints),
// read-only, with every read bounded by a deadline.
//
// What the reader relies on of Cilium (the JSON model, the release it was recorded from, how Cilium picks the
// backends of a frontend) is in model.go; what it cannot see is in docs/support.md ("Cilium nodes").
package ciliumsvc
