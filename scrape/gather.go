package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// APIView is what the gatherer reads of the Kubernetes API.
type APIView interface {
	Snapshot() (kubeview.Snapshot, error)
	// Node is this node's state alone: still there when the Service informers have not synced.
	Node() (kubeview.NodeState, error)
}

// InformerSource reports the state of the exporter's informers.
type InformerSource interface {
	Informers() []kubeview.InformerStatus
}

// GathererConfig configures the Gatherer.
type GathererConfig struct {
	View       APIView
	Informers  InformerSource  // nil: no informer status
	RuleReader DataplaneReader // nil: no dataplane is read (kube-proxy's rules), the API view decides
	// Addrs lists this host's addresses: where health check node ports are probed, and which externalIPs
	// the node holds. nil: none.
	Addrs nodeprobe.AddrLister
	// KubeProxyAddress, when set (a flag), returns kube-proxy's health server host:port; nil: its
	// healthzBindAddress from /configz (nodeprobe.KubeProxyHealthAddress).
	KubeProxyAddress func(kubeview.NodeState) (string, error)
	// HealthCheckAddress, when set, is where health check node ports of its family are probed.
	HealthCheckAddress string
	// NodePortAddresses is kube-proxy's --nodeport-addresses when given by a flag; nil: read ConfigzURL.
	NodePortAddresses []string
	// ConfigzURL is kube-proxy's /configz (on its metrics address); "": not read (kube-proxy's defaults).
	ConfigzURL string
	// ConfigzFallbackURL is asked when ConfigzURL cannot be read: kube-proxy's default metrics address is
	// [::1]:10249 when its bindAddress is IPv6 (an IPv6-only node), 127.0.0.1:10249 otherwise. "": none.
	ConfigzFallbackURL string
	// Dataplane is what the node runs: DataplaneKubeProxy, DataplaneReplacement, DataplaneCilium (RuleReader
	// reads Cilium's service table), or "" (auto: detected).
	Dataplane DataplaneKind
	// Links lists this host's network links, where a kube-proxy replacement shows (auto detection). nil: none.
	Links nodeprobe.LinkLister
	// ExternalIPWindow: a drop rule counter that grew this recently is evidence that its destination's traffic
	// arrives: an externalIP's puts it in rotation where the meter does not watch it, and any destination's
	// makes a blackhole traffic_lost where the meter cannot see (for the loss hold, if that is longer).
	ExternalIPWindow time.Duration
	// Meter counts the new connection attempts that reach the node; nil: not observed (--no-arrivals.enabled).
	Meter ArrivalsMeter
	// Grace: attempts that keep arriving this long at a destination the node drops put it in rotation
	// (DefaultGrace when 0). Quiet: the meter's QuietPeriod (DefaultQuiet when 0).
	Grace, Quiet time.Duration
	// LossHold: a blackhole stays traffic_lost this long after the last attempt lost there (DefaultLossHold
	// when 0).
	LossHold time.Duration
	// InternalCIDRs are sources that are never external arrivals, beside those kube-proxy's local detector
	// calls pod traffic (internalSources).
	InternalCIDRs []netip.Prefix
	Client        *http.Client
	ProbeTimeout  time.Duration // cap per probe; the scrape's deadline may shorten it
	Concurrency   int           // health check probes in flight at once
	Logger        *slog.Logger

	// State is the state file the cross-scrape state survives a restart in (OpenStateFile); nil: none
	// (--state.file=). NewGatherer restores what it held, scrapes write it.
	State *StateFile
}

// Gatherer reads every input of a scrape once, concurrently, under the scrape's context, and decides the
// verdicts: the result is one State that every collector renders. What it carries from one scrape to the next
// is its crossScrape, and nothing else.
type Gatherer struct {
	cfg GathererConfig
	crossScrape
}

// NewGatherer returns a Gatherer.
func NewGatherer(cfg GathererConfig) *Gatherer {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Client == nil {
		cfg.Client = nodeprobe.NewHTTPClient()
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 5 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultQuiet
	}
	if cfg.LossHold <= 0 {
		cfg.LossHold = DefaultLossHold
	}
	g := &Gatherer{cfg: cfg, crossScrape: newCrossScrape()}
	g.exposure = newExposureTracker(cfg.Quiet, cfg.Logger)
	if cfg.State != nil {
		g.restoreState(cfg.State.take())
	}
	return g
}

