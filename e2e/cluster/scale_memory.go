package cluster

import (
	"context"
	"fmt"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Population describes a large population of Local Services for memory and API-load measurements: every
// Service is a single-port NodePort Service with externalTrafficPolicy Local and one EndpointSlice of
// EndpointsPer ready endpoints, all on nodes that are not the harness's (remote-1 … remote-RemoteNodes), as the
// EndpointSlice controller writes them (target refs, node names, zones, all three conditions).
type Population struct {
	Namespace    string
	EndpointsPer int // default 100, the controller's cap per slice
	RemoteNodes  int // default 50
	Workers      int // concurrent writers, default 16
}

func (s Population) withDefaults() Population {
	if s.EndpointsPer == 0 {
		s.EndpointsPer = 100
	}
	if s.RemoteNodes == 0 {
		s.RemoteNodes = 50
	}
	if s.Workers == 0 {
		s.Workers = 16
	}
	return s
}

// PopulationServiceName is the name of the i-th scale Service.
func PopulationServiceName(i int) string { return fmt.Sprintf("mem-%05d", i) }

func populationSliceName(i int) string { return PopulationServiceName(i) + "-scale" }

// Bulk is the population for CreateBulk; it grows by calling CreateBulk again with a larger to.
func (s Population) Bulk() Bulk {
	s = s.withDefaults()
	return Bulk{
		Namespace: s.Namespace,
		Service: func(i int) *corev1.Service {
			return NewService(s.Namespace, PopulationServiceName(i), corev1.ServiceTypeNodePort, WithAppLabel())
		},
		Slice:   func(svc *corev1.Service, i int) *discoveryv1.EndpointSlice { return populationSlice(s, svc, i) },
		Workers: s.Workers,
	}
}

// populationSlice is Service i's slice: EndpointsPer ready endpoints with addresses unique over the population
// (10.128.0.0/9), spread over the remote nodes.
func populationSlice(s Population, svc *corev1.Service, i int) *discoveryv1.EndpointSlice {
	slice := harnessSlice(svc, populationSliceName(i), discoveryv1.AddressTypeIPv4)
	slice.Endpoints = make([]discoveryv1.Endpoint, 0, s.EndpointsPer)
	for j := range s.EndpointsPer {
		g := i*s.EndpointsPer + j
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 128+(g>>16)&127, (g>>8)&255, g&255)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("remote-%d", 1+j%s.RemoteNodes)),
			Zone:       ptr.To(fmt.Sprintf("zone-%c", 'a'+j%3)),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%d", svc.Name, j)},
		})
	}
	return slice
}

// TouchPopulationService changes Service i (an annotation): one watch event per Service watcher, for the
// per-change cost.
func (c *Cluster) TouchPopulationService(ctx context.Context, s Population, i int, gen int) error {
	client, err := c.bulkClient()
	if err != nil {
		return err
	}
	name := PopulationServiceName(i)
	svc, err := client.CoreV1().Services(s.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Service %s: %w", name, err)
	}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations["e2e.localtraffic.io/touch"] = fmt.Sprintf("%09d", gen) // one width: one size per change
	if _, err := client.CoreV1().Services(s.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update Service %s: %w", name, err)
	}
	return nil
}

// TouchPopulationSlice flips the readiness of the first endpoint of Service i's slice: one watch event per
// EndpointSlice watcher.
func (c *Cluster) TouchPopulationSlice(ctx context.Context, s Population, i int) error {
	client, err := c.bulkClient()
	if err != nil {
		return err
	}
	name := populationSliceName(i)
	slice, err := client.DiscoveryV1().EndpointSlices(s.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get EndpointSlice %s: %w", name, err)
	}
	cond := &slice.Endpoints[0].Conditions
	cond.Ready = ptr.To(cond.Ready != nil && !*cond.Ready)
	if _, err := client.DiscoveryV1().EndpointSlices(s.Namespace).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update EndpointSlice %s: %w", name, err)
	}
	return nil
}

// ProcStatus is a process's memory as the kernel reports it in /proc/<pid>/status, in bytes.
type ProcStatus struct {
	VmRSS, VmHWM int64
	// RssAnon is the resident heap, stacks and runtime memory; RssFile the resident pages of mapped files: the
	// executable's code and read-only data the process has touched.
	RssAnon, RssFile int64
	// RssShmem is the resident shared memory mapped into it.
	RssShmem int64
}

// ReadProcStatus reads VmRSS (resident now), VmHWM (the resident peak), RssAnon and RssFile of pid, with
// prometheus/procfs (which converts the kernel's kB to bytes).
func ReadProcStatus(pid int) (ProcStatus, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return ProcStatus{}, fmt.Errorf("proc status: %w", err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return ProcStatus{}, fmt.Errorf("proc status of %d: %w", pid, err)
	}
	s, err := p.NewStatus()
	if err != nil {
		return ProcStatus{}, fmt.Errorf("proc status of %d: %w", pid, err)
	}
	if s.VmRSS == 0 {
		return ProcStatus{}, fmt.Errorf("proc status of %d: no VmRSS", pid)
	}
	return ProcStatus{VmRSS: int64(s.VmRSS), VmHWM: int64(s.VmHWM), RssAnon: int64(s.RssAnon), RssFile: int64(s.RssFile), RssShmem: int64(s.RssShmem)}, nil
}

// ExporterPID is the pid of the node's exporter (started by StartExporter; `ip netns exec` execs it, so the pid
// is the exporter's own).
func (n *Node) ExporterPID() (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exporter == nil {
		return 0, fmt.Errorf("no exporter on %s", n.Name)
	}
	if done, err := n.exporter.Exited(); done {
		return 0, fmt.Errorf("exporter on %s exited: %v", n.Name, err)
	}
	return n.exporter.Pid(), nil
}

// KubeProxyPID is the pid of the node's kube-proxy.
func (n *Node) KubeProxyPID() (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubeProxy == nil {
		return 0, fmt.Errorf("no kube-proxy on %s", n.Name)
	}
	return n.kubeProxy.Pid(), nil
}

// APIServerMetrics scrapes kube-apiserver's own /metrics (admin credentials).
func (c *Cluster) APIServerMetrics(ctx context.Context) (Metrics, error) {
	body, err := c.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return Metrics{}, fmt.Errorf("apiserver /metrics: %w", err)
	}
	return ParseMetrics(string(body))
}

// RestartAPIServerWith stops kube-apiserver and starts it again with extra flags appended to its own (kept for
// later restarts), waiting for /readyz: for an audit log, say.
func (c *Cluster) RestartAPIServerWith(ctx context.Context, extra ...string) error {
	c.StopAPIServer()
	c.mu.Lock()
	c.apiserverArgs = append(append([]string(nil), c.apiserverArgs...), extra...)
	c.mu.Unlock()
	return c.StartAPIServer(ctx)
}
