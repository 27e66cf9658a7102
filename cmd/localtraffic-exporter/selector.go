package main

import (
	"log/slog"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/ciliumsvc"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

// The selector of the node's dataplane reader, in two steps. Here, from the flags: Cilium's reader where its
// agent's socket is configured (Cilium replaces kube-proxy there: a kube-proxy reader would find no rules and
// call every Service unprogrammed), kube-proxy's rules otherwise, or none. The choice is made once: a Cilium
// agent that does not answer is the Cilium reader's failed read (the API view decides meanwhile), not a reason
// to read kube-proxy's rules. Then, for kube-proxy's rules, kernelrules' selector picks at each read the reader
// of the mode the node shows (iptables legacy, iptables nft, nftables), detected again as kube-proxy restarts.
// The gatherer is told the kind the same options give (dataplaneOf), so the two cannot disagree.

// selectReader picks the dataplane reader the options ask for (the model reads it as any dataplane,
// through scrape.DataplaneReader): Cilium's service table where --dataplane.cilium-socket says Cilium
// replaces kube-proxy; else kube-proxy's rules, in the mode it runs in or the one --rules.mode names; nil for
// --rules.mode=none and another kube-proxy replacement, whose rules no reader reads.
func selectReader(opts options, logger *slog.Logger) scrape.DataplaneReader {
	if opts.cilium.Read() {
		return ciliumsvc.NewReader(opts.cilium.Socket, ciliumsvc.DefaultTimeout)
	}
	if !opts.rules.Read() || opts.scrape.Dataplane == scrape.DataplaneReplacement {
		return nil // no kube-proxy rules to read
	}
	return kernelrules.NewDataplane(kernelrules.Options{
		Mode:         kernelrules.Mode(opts.rules.Mode),
		ProxyModeURL: opts.probe.ProxyModeURL(),
		// The node model is the reader's only caller and spaces its reads itself (newModel): a cached
		// snapshot would hide a change it was just told of.
		CacheTTL: -1,
		Logger:   logger,
	})
}

// dataplaneOf is what serves Services on the node as the options say: Cilium where its service table is read
// (the reader selectReader picks), else --dataplane's choice.
func dataplaneOf(opts options) scrape.DataplaneKind {
	if opts.cilium.Read() {
		return scrape.DataplaneCilium
	}
	return opts.scrape.Dataplane
}