// Gather reads the API view, then, concurrently, kube-proxy's rules, its health server, this host's
// addresses and kube-proxy's --nodeport-addresses followed by every health check node port, and decides. It
// never fails: an input that could not be read is recorded in the State.
func (g *Gatherer) Gather(ctx context.Context) *State {
	st := &State{took: map[Input]time.Duration{}, RulesConfigured: g.cfg.RuleReader != nil}
	var mu sync.Mutex // guards st.took while the inputs are read
	timed := func(in Input, start time.Time) {
		mu.Lock()
		st.took[in] = time.Since(start)
		mu.Unlock()
	}

	start := time.Now()
	snap, err := g.cfg.View.Snapshot()
	if err == nil {
		st.Node, st.Announcers = snap.Node, snap.Announcers
	} else {
		st.APIErr = fmt.Errorf("reading the API view: %w", err)
		if st.Node, err = g.cfg.View.Node(); err != nil {
			st.NodeErr = fmt.Errorf("reading the API view: %w", err)
		}
	}
	timed(InputAPI, start)
	timed(InputNode, start)
	if g.cfg.Informers != nil {
		st.Informers = g.cfg.Informers.Informers()
	}

	// kube-proxy's configuration says where its health servers listen: both probes wait for it (a cached read
	// mostly, bounded by configzTimeout otherwise).
	configRead := make(chan struct{})
	go func() {
		defer close(configRead)
		st.KubeProxyConfig, st.KubeProxyConfigState, st.KubeProxyConfigErr = g.kubeProxyConfig(ctx)
	}()

	var checks [][]FamilyCheck
	var wg sync.WaitGroup
	if g.cfg.RuleReader != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer timed(InputRules, time.Now())
			st.Rules, st.RulesErr = g.cfg.RuleReader.Read(ctx)
			if st.RulesErr != nil {
				st.RulesErr = fmt.Errorf("reading %s: %w", g.cfg.Dataplane.Read(), st.RulesErr)
			}
		}()
	}
	if st.NodeErr == nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer timed(InputKubeProxy, time.Now())
			<-configRead
			st.KubeProxy = g.probeKubeProxy(ctx, st.Node, st.KubeProxyConfig)
			kp := st.KubeProxy
			if g.cfg.KubeProxyAddress == nil && kp.Err == nil && kp.Healthz.StatusCode == 0 && kp.Livez.StatusCode == 0 {
				// Nothing answered where the configuration says: kube-proxy may have restarted with another
				// one (its health server moved). Read /configz again next scrape, not in 5 minutes.
				g.configz.markStale()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		addrStart := time.Now()
		st.LocalAddrs, st.AssignedAddrs, st.AddrsErr = g.readAddrs()
		<-configRead
		timed(InputAddrs, addrStart)
		if st.APIErr == nil {
			defer timed(InputHealthChecks, addrStart)
			checks = g.probeHealthChecks(ctx, snap, st.LocalAddrs, st.KubeProxyConfig)
		}
	}()
	wg.Wait()

	st.Dataplane = g.dataplane(st)
	st.NodePortAddrs = nodePortAddrs(st)
	g.observe(st, snap)
	g.decide(st, snap, checks)
	g.saveState(st)
	st.StateFile = g.cfg.State.State()
	return st
}

// readAddrs lists this host's addresses, and those on its real interfaces (nodeprobe.AssignedLister);
// without an address lister, none.
func (g *Gatherer) readAddrs() (local, assigned []net.IP, err error) {
	if g.cfg.Addrs == nil {
		return nil, nil, nil
	}
	local, err = g.cfg.Addrs.LocalAddrs()
	if g.outcomes.changed("addresses", fmt.Sprint(err)) && err != nil {
		g.cfg.Logger.Warn("listing this host's addresses", "err", err)
	}
	assigned = local
	if al, ok := g.cfg.Addrs.(nodeprobe.AssignedLister); ok && err == nil {
		var aerr error
		if assigned, aerr = al.AssignedAddrs(); aerr != nil {
			err = aerr
			g.cfg.Logger.Warn("listing this host's assigned addresses", "err", aerr)
		}
	}
	return local, assigned, err
}

