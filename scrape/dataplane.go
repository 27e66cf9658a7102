package scrape

import (
	"context"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// DataplaneReader is what the gatherer reads of the node's dataplane, whichever serves Services here: per IP
// family, what each Service port's destinations do (dataplane.Rules), and what the read says of itself. The
// gatherer, the model, the verdict's evidence and the collectors know no reader but through it and the seam's
// values (nodeprobe/dataplane); kube-proxy's iptables and nftables rules are one reader
// (kernelrules.Dataplane), which main picks (docs/architecture.md, "The dataplane seam").
//
// A reader that also tells when what it reads changed (a RulesWatcher) is read when told, not polled.
type DataplaneReader interface {
	// Read reads the dataplane once. With dataplane.ErrUnsupported the Rules are non-nil and say the kind
	// (IPVS); with another error they may be nil.
	Read(ctx context.Context) (dataplane.Rules, error)
}

// DataplaneKind is what serves Services on the node, as exported in localtraffic_dataplane_info.
type DataplaneKind = dataplane.Kind

// The dataplanes.
const (
	// DataplaneKubeProxy: kube-proxy in iptables or nftables mode; its rules decide the verdict.
	DataplaneKubeProxy = dataplane.KindKubeProxy
	// DataplaneIPVS: kube-proxy in IPVS mode; the API view and the health check node ports decide.
	DataplaneIPVS = dataplane.KindIPVS
	// DataplaneReplacement: no kube-proxy (Cilium, Calico eBPF, OVN-Kubernetes, kube-router), by the flag or a
	// link the replacement leaves (nodeprobe.FindReplacement); the API view and the health check node ports
	// decide, and no kube-proxy series are exported.
	DataplaneReplacement = dataplane.KindReplacement
	// DataplaneCilium: Cilium replaces kube-proxy and its service table is read (main picks the reader when
	// --dataplane.cilium-socket is set); what Cilium programmed decides, as kube-proxy's rules do, and no
	// kube-proxy series are exported.
	DataplaneCilium = dataplane.KindCilium
)
