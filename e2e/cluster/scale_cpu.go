package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// MixedServices is a population of Local Services as a node of a real cluster sees them, for the exporter's
// CPU beside kube-proxy: mostly NodePort Services, every LoadBalancerEvery-th a LoadBalancer with an ingress IP
// in its status and a health check node port (which the exporter probes and kube-proxy serves on every node).
// Every Service has RemoteEndpoints ready endpoints on nodes that are not the harness's; every LocalEvery-th
// also one on each of LocalNodes. Endpoints are written as the EndpointSlice controller writes them (conditions,
// node name, zone, target ref), one slice per Service. Each endpoint has a generation: a change (ChangeRemote,
// ChangeLocal) replaces its pod by one with another address, as a rollout does.
type MixedServices struct {
	Namespace         string
	LocalNodes        []string
	LoadBalancerEvery int // default 4
	LocalEvery        int // default 10
	RemoteEndpoints   int // default 2
	// Workers writing concurrently; 0: CreateBulk's default.
	Workers int
}

func (s MixedServices) withDefaults() MixedServices {
	if s.LoadBalancerEvery == 0 {
		s.LoadBalancerEvery = 4
	}
	if s.LocalEvery == 0 {
		s.LocalEvery = 10
	}
	if s.RemoteEndpoints == 0 {
		s.RemoteEndpoints = 2
	}
	return s
}

// MixedServiceName is the name of the i-th Service of a MixedServices set.
func MixedServiceName(i int) string { return fmt.Sprintf("m%05d", i) }

// IsLoadBalancer says whether the i-th Service is a LoadBalancer (else a NodePort) Service.
func (s MixedServices) IsLoadBalancer(i int) bool { return i%s.withDefaults().LoadBalancerEvery == 0 }

// HasLocal says whether the i-th Service has an endpoint on each of LocalNodes.
func (s MixedServices) HasLocal(i int) bool { return i%s.withDefaults().LocalEvery == 0 }

// NodePorts is how many node ports (node ports and health check node ports) the first n Services take.
func (s MixedServices) NodePorts(n int) int {
	lb := (n + s.withDefaults().LoadBalancerEvery - 1) / s.withDefaults().LoadBalancerEvery
	return n + lb
}

// Bulk is the set for CreateBulk, the endpoints at generation 0; it grows by calling CreateBulk again.
func (s MixedServices) Bulk() Bulk {
	s = s.withDefaults()
	return Bulk{
		Namespace: s.Namespace,
		Service: func(i int) *corev1.Service {
			typ := corev1.ServiceTypeNodePort
			if s.IsLoadBalancer(i) {
				typ = corev1.ServiceTypeLoadBalancer
			}
			return NewService(s.Namespace, MixedServiceName(i), typ, WithAppLabel())
		},
		Slice: func(svc *corev1.Service, i int) *discoveryv1.EndpointSlice {
			return s.slice(svc, i, mixedGenerations{})
		},
		Status: func(i int) *corev1.ServiceStatus {
			if !s.IsLoadBalancer(i) {
				return nil
			}
			// 198.18.0.0/15 (benchmarking addresses): room for 130,000 distinct ingress IPs, never routed.
			ip := fmt.Sprintf("198.%d.%d.%d", 18+i/(250*250), i/250%250, i%250+1)
			return &corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{VIPIngress(ip)}}}
		},
		Workers: s.Workers,
	}
}

// mixedGenerations are the generations of one Service's endpoints: remote endpoint k's, and the local one's on
// each of LocalNodes (by index).
type mixedGenerations struct {
	remote, local map[int]int
}

// slice is the i-th Service's EndpointSlice with its endpoints at gen. An endpoint's address is unique over
// the set and changes with its generation: 10.<200+2k+gen%2>.x.y for remote endpoint k, 10.<230+2m+gen%2>.x.y
// for the local one on LocalNodes[m] (made up, outside every CIDR the harness routes: nothing is sent to them).
func (s MixedServices) slice(svc *corev1.Service, i int, gen mixedGenerations) *discoveryv1.EndpointSlice {
	slice := harnessSlice(svc, SliceName(svc.Name), discoveryv1.AddressTypeIPv4)
	ep := func(second, g int, node, pod string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", second+g%2, i/250, i%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(node),
			Zone:       ptr.To("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%s-%d", svc.Name, pod, g)},
		}
	}
	for k := range s.RemoteEndpoints {
		slice.Endpoints = append(slice.Endpoints, ep(200+2*k, gen.remote[k], fmt.Sprintf("remote-%d", k+1), fmt.Sprintf("r%d", k)))
	}
	if s.HasLocal(i) {
		for m, node := range s.LocalNodes {
			slice.Endpoints = append(slice.Endpoints, ep(230+2*m, gen.local[m], node, fmt.Sprintf("l%d", m)))
		}
	}
	return slice
}