// nodePortAddrs are the local addresses kube-proxy accepts NodePorts on. NodePorts are reached on the
// addresses a client can use: not those bound to kube-ipvs0 or lo, not link-local ones (nodeprobe.Assigned).
func nodePortAddrs(st *State) []net.IP {
	reachable := st.AssignedAddrs
	if st.AddrsErr != nil {
		reachable = st.LocalAddrs // the links could not be listed: every address, as before the split
	}
	return nodeprobe.NodePortAddrs(reachable,
		nodeprobe.KubeProxyNodeIPs(st.Node.KubeProxyNodeIPs(), st.KubeProxyConfig.BindAddress), st.KubeProxyConfig.NodePortAddresses)
}

// observe tells the arrivals meter what this scrape's Services are and takes its counts, once per scrape.
func (g *Gatherer) observe(st *State, snap kubeview.Snapshot) {
	if g.cfg.Meter == nil {
		return
	}
	defer func(start time.Time) { st.took[InputArrivals] = time.Since(start) }(time.Now())
	st.Arrivals.Enabled = true
	if st.APIErr == nil {
		st.Arrivals.WatchErr = g.watchMeter(st, snap.Node.PodCIDRs, snap.Services)
	}
	s := g.cfg.Meter.Snapshot()
	st.Arrivals.Snapshot = &s
	st.Arrivals.Totals = g.arrivals.add(&s, destKinds(snap.Services))
}

// watchMeter tells the meter every destination and health check node port of services, on the node's
// NodePort addresses, leaving out the sources kube-proxy calls local. A refusal is returned (and logged): the
// meter keeps counting what it counted.
func (g *Gatherer) watchMeter(st *State, podCIDRs []string, services []kubeview.ServiceState) error {
	internal, links := internalSources(st.KubeProxyConfig.DetectLocal, podCIDRs, st.LocalAddrs, g.cfg.InternalCIDRs)
	if err := g.cfg.Meter.Watch(arrivalsWatch(services, st.NodePortAddrs, internal, links)); err != nil {
		g.cfg.Logger.Warn("the arrivals meter refused the destinations: it counts the previous ones", "err", err)
		return fmt.Errorf("arrivals meter: %w", err)
	}
	return nil
}

// destKinds says which kind each watched destination is (a destination of two Services counts once, as the
// first one's).
func destKinds(services []kubeview.ServiceState) map[arrivals.Dest]verdict.Kind {
	kinds := map[arrivals.Dest]verdict.Kind{}
	for _, svc := range services {
		for _, fam := range svc.Families {
			Destinations(svc, fam, func(d verdict.Destination) {
				if ad, ok := MeterDest(d); ok {
					if _, seen := kinds[ad]; !seen {
						kinds[ad] = d.Kind
					}
				}
			})
		}
	}
	return kinds
}

// dataplane decides what serves Services here, never from silence alone. IPVS says so through the rule
// reader. A node is taken for a kube-proxy replacement only on positive evidence: the flag, or (auto) a link a
// replacement creates (nodeprobe.FindReplacement) on a node whose rules hold no kube-proxy rule and where
// kube-proxy's rules were never seen since the exporter started. Anything else is kube-proxy: when its rules
// were read and hold no kube-proxy rule at all, the node is not programmed (before kube-proxy's first sync,
// or kube-proxy never ran: its health server then tells which, and its alerts fire). In --rules.mode=none
// nothing shows the rules, so the node is taken for kube-proxy unless the flag says otherwise.
func (g *Gatherer) dataplane(st *State) DataplaneKind {
	if g.cfg.Dataplane == DataplaneCilium {
		// Cilium's reader says what Cilium programmed; its reads are not kube-proxy's rules, so they do not
		// count as kube-proxy seen.
		return DataplaneCilium
	}
	if errors.Is(st.RulesErr, dataplane.ErrUnsupported) && st.Rules != nil && st.Rules.Info().Kind == dataplane.KindIPVS {
		return DataplaneIPVS
	}
	// kube-proxy is seen when its rules are, or when its own /configz answered (a kube-proxy whose rules are
	// not programmed yet, after a reboot, is not a replacement). Not its health server: Cilium's kube-proxy
	// replacement can serve the same /healthz on the same port.
	seen := g.kubeProxy.record(st.Rules != nil && st.RulesErr == nil || st.KubeProxyConfigState == ConfigRead)
	noRules := st.RulesConfigured && errors.Is(st.RulesErr, dataplane.ErrNoRules)
	switch g.cfg.Dataplane {
	case DataplaneReplacement:
		return DataplaneReplacement
	case DataplaneKubeProxy:
		st.NotProgrammed = noRules
		return DataplaneKubeProxy
	}
	if noRules && !seen && g.cfg.Links != nil {
		r, ok, err := nodeprobe.FindReplacement(g.cfg.Links)
		if err != nil {
			g.cfg.Logger.Warn("looking for a kube-proxy replacement", "err", err)
		}
		if ok {
			st.Replacement = r.String()
			return DataplaneReplacement
		}
	}
	st.NotProgrammed = noRules
	return DataplaneKubeProxy
}

