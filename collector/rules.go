package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/rules"
)

var portLabels = []string{"namespace", "service", "port"}

var (
	rulesDrop = stable(newMetric("rules_drop", prometheus.GaugeValue,
		"1 when kube-proxy's rules on this node drop the Service port's external traffic for lack of a local endpoint.", portLabels...))
	rulesLocalEndpoints = stable(newMetric("rules_local_endpoints", prometheus.GaugeValue,
		"Local endpoints kube-proxy's rules on this node send the Service port's external traffic to.", portLabels...))
	rulesDroppedPackets = stable(newMetric("rules_dropped_packets_total", prometheus.CounterValue,
		"Packets dropped by the port's no-local-endpoints rules (iptables mode). Monotonic across kube-proxy's rewrites, which reset the rule counters.",
		portLabels...))
	rulesMismatch = stable(newMetric("rules_mismatch", prometheus.GaugeValue,
		"1 when kube-proxy's rules disagree with the API view for the Service (drop, or local endpoint count, on any port).", svcLabels...))
	rulesInfo = newMetric("rules_info", prometheus.GaugeValue,
		"kube-proxy's proxy mode and iptables backend as the rule reader found them; always 1.", "mode", "backend")
	rulesSupported = newMetric("rules_supported", prometheus.GaugeValue,
		"1 when the rule reader understands kube-proxy's mode here; 0 in IPVS mode, where localtraffic_blackhole falls back to the API view.")
	rulesReadSuccess = newMetric("rules_read_success", prometheus.GaugeValue,
		"1 when the last read of kube-proxy's rules succeeded.")
	rulesReadDuration = newMetric("rules_read_duration_seconds", prometheus.GaugeValue,
		"How long the last read of kube-proxy's rules took (one save per table and family, shared by concurrent scrapes).")
)

// RulesConfig configures the rules collector.
type RulesConfig struct {
	View   APIView
	Reader rules.Reader
	Logger *slog.Logger
}

// Rules exports what kube-proxy programmed on this node, per Local Service port, and whether it agrees with the
// API view. It is also the Services collector's RuleSource. It keeps one piece of state across scrapes: the
// dropped-packet counters, made monotonic over kube-proxy's rewrites.
type Rules struct {
	cfg RulesConfig

	mu       sync.Mutex
	counters map[rules.ServicePort]*dropCounter
}

// dropCounter turns a rule counter that resets on every kube-proxy sync into a monotonic total.
type dropCounter struct {
	raw   uint64    // the rule counter last seen
	total uint64    // packets counted so far
	at    time.Time // ReadAt of the snapshot last applied
}

// NewRules returns the rules collector.
func NewRules(cfg RulesConfig) *Rules {
	return &Rules{cfg: cfg, counters: map[rules.ServicePort]*dropCounter{}}
}

func (*Rules) Name() string { return "rules" }

func (*Rules) Metrics() []*Metric {
	return []*Metric{rulesDrop, rulesLocalEndpoints, rulesDroppedPackets, rulesMismatch, rulesInfo, rulesSupported,
		rulesReadSuccess, rulesReadDuration}
}

// RuleView implements RuleSource.
func (r *Rules) RuleView(ctx context.Context) (RuleView, error) {
	snap, err := r.cfg.Reader.Read(ctx)
	if err != nil {
		return nil, err
	}
	return snapshotView{snap}, nil
}

type snapshotView struct{ snap *rules.Snapshot }

func (s snapshotView) PortDrop(namespace, name, port string, protocol corev1.Protocol) (bool, bool) {
	st := s.snap.Port(rules.ServicePort{Namespace: namespace, Name: name, Port: port, Protocol: string(protocol)})
	return st.Drop, st.Programmed
}

func (r *Rules) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	view, err := r.cfg.View.Snapshot()
	if err != nil {
		return fmt.Errorf("reading the API view: %w", err)
	}
	snap, err := r.cfg.Reader.Read(ctx)
	if snap != nil {
		ch <- rulesInfo.must(1, string(snap.Mode), snap.Backend)
		ch <- rulesReadDuration.must(snap.Duration.Seconds())
	}
	switch {
	case errors.Is(err, rules.ErrUnsupported):
		// Not a failure of the exporter: the reader logged it once, the API view decides, the metric says so.
		ch <- rulesSupported.must(0)
		ch <- rulesReadSuccess.must(1)
		return fmt.Errorf("%w: %w", ErrNoData, err)
	case err != nil:
		ch <- rulesReadSuccess.must(0)
		return fmt.Errorf("reading kube-proxy's rules: %w", err)
	}
	ch <- rulesSupported.must(1)
	ch <- rulesReadSuccess.must(1)

	seen := map[rules.ServicePort]bool{}
	for _, svc := range view.Services {
		mismatch := false
		fam := primaryFamily(svc)
		for _, p := range fam.Ports {
			sp := rules.ServicePort{Namespace: svc.Namespace, Name: svc.Name, Port: p.Name, Protocol: string(p.Protocol)}
			st := snap.Port(sp)
			seen[sp] = true
			label := portLabel(p)
			ch <- rulesDrop.must(boolFloat(st.Drop), svc.Namespace, svc.Name, label)
			ch <- rulesLocalEndpoints.must(float64(st.LocalEndpoints), svc.Namespace, svc.Name, label)
			ch <- rulesDroppedPackets.must(float64(r.countDrops(sp, st.DropPackets, snap.ReadAt)), svc.Namespace, svc.Name, label)
			mismatch = mismatch || portMismatch(p, st, svc.ExternallyReachable(fam.Family, p))
		}
		ch <- rulesMismatch.must(boolFloat(mismatch), svc.Namespace, svc.Name)
	}
	r.forget(seen)
	return nil
}

// portLabel is the port's name, or its number when unnamed (a single-port Service).
func portLabel(p kubeview.PortEndpoints) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprint(p.Port)
}

// portMismatch: the API view and kube-proxy's rules disagree about a port. Only ports with an endpoint
// somewhere and an external way in are judged: without an endpoint kube-proxy rejects everywhere, and without
// a NodePort or external address it programs no drop, so there is nothing local to compare.
// A short disagreement is normal (kube-proxy syncs at most once a second); alerts wait with `for:`.
func portMismatch(p kubeview.PortEndpoints, st rules.PortState, reachable bool) bool {
	if !p.ClusterWide || !reachable {
		return false
	}
	apiDrops := p.Local == 0
	if apiDrops != st.Drop {
		return true
	}
	return !apiDrops && st.LocalEndpoints != p.Local
}

// countDrops folds a raw rule counter into the port's monotonic total. A raw value below the last one means
// kube-proxy rewrote the rule: the new rule's count is all new packets. Snapshots older than the last one
// applied (two scrapes racing) change nothing.
func (r *Rules) countDrops(sp rules.ServicePort, raw uint64, at time.Time) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counters[sp]
	if c == nil {
		c = &dropCounter{}
		r.counters[sp] = c
	}
	if !c.at.IsZero() && !at.After(c.at) {
		return c.total
	}
	if raw >= c.raw {
		c.total += raw - c.raw
	} else {
		c.total += raw
	}
	c.raw, c.at = raw, at
	return c.total
}

// forget drops the counters of ports no longer exported, so state does not grow with deleted Services.
func (r *Rules) forget(seen map[rules.ServicePort]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for sp := range r.counters {
		if !seen[sp] {
			delete(r.counters, sp)
		}
	}
}