// EndpointChurn changes the endpoints of the first Count Services of a MixedServices set, one slice write per
// change, round robin over the Services: what a cluster's rollouts and rescheduled pods make kube-proxy and the
// exporter see.
type EndpointChurn struct {
	c     *Cluster
	set   MixedServices
	count int

	mu            sync.Mutex
	gens          map[int]mixedGenerations
	remote, local int   // changes made so far of each kind
	localsByNode  []int // per LocalNodes index: the next local Service to change
}

// NewEndpointChurn returns a churn over the first count Services of set (created by CreateBulk). It knows the
// generation each endpoint is at: keep one churn for the set's life (Grow it with the set), or its first
// changes write what the slices already say.
func (c *Cluster) NewEndpointChurn(set MixedServices, count int) *EndpointChurn {
	set = set.withDefaults()
	return &EndpointChurn{c: c, set: set, count: count, gens: map[int]mixedGenerations{}, localsByNode: make([]int, len(set.LocalNodes))}
}

// Grow makes the churn go round the first count Services (the set grew).
func (e *EndpointChurn) Grow(count int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count = max(e.count, count)
}

// ChangeRemote replaces the first remote endpoint's pod of the next Service (round robin over all of them): a
// change on a node other than LocalNodes. It returns the Service changed.
func (e *EndpointChurn) ChangeRemote(ctx context.Context) (string, error) {
	e.mu.Lock()
	i := e.remote % e.count
	e.remote++
	g := e.generations(i)
	g.remote[0]++
	e.mu.Unlock()
	return MixedServiceName(i), e.write(ctx, i, g)
}

// ChangeLocal replaces the local endpoint's pod on LocalNodes[m] of the next Service with local endpoints
// (round robin over them, each node its own turn): a change on that node. It returns the Service changed.
func (e *EndpointChurn) ChangeLocal(ctx context.Context, m int) (string, error) {
	e.mu.Lock()
	var locals []int
	for i := range e.count {
		if e.set.HasLocal(i) {
			locals = append(locals, i)
		}
	}
	if len(locals) == 0 {
		e.mu.Unlock()
		return "", fmt.Errorf("none of the %d Services has local endpoints", e.count)
	}
	// The nodes start apart in the list, so that one minute's changes on two nodes touch two Services.
	i := locals[(e.localsByNode[m]+m*len(locals)/max(1, len(e.set.LocalNodes)))%len(locals)]
	e.localsByNode[m]++
	e.local++
	g := e.generations(i)
	g.local[m]++
	e.mu.Unlock()
	return MixedServiceName(i), e.write(ctx, i, g)
}

// generations is a copy of Service i's generations (under e.mu), which the caller changes and writes.
func (e *EndpointChurn) generations(i int) mixedGenerations {
	g := e.gens[i]
	next := mixedGenerations{remote: map[int]int{}, local: map[int]int{}}
	for k, v := range g.remote {
		next.remote[k] = v
	}
	for k, v := range g.local {
		next.local[k] = v
	}
	e.gens[i] = next
	return next
}

func (e *EndpointChurn) write(ctx context.Context, i int, g mixedGenerations) error {
	name := MixedServiceName(i)
	svc, err := e.c.admin.CoreV1().Services(e.set.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("churn: get Service %s/%s: %w", e.set.Namespace, name, err)
	}
	slices := e.c.admin.DiscoveryV1().EndpointSlices(e.set.Namespace)
	existing, err := slices.Get(ctx, SliceName(name), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("churn: get EndpointSlice of %s/%s: %w", e.set.Namespace, name, err)
	}
	slice := e.set.slice(svc, i, g)
	slice.ResourceVersion = existing.ResourceVersion
	updated, err := slices.Update(ctx, slice, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("churn: update EndpointSlice of %s/%s: %w", e.set.Namespace, name, err)
	}
	// The apiserver drops an update that changes nothing, without a watch event: no change anyone would see.
	if updated.ResourceVersion == existing.ResourceVersion {
		return fmt.Errorf("churn: the update of the EndpointSlice of %s/%s changed nothing", e.set.Namespace, name)
	}
	return nil
}