// kubeProxyConfig is what kube-proxy's /configz says (its defaults when it is not read), with
// --kube-proxy.nodeport-addresses overriding its nodePortAddresses.
func (g *Gatherer) kubeProxyConfig(ctx context.Context) (nodeprobe.KubeProxyConfig, ConfigState, error) {
	cfg, state, err := g.readConfigz(ctx)
	if g.cfg.NodePortAddresses != nil {
		cfg.NodePortAddresses = g.cfg.NodePortAddresses
	}
	return cfg, state, err
}

func (g *Gatherer) readConfigz(ctx context.Context) (nodeprobe.KubeProxyConfig, ConfigState, error) {
	if g.cfg.ConfigzURL == "" {
		return nodeprobe.DefaultKubeProxyConfig(), ConfigNotRead, nil
	}
	// kube-proxy's configuration changes only with a restart: one read serves configzTTL, and the probes wait
	// at most configzTimeout for it (a hanging metrics port must not eat their deadline).
	now := time.Now()
	if cfg, ok := g.configz.fresh(now); ok {
		return cfg, ConfigRead, nil
	}
	pctx, cancel := context.WithTimeout(ctx, min(configzTimeout, nodeprobe.ProbeTimeout(ctx, g.cfg.ProbeTimeout)))
	defer cancel()
	cfg, err := nodeprobe.ReadKubeProxyConfig(pctx, g.cfg.Client, g.cfg.ConfigzURL)
	if err != nil && g.cfg.ConfigzFallbackURL != "" && pctx.Err() == nil {
		var ferr error
		if cfg, ferr = nodeprobe.ReadKubeProxyConfig(pctx, g.cfg.Client, g.cfg.ConfigzFallbackURL); ferr == nil {
			err = nil
		} else {
			err = errors.Join(err, ferr)
		}
	}
	if err != nil {
		g.cfg.Logger.Debug("kube-proxy's /configz unreadable", "err", err)
		if last, ok := g.configz.last(); ok {
			return last, ConfigLastKnown, err // kube-proxy restarting: its last known setting still holds
		}
		return nodeprobe.DefaultKubeProxyConfig(), ConfigDefaults, err
	}
	g.configz.set(cfg, now)
	return cfg, ConfigRead, nil
}

// How often, and how long at most, kube-proxy's /configz is read.
const (
	// A minute: a kube-proxy restarted with another configuration (a feature gate, its health server moved
	// within what still answers) is followed well within any alert's for:, at one 2 KB local read a minute.
	configzTTL     = time.Minute
	configzTimeout = time.Second
)

// decide fills in the per-Service results from what was read.
func (g *Gatherer) decide(st *State, snap kubeview.Snapshot, checks [][]FamilyCheck) {
	p := g.newPass(st)
	if st.APIErr != nil {
		return
	}
	p.ev = g.evidence(st, snap)
	var now time.Time
	if st.Arrivals.Snapshot != nil {
		now = st.Arrivals.Snapshot.Taken
	}
	p.prepare(now)
	if p.observed != nil {
		defer func() {
			g.arrivals.recordDropped(st.Services, p.now)
			g.checkers.warn(st.Services, g.cfg.Logger)
		}()
	}
	seen := make(map[counterKey]bool, 2*len(snap.Services))
	seenGone := map[goneKey]bool{}
	defer func() { g.gone.forget(seenGone) }()
	// Sized up front: at thousands of Services, growing these maps and slices was a third of a scrape's
	// garbage, and a scrape's garbage sets the exporter's RSS (the GC's target follows the heap's peak).
	st.Services = make([]*ServiceResult, len(snap.Services))
	results := make([]ServiceResult, len(snap.Services)) // one allocation for them all
	for i, svc := range snap.Services {
		results[i] = p.decideService(svc, checks[i], seen, seenGone)
		st.Services[i] = &results[i]
	}
	if p.fr != nil && !st.NotProgrammed {
		g.drops.forget(seen)
	}
}

