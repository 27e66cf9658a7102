package collector

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/rules"
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
	View      APIView
	Informers InformerSource // nil: no informer status
	Rules     rules.Reader   // nil: rules are not read, the API view decides
	// KubeProxyAddress returns kube-proxy's health server host:port: fixed by a flag, or the Node's
	// InternalIP:10256.
	KubeProxyAddress func(kubeview.NodeState) (string, error)
	// HealthCheckAddress picks the address to probe health check node ports on: a fixed address, or one of
	// the Node's InternalIPs confirmed local.
	HealthCheckAddress func(kubeview.NodeState) (string, error)
	Client             *http.Client
	ProbeTimeout       time.Duration // cap per probe; the scrape's deadline may shorten it
	Concurrency        int           // health check probes in flight at once
	Memory             *Memory       // nil: a new one
	Logger             *slog.Logger
}

// Gatherer reads every input of a scrape once, concurrently, under the scrape's context, and decides the
// verdicts: the result is one State that every collector renders.
type Gatherer struct{ cfg GathererConfig }

// NewGatherer returns a Gatherer.
func NewGatherer(cfg GathererConfig) *Gatherer {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.Memory == nil {
		cfg.Memory = NewMemory()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Client == nil {
		cfg.Client = nodeprobe.NewHTTPClient()
	}
	return &Gatherer{cfg: cfg}
}

// Gather reads the API view, then, concurrently, kube-proxy's rules, its health server and every health
// check node port, and decides. It never fails: an input that could not be read is recorded in the State.
func (g *Gatherer) Gather(ctx context.Context) *State {
	st := &State{took: map[Input]time.Duration{}, RulesConfigured: g.cfg.Rules != nil}
	var mu sync.Mutex // guards st.took while the inputs are read
	timed := func(in Input, start time.Time) {
		mu.Lock()
		st.took[in] = time.Since(start)
		mu.Unlock()
	}

	start := time.Now()
	snap, err := g.cfg.View.Snapshot()
	st.APIErr = err
	if err == nil {
		st.Node = snap.Node
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

	var checks []*nodeprobe.HealthCheck
	var wg sync.WaitGroup
	if g.cfg.Rules != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer timed(InputRules, time.Now())
			st.Rules, st.RulesErr = g.cfg.Rules.Read(ctx)
			if st.RulesErr != nil {
				st.RulesErr = fmt.Errorf("reading kube-proxy's rules: %w", st.RulesErr)
			}
		}()
	}
	if st.NodeErr == nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer timed(InputKubeProxy, time.Now())
			st.KubeProxy = g.probeKubeProxy(ctx, st.Node)
		}()
	}
	if st.APIErr == nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer timed(InputHealthChecks, time.Now())
			checks = g.probeHealthChecks(ctx, snap)
		}()
	}
	wg.Wait()

	g.decide(st, snap, checks)
	return st
}

// decide fills in the per-Service results from what was read.
func (g *Gatherer) decide(st *State, snap kubeview.Snapshot, checks []*nodeprobe.HealthCheck) {
	var rv RuleView
	st.Source = SourceAPI
	if st.Rules != nil && st.RulesErr == nil {
		rv = snapshotView{st.Rules}
		st.Source = SourceRules
	}
	if st.APIErr != nil {
		return
	}
	seen := map[counterKey]bool{}
	st.Services = make([]ServiceResult, len(snap.Services))
	for i, svc := range snap.Services {
		r := ServiceResult{Service: svc, HealthCheck: checks[i]}
		if rv != nil {
			for _, p := range svc.Ports {
				sp := rules.ServicePort{Namespace: svc.Namespace, Name: svc.Name, Port: p.Name, Protocol: string(p.Protocol)}
				ps := st.Rules.Port(sp)
				k := counterKey{namespace: sp.Namespace, name: sp.Name, port: sp.Port, protocol: sp.Protocol}
				seen[k] = true
				pr := PortResult{Port: p, Label: portLabel(p), Rules: ps,
					DroppedPackets: g.cfg.Memory.countDrops(k, ps.DropPackets, st.Rules.ReadAt),
					Mismatch:       portMismatch(p, ps, svc.ExternallyReachable(p))}
				r.Mismatch = r.Mismatch || pr.Mismatch
				r.Ports = append(r.Ports, pr)
			}
		}
		r.Verdict = Decide(svc, st.Node, r.HealthCheck, rv)
		st.Services[i] = r
	}
	if rv != nil {
		g.cfg.Memory.forget(seen)
	}
}

// probeKubeProxy asks kube-proxy's /healthz and /livez at once.
func (g *Gatherer) probeKubeProxy(ctx context.Context, node kubeview.NodeState) KubeProxyState {
	addr, err := g.cfg.KubeProxyAddress(node)
	if err != nil {
		return KubeProxyState{Err: fmt.Errorf("choosing kube-proxy's health server address: %w", err)}
	}
	endpoints := []string{"healthz", "livez"}
	answers := make([]nodeprobe.KubeProxyHealth, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, nodeprobe.ProbeTimeout(ctx, g.cfg.ProbeTimeout))
			defer cancel()
			answers[i] = nodeprobe.ProbeKubeProxy(pctx, g.cfg.Client, addr, ep)
			if a := answers[i]; a.Err != nil {
				g.cfg.Logger.Warn("kube-proxy health probe failed", "endpoint", a.Endpoint, "result", string(a.Result), "err", a.Err)
			}
		}()
	}
	wg.Wait()
	return KubeProxyState{Healthz: answers[0], Livez: answers[1]}
}

// probeHealthChecks probes the health check node port of every LoadBalancer Service, at most Concurrency at
// a time. The result is indexed like snap.Services; nil where a Service has no health check node port.
func (g *Gatherer) probeHealthChecks(ctx context.Context, snap kubeview.Snapshot) []*nodeprobe.HealthCheck {
	out := make([]*nodeprobe.HealthCheck, len(snap.Services))
	var addr string
	var addrErr error
	addrOnce := sync.OnceFunc(func() { addr, addrErr = g.cfg.HealthCheckAddress(snap.Node) })

	sem := make(chan struct{}, g.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, svc := range snap.Services {
		if svc.HealthCheckNodePort == 0 || svc.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		addrOnce()
		if addrErr != nil {
			out[i] = &nodeprobe.HealthCheck{Result: nodeprobe.ResultError, LocalEndpoints: -1, Weight: -1,
				Err: fmt.Errorf("choosing the address to probe: %w", addrErr)}
			g.cfg.Logger.Warn("health check not probed", "namespace", svc.Namespace, "service", svc.Name, "err", addrErr)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				out[i] = &nodeprobe.HealthCheck{Result: nodeprobe.ResultTimeout, LocalEndpoints: -1, Weight: -1, Err: ctx.Err()}
				return
			}
			pctx, cancel := context.WithTimeout(ctx, nodeprobe.ProbeTimeout(ctx, g.cfg.ProbeTimeout))
			defer cancel()
			hc := nodeprobe.ProbeHealthCheckNodePort(pctx, g.cfg.Client, addr, svc.HealthCheckNodePort, svc.Namespace, svc.Name)
			if hc.Err != nil {
				g.cfg.Logger.Warn("health check node port probe failed", "namespace", svc.Namespace, "service", svc.Name,
					"result", string(hc.Result), "err", hc.Err)
			}
			out[i] = &hc
		}()
	}
	wg.Wait()
	return out
}