// prometheusAccept is the Accept header Prometheus 3 scrapes with: OpenMetrics first, the text format as a
// fallback (the exporter answers the text format, gzipped when asked, as Go's transport asks).
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
	"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
	"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// Scraper GETs one exporter's /metrics as Prometheus does: its Accept header, its scrape timeout header
// (10 s, Prometheus' default), gzip, and one kept-alive connection from inside the node's namespace.
type Scraper struct {
	client *http.Client
	url    string
}

// NewScraper returns a Scraper of the exporter listening on port on the node.
func (n *Node) NewScraper(port int) *Scraper {
	return &Scraper{
		client: &http.Client{Transport: &http.Transport{DialContext: n.Dialer().DialContext, MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second},
		url:    n.MetricsURLOn(port),
	}
}

// Scrape GETs /metrics and returns how many bytes of exposition it read.
func (s *Scraper) Scrape(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", prometheusAccept)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("scrape %s: %s", s.url, resp.Status)
	}
	return n, nil
}

// Close closes the scraper's kept-alive connection.
func (s *Scraper) Close() { s.client.CloseIdleConnections() }

// ExporterCPUProfile fetches a CPU profile of seconds from the exporter listening on port on the node (which
// runs with --web.enable-pprof) into path.
func (n *Node) ExporterCPUProfile(ctx context.Context, port, seconds int, path string) error {
	return n.exporterProfile(ctx, port, fmt.Sprintf("profile?seconds=%d", seconds), time.Duration(seconds)*time.Second, "cpu", path)
}

// ExporterHeapProfile fetches the heap profile of the exporter listening on port on the node into path: what it
// holds now (inuse_space) and what it allocated since it started (alloc_space).
func (n *Node) ExporterHeapProfile(ctx context.Context, port int, path string) error {
	return n.exporterProfile(ctx, port, "heap", 0, "heap", path)
}

// ExporterMemStats fetches the Go runtime's memory statistics of the exporter listening on port on the node (the
// "# runtime.MemStats" lines of its heap profile in text) into path, and returns those lines.
func (n *Node) ExporterMemStats(ctx context.Context, port int, path string) ([]string, error) {
	if err := n.exporterProfile(ctx, port, "heap?debug=1", 0, "heap text", path); err != nil {
		return nil, err
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("memory statistics of the exporter on %s: %w", n.Name, err)
	}
	_, stats, ok := strings.Cut(string(text), "# runtime.MemStats\n")
	if !ok {
		return nil, fmt.Errorf("memory statistics of the exporter on %s: no runtime.MemStats in %s", n.Name, path)
	}
	var lines []string
	for _, l := range strings.Split(stats, "\n") {
		if name, _, ok := strings.Cut(strings.TrimPrefix(l, "# "), " = "); ok && !strings.Contains(name, "PauseNs") && !strings.Contains(name, "PauseEnd") {
			lines = append(lines, strings.TrimPrefix(l, "# "))
		}
	}
	return lines, nil
}

func (n *Node) exporterProfile(ctx context.Context, port int, query string, takes time.Duration, what, path string) error {
	client := &http.Client{Transport: &http.Transport{DialContext: n.Dialer().DialContext, DisableKeepAlives: true},
		Timeout: takes + time.Minute}
	url := fmt.Sprintf("http://%s:%d/debug/pprof/%s", n.IP, port, query)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s profile of the exporter on %s: %w", what, n.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		return fmt.Errorf("%s profile of the exporter on %s: %s: %s", what, n.Name, resp.Status, body)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s profile of the exporter on %s: %w", what, n.Name, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s profile of the exporter on %s: %w", what, n.Name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s profile of the exporter on %s: %w", what, n.Name, err)
	}
	return nil
}

// KubeProxyMetrics scrapes the node's kube-proxy's own /metrics (127.0.0.1:10249 in the node's namespace).
func (n *Node) KubeProxyMetrics(ctx context.Context) (Metrics, error) {
	body, err := httpGetBody(ctx, netns.Dialer{NS: n.NS}, "http://127.0.0.1:10249/metrics")
	if err != nil {
		return Metrics{}, fmt.Errorf("kube-proxy metrics on %s: %w", n.Name, err)
	}
	return ParseMetrics(string(body))
}