// pass is what one decision of the node's Services shares: the rules as the verdict reads them, the drop
// counters' and the meter's evidence, the node's addresses. A scrape of the full recomputation makes one per
// scrape; the node model one per evaluation, for the Services it decides again.
type pass struct {
	g  *Gatherer
	st *State
	fr FamilyRules
	vr *verdictRules
	// readAt is when the rules fr reads were read.
	readAt time.Time
	ev     scrapeEvidence
	dec    *decider
	// observed is the meter's evidence (nil: no meter); now the time the verdicts are decided at.
	observed *observations
	now      time.Time
	// apiSeen is when the EndpointSlice informer last heard from the API server (apiSeenOK: it can be asked).
	apiSeen   time.Time
	apiSeenOK bool
	// pendingGone: the Service decided last has rule endpoints the API view lacks, not yet confirmed gone.
	pendingGone bool
	// dropped says when a destination was first found dropped for a Service (set before prepare to look them up
	// live).
	dropped func(verdict.Destination, types.UID) time.Time
}

// newPass picks what decides this pass's verdicts (the rules, or the API view) and records it in st.Source.
func (g *Gatherer) newPass(st *State) *pass {
	p := &pass{g: g, st: st}
	st.Source = SourceAPI
	switch {
	case st.NotProgrammed:
		// Read, and empty: nothing drops (no blackhole page) and nothing is compared (no mismatch);
		// localtraffic_kube_proxy_programmed 0 says why.
		p.fr, st.Source = notProgrammed{}, SourceRules
	case st.Rules != nil && st.RulesErr == nil && st.Dataplane != DataplaneReplacement:
		p.vr = newVerdictRules(st.Rules)
		p.fr, p.readAt = p.vr, st.Rules.Info().ReadAt
		st.Source = SourceRules
	}
	return p
}

// prepare builds the decider from p.ev and what st holds of the node: its addresses and the meter's snapshot,
// whose observations are judged at now. Without p.dropped set, the dropped-since times are taken as they are
// now, for the whole pass (a scrape's full recomputation records them after deciding every Service).
func (p *pass) prepare(now time.Time) {
	if p.dropped == nil {
		since := p.g.arrivals.droppedSince(now, p.g.cfg.Quiet)
		p.dropped = func(d verdict.Destination, owner types.UID) time.Time { return since[d].of(owner) }
	}
	st, g := p.st, p.g
	p.dec = newDecider(p.fr, p.ev)
	if len(st.LocalAddrs) > 0 && st.AddrsErr == nil {
		// (A node without a single address is a lister that said nothing: no evidence.)
		p.dec.ev.Addresses = newNodeAddresses(st.AssignedAddrs, st.NodePortAddrs)
	}
	if st.Arrivals.Snapshot != nil {
		p.now = now
		p.observed = &observations{snap: st.Arrivals.Snapshot, quiet: g.cfg.Quiet, now: p.now,
			dropped: p.dropped, overloaded: g.arrivals.overloaded(p.now, g.cfg.Quiet)}
		p.dec.ev.Observed = p.observed
		p.dec.ev.Grace, p.dec.ev.LossHold, p.dec.ev.Now = g.cfg.Grace, g.cfg.LossHold, p.now
	}
	p.apiSeen, p.apiSeenOK = endpointSlicesSeen(st)
}

