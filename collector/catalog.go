package collector

import (
	"fmt"
	"sort"
	"strings"
)

// Selection says which collectors run, and how: the exporter's --collector.* flags. The defaults keep the
// series per (node, Local Service) within the budget docs/metrics.md states (every figure multiplies by the
// node count); the rest is one switch away.
type Selection struct {
	// Enabled names the collectors that run (see Catalog).
	Enabled map[string]bool
	// RulesPerPort makes the rules collector export every port's rule series for every Service:
	// rules_drop, rules_local_endpoints and rules_dropped_packets_total. Without it only the dropped-packet
	// counter of Services with a health check node port is exported.
	RulesPerPort bool
}

// CatalogEntry is one collector the exporter can run.
type CatalogEntry struct {
	Name    string
	Default bool // runs unless --no-collector.<name> (or --collector.disable-defaults)
	Help    string
	build   func(Selection) Collector
}

// Catalog lists every collector, in the order the exporter runs them.
func Catalog() []CatalogEntry {
	return []CatalogEntry{
		{"services", true, "Per Local Service: the verdict (blackhole, in rotation), local endpoints and, for LoadBalancer Services, whether the health check node port answers.",
			func(Selection) Collector { return NewServices() }},
		{"service_details", false, "Per Local Service: service_info, has_local_endpoint and the health check's result (one-hot), reported local endpoints, serviceProxyHealthy and duration.",
			func(Selection) Collector { return NewServiceDetails() }},
		{"kube_proxy", true, "kube-proxy's health server on this node.",
			func(Selection) Collector { return NewKubeProxy() }},
		{"node", true, "This node's Node object: found, excluded from load balancers, draining.",
			func(Selection) Collector { return NewNode() }},
		{"informers", true, "The exporter's API view: synced, last answer, lists and watches.",
			func(Selection) Collector { return NewInformers() }},
		{"rules", true, "kube-proxy's rules on this node: mode, read, mismatch with the API view, dropped packets (see --collector.rules.per-port).",
			func(s Selection) Collector { return NewRules(s.RulesPerPort) }},
		{"dataplane", true, "What serves Services on this node (kube-proxy, IPVS or a replacement).",
			func(Selection) Collector { return NewDataplane() }},
		{"arrivals", true, "The arrivals meter: new external connection attempts reaching this node per destination kind and family, health check probes from outside, the meter's state and what it missed.",
			func(Selection) Collector { return NewArrivals() }},
		{"state_file", true, "The state file that carries arrival runs and dropped-since times over a restart (--state.file): what this process started from.",
			func(Selection) Collector { return NewStateFileCollector() }},
		{"announcers", true, "Load balancer announcers (MetalLB, Cilium L2, kube-vip, OpenELB, PureLB): each source's state on this node, and the Services whose load balancer IP no node announces.",
			func(Selection) Collector { return NewAnnouncers() }},
		{"exposure", true, "Exposure episodes: the seconds and distinct connection attempts this node dropped while still sent them, by cause, and how long each episode lasted.",
			func(Selection) Collector { return NewExposure() }},
		{"service_arrivals", false, "Per Local Service: the new external connection attempts reaching this node, per destination kind and family.",
			func(Selection) Collector { return NewServiceArrivals() }},
		{"service_exposure", false, "Per Service that had an exposure episode on this node: its seconds and attempts lost by cause, its load balancer's measured drain and configured check window.",
			func(Selection) Collector { return NewServiceExposure() }},
	}
}

// DefaultSelection is what runs without --collector flags.
func DefaultSelection() Selection {
	s := Selection{Enabled: map[string]bool{}}
	for _, e := range Catalog() {
		s.Enabled[e.Name] = e.Default
	}
	return s
}

// Collectors builds the selected collectors in catalog order. A name the catalog does not know is an error:
// a typo in a flag must not silently drop a collector.
func (s Selection) Collectors() ([]Collector, error) {
	known := map[string]bool{}
	var out []Collector
	for _, e := range Catalog() {
		known[e.Name] = true
		if s.Enabled[e.Name] {
			out = append(out, e.build(s))
		}
	}
	var unknown []string
	for name := range s.Enabled {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown collector %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// ByDefault says whether a metric is exported without collector flags (docs/metrics.md's Default column).
type ByDefault string

// What a metric of a default collector exports by default, when not every series (docs/metrics.md's "yes").
const (
	DefaultNo            ByDefault = "no"             // none: only with a collector flag
	DefaultHealthChecked ByDefault = "health-checked" // only the series of Services with a health check node port
)