// decideService decides one Service from the pass's inputs and its health check answers, recording in seen
// and seenGone the drop counters and the ports with gone endpoints it read (what the trackers keep).
func (p *pass) decideService(svc kubeview.ServiceState, checks []FamilyCheck, seen map[counterKey]bool, seenGone map[goneKey]bool) ServiceResult {
	st, g, fr, vr := p.st, p.g, p.fr, p.vr
	if !st.KubeProxyConfig.ExternalIPs && !st.Dataplane.ReplacesKubeProxy() {
		// AllowServiceExternalIPs=false: kube-proxy writes no rule for an externalIP, so none is dropped
		// here, and none is compared. (The Service's ExternalIPs may be shared: replaced, not changed.)
		svc.ExternalIPs = nil
	}
	r := ServiceResult{Service: svc, Checks: checks}
	if p.observed != nil {
		p.observed.owner = svc.UID
	}
	ports := 0
	for _, fam := range svc.Families {
		ports += len(fam.Ports)
	}
	r.Ports = make([]PortResult, 0, ports)
	byFamily := map[corev1.IPFamily]*nodeprobe.HealthCheck{}
	for j := range r.Checks {
		byFamily[r.Checks[j].Family] = &r.Checks[j].HealthCheck
	}
	for _, fam := range svc.Families {
		if st.NotProgrammed {
			break
		}
		if fr != nil && fr.HasFamily(string(fam.Family)) {
			for _, port := range fam.Ports {
				sp := dataplane.ServicePort{Namespace: svc.Namespace, Name: svc.Name, Port: port.Name, Protocol: string(port.Protocol)}
				ps := st.Rules.Family(sp, string(fam.Family))
				k := counterKey{namespace: sp.Namespace, name: sp.Name, port: sp.Port, protocol: sp.Protocol, family: string(fam.Family)}
				seen[k] = true
				m := matchEndpoints(sp, port, ps)
				gk := goneKey{sp, string(fam.Family)}
				seenGone[gk] = m.gone > 0
				if m.gone > 0 && !g.gone.confirmed(gk, p.readAt, p.apiSeen, p.apiSeenOK) {
					m.gone = 0 // the API view may lag kube-proxy's: a new pod is not yet a deleted one
					p.pendingGone = true
				}
				if m.allGone(ps) {
					vr.markGone(sp, string(fam.Family))
				}
				pr := PortResult{Family: fam.Family, Port: port, Label: portLabel(port), Rules: ps,
					DroppedPackets: g.drops.count(k, ps.DropPackets, p.readAt),
					Mismatch:       portMismatch(port, ps, m, svc.ExternallyReachable(fam.Family, port)),
					GoneEndpoints:  m.gone}
				r.Mismatch = r.Mismatch || pr.Mismatch
				r.MismatchKnown = true
				r.Ports = append(r.Ports, pr)
			}
			continue
		}
		// No rules for this family (API-only mode, IPVS, or a family whose rules were not read): the
		// health check node port's localEndpoints is kube-proxy's own count, compared with the API's
		// (a wrong --hostname-override makes kube-proxy count none). A replacement's health
		// check server counts its own way (Cilium reports 0 for its Ingress Services by design): not
		// compared.
		if hc := byFamily[fam.Family]; hc != nil && hc.LocalEndpoints >= 0 && !st.Dataplane.ReplacesKubeProxy() {
			r.MismatchKnown = true
			r.Mismatch = r.Mismatch || hc.LocalEndpoints != fam.LocalReadyEndpoints
		}
	}
	r.Verdict = p.dec.decide(svc, st.Node, byFamily)
	return r
}

// scrapeEvidence is the drop counters' evidence of one scrape: when each destination's drop rule counter last
// grew, as of the rules read at at.
type scrapeEvidence struct {
	grewAt map[ruleKey]time.Time
	at     time.Time
	// window is the evidence window (--externalip.evidence-window); lossWindow is how long growth shows lost
	// traffic at a destination whose rotation the counter does not decide: the loss hold, as the meter's lost
	// attempts hold, or the evidence window where that is longer.
	window, lossWindow time.Duration
}

// Arriving implements verdict.Arrivals: the destination's drop rule counter grew within the evidence window
// (an externalIP's, which may put it in rotation), or within the loss window (a NodePort's or a load
// balancer IP's, which only say traffic is lost where the declared model has the node in rotation).
func (e scrapeEvidence) Arriving(d verdict.Destination) (string, bool) {
	k := ruleKey{counterKey: counterKey{namespace: d.Namespace, name: d.Service, port: d.Port, protocol: string(d.Protocol)},
		family: string(d.Family), address: d.Address, port: d.DestPort}
	grewAt, ok := e.grewAt[k]
	if !ok {
		return "", false
	}
	window := e.lossWindow
	if d.Kind == verdict.ExternalIP {
		window = e.window
	}
	if ago := e.at.Sub(grewAt); ago <= window {
		return fmt.Sprintf("kube-proxy's drop rule counter grew %s ago", ago.Round(time.Second)), true
	}
	return "", false
}

// evidence records the growth of every counted drop rule of one destination (the NodePort's, each address's:
// load balancer IPs with their firewall rule's count, externalIPs) in ruleGrowth, and keeps when each last
// grew. A rule for all destinations at once (kube-proxy 1.24 and older) says no destination, so it is none's
// evidence.
func (g *Gatherer) evidence(st *State, snap kubeview.Snapshot) scrapeEvidence {
	ev := scrapeEvidence{grewAt: map[ruleKey]time.Time{}, window: g.cfg.ExternalIPWindow,
		lossWindow: max(g.cfg.ExternalIPWindow, g.cfg.LossHold)}
	if st.Rules == nil || st.RulesErr != nil {
		return ev
	}
	ev.at = st.Rules.Info().ReadAt
	seen := make(map[ruleKey]bool, g.ruleGrowth.size()) // sized: grown from empty it was rehashed at every read
	for _, svc := range snap.Services {
		for _, fam := range svc.Families {
			if !st.Rules.HasFamily(string(fam.Family)) {
				continue
			}
			for _, p := range fam.Ports {
				sp := dataplane.ServicePort{Namespace: svc.Namespace, Name: svc.Name, Port: p.Name, Protocol: string(p.Protocol)}
				for _, d := range st.Rules.Family(sp, string(fam.Family)).Drops {
					if !d.Counted || d.AllDestinations {
						continue
					}
					k := ruleKey{counterKey: counterKey{namespace: sp.Namespace, name: sp.Name, port: sp.Port, protocol: sp.Protocol},
						family: string(fam.Family), address: d.Address, port: d.Port}
					seen[k] = true
					if grewAt := g.ruleGrowth.observe(k, d.Packets, ev.at); !grewAt.IsZero() {
						ev.grewAt[k] = grewAt
					}
				}
			}
		}
	}
	g.ruleGrowth.forget(seen)
	return ev
}

// probeKubeProxy asks kube-proxy's /healthz and /livez at once, where cfg says its health server listens
// (or where the flag says).
func (g *Gatherer) probeKubeProxy(ctx context.Context, node kubeview.NodeState, cfg nodeprobe.KubeProxyConfig) KubeProxyState {
	var addr string
	var err error
	if g.cfg.KubeProxyAddress != nil {
		addr, err = g.cfg.KubeProxyAddress(node)
	} else {
		addr, err = nodeprobe.KubeProxyHealthAddress(cfg, g.cfg.Addrs, nodeprobe.KubeProxyNodeIPs(node.KubeProxyNodeIPs(), cfg.BindAddress))
	}
	if err != nil {
		return KubeProxyState{Err: fmt.Errorf("choosing kube-proxy's health server address: %w", err)}
	}
	endpoints := []nodeprobe.KubeProxyPath{nodeprobe.PathHealthz, nodeprobe.PathLivez}
	answers := make([]nodeprobe.KubeProxyHealth, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, nodeprobe.ProbeTimeout(ctx, g.cfg.ProbeTimeout))
			defer cancel()
			answers[i] = nodeprobe.ProbeKubeProxy(pctx, g.cfg.Client, addr, ep)
			a := answers[i]
			switch {
			case !g.outcomes.changed("kube-proxy/"+string(ep), string(a.Result)):
			case a.Err != nil:
				g.cfg.Logger.Warn("kube-proxy health probe failed", "endpoint", string(a.Endpoint), "result", string(a.Result), "err", a.Err)
			default:
				g.cfg.Logger.Info("kube-proxy health probe answers", "endpoint", string(a.Endpoint), "result", string(a.Result))
			}
		}()
	}
	wg.Wait()
	return KubeProxyState{Healthz: answers[0], Livez: answers[1]}
}

// probeHealthChecks probes the health check node port of every LoadBalancer Service in each of its
// families, at most Concurrency at a time, on the family's address kube-proxy serves. The result is indexed
// like snap.Services; empty where a Service has no health check node port.
func (g *Gatherer) probeHealthChecks(ctx context.Context, snap kubeview.Snapshot, local []net.IP, cfg nodeprobe.KubeProxyConfig) [][]FamilyCheck {
	out := make([][]FamilyCheck, len(snap.Services))
	addrOf := g.healthCheckAddrs(snap.Node, local, cfg)
	sem := make(chan struct{}, g.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, svc := range snap.Services {
		if !probed(svc) {
			continue
		}
		out[i] = g.probeService(ctx, svc, addrOf, func(probe func()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case sem <- struct{}{}:
					defer func() { <-sem }()
				case <-ctx.Done():
				}
				probe()
			}()
		})
	}
	wg.Wait()
	return out
}

// healthCheckAddrs returns, per family, the address health check node ports are probed on: the flag's, else
// the node's address of the family kube-proxy serves them on. Both families are chosen at once, so the function
// only reads: the model's probes call it from goroutines of their own.
func (g *Gatherer) healthCheckAddrs(node kubeview.NodeState, local []net.IP, cfg nodeprobe.KubeProxyConfig) func(corev1.IPFamily) string {
	nodeIPs := nodeprobe.KubeProxyNodeIPs(node.KubeProxyNodeIPs(), cfg.BindAddress)
	addrs := map[corev1.IPFamily]string{}
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		if o := g.cfg.HealthCheckAddress; o != "" && kubeview.IPFamilyOf(o) == f {
			addrs[f] = o
		} else {
			addrs[f] = nodeprobe.PickFamilyAddress(local, nodeIPs, string(f), cfg.NodePortAddresses)
		}
	}
	return func(f corev1.IPFamily) string { return addrs[f] }
}

// probed: the Service has a health check node port kube-proxy serves (a LoadBalancer Service's).
func probed(svc kubeview.ServiceState) bool {
	return svc.HealthCheckNodePort != 0 && svc.Type == corev1.ServiceTypeLoadBalancer
}

// probeService probes svc's health check node port in each of its families on addrOf(family), handing each
// probe to run (which may run it at once, or later, concurrently with others); the result's entries are filled
// in when each probe ran. A probe that runs after ctx ended is a timeout.
func (g *Gatherer) probeService(ctx context.Context, svc kubeview.ServiceState, addrOf func(corev1.IPFamily) string, run func(func())) []FamilyCheck {
	out := make([]FamilyCheck, len(svc.Families))
	for j, fam := range svc.Families {
		fc := &out[j]
		fc.Family, fc.Address = fam.Family, addrOf(fam.Family)
		if fc.Address == "" {
			fc.HealthCheck = nodeprobe.HealthCheck{Result: nodeprobe.ResultNoAddress, LocalEndpoints: -1, Weight: -1,
				Err: fmt.Errorf("no local %s address kube-proxy serves health check node ports on", fam.Family)}
			if g.outcomes.changed("health-check/"+svc.Namespace+"/"+svc.Name+"/"+string(fam.Family), string(fc.Result)) {
				g.cfg.Logger.Warn("health check not probed", "namespace", svc.Namespace, "service", svc.Name,
					"family", string(fam.Family), "err", fc.Err)
			}
			continue
		}
		run(func() {
			if ctx.Err() != nil {
				fc.HealthCheck = nodeprobe.HealthCheck{Result: nodeprobe.ResultTimeout, LocalEndpoints: -1, Weight: -1, Err: ctx.Err()}
				return
			}
			pctx, cancel := context.WithTimeout(ctx, nodeprobe.ProbeTimeout(ctx, g.cfg.ProbeTimeout))
			defer cancel()
			fc.HealthCheck = nodeprobe.ProbeHealthCheckNodePort(pctx, g.cfg.Client, fc.Address, svc.HealthCheckNodePort, svc.Namespace, svc.Name)
			key := "health-check/" + svc.Namespace + "/" + svc.Name + "/" + string(fam.Family)
			if g.outcomes.changed(key, string(fc.Result)) && fc.Err != nil {
				g.cfg.Logger.Warn("health check node port probe failed", "namespace", svc.Namespace, "service", svc.Name,
					"family", string(fam.Family), "result", string(fc.Result), "err", fc.Err)
			}
		})
	}
	return out
}

// endpointSlicesSeen is when the exporter's EndpointSlice informer last heard from the API server (a list, a
// watch opened, an event or a bookmark); zero when the gatherer has no informers to ask.
func endpointSlicesSeen(st *State) (time.Time, bool) {
	for _, inf := range st.Informers {
		if inf.Resource == kubeview.ResourceEndpointSlices {
			return inf.LastSuccess, true
		}
	}
	return time.Time{}, false
}
