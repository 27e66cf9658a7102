// Package scrapetest fakes what a scrape gathers (the API view, kube-proxy's rules, the node's addresses, the
// arrivals meter) and builds the Services a scrape decides, for the tests of scrape, which gathers,
// and of collector, which renders. Only tests import it.
package scrapetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// View is an API view over a fixed snapshot that counts how often it is read.
type View struct {
	Snap      kubeview.Snapshot
	Err       error
	Snapshots atomic.Int32
}

func (f *View) Snapshot() (kubeview.Snapshot, error) {
	f.Snapshots.Add(1)
	return f.Snap, f.Err
}

func (f *View) Node() (kubeview.NodeState, error) { return f.Snap.Node, nil }

// Reader is a dataplane reader (scrape.DataplaneReader) that returns one read (a kernelrules.Snapshot, say)
// and counts reads.
type Reader struct {
	Snap  dataplane.Rules
	Err   error
	Reads atomic.Int32
}

func (c *Reader) Read(context.Context) (dataplane.Rules, error) {
	c.Reads.Add(1)
	return c.Snap, c.Err
}

// NoAddress finds no address for kube-proxy's health server.
func NoAddress(kubeview.NodeState) (string, error) { return "", errors.New("no address in this test") }

// Addrs are the node's addresses.
type Addrs []string

func (f Addrs) LocalAddrs() ([]net.IP, error) {
	var out []net.IP
	for _, a := range f {
		out = append(out, net.ParseIP(a))
	}
	return out, nil
}

// Meter is an arrivals meter whose counts the test sets: every watched destination gets Counts[d], the
// receive times relative to the snapshot's time Now.
type Meter struct {
	Mu      sync.Mutex
	Status  arrivals.Status
	Watched arrivals.Watch
	Counts  map[arrivals.Dest]arrivals.DestCount
	Now     time.Time
}

func (m *Meter) Watch(w arrivals.Watch) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Watched = w
	return nil
}

func (m *Meter) Snapshot() arrivals.Snapshot {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	s := arrivals.Snapshot{Status: m.Status, Since: m.Now.Add(-time.Hour), Taken: m.Now,
		Families: []arrivals.FamilyStats{{Family: "IPv4", Dropped: 3}, {Family: "IPv6"}}}
	for _, d := range m.Watched.Dests {
		c := m.Counts[d]
		c.Dest = d
		s.Dests = append(s.Dests, c)
	}
	return s
}

// Repeating is c as a meter counts clients whose dropped SYNs the kernel retransmits: every arrival repeated
// its source (arrivals.DestCount.Repeated is the whole count, Clients.Repeated the clients'), none a port scan's.
func Repeating(c arrivals.DestCount) arrivals.DestCount {
	c.Repeated = arrivals.RepeatCount{Attempts: c.Attempts, ActiveSince: c.ActiveSince, LastSeen: c.LastSeen}
	c.Clients.Repeated = arrivals.RepeatCount{Attempts: c.Clients.Attempts, ActiveSince: c.Clients.ActiveSince, LastSeen: c.Clients.LastSeen}
	return c
}

// Family is one family's single port "http" (NodePort 30090) with local endpoints; clusterWide false means no
// endpoint anywhere.
func Family(f corev1.IPFamily, local int, clusterWide bool) kubeview.FamilyEndpoints {
	return kubeview.FamilyEndpoints{Family: f, LocalEndpoints: local, LocalReadyEndpoints: local,
		Ports: []kubeview.PortEndpoints{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090, Local: local, ClusterWide: clusterWide}}}
}

// NodePortService is kubelings/checkout, a NodePort Service with fams (one IPv4 family with local endpoints
// when none is given).
func NodePortService(local int, fams ...kubeview.FamilyEndpoints) kubeview.ServiceState {
	if len(fams) == 0 {
		fams = []kubeview.FamilyEndpoints{Family(corev1.IPv4Protocol, local, true)}
	}
	return kubeview.ServiceState{Namespace: "kubelings", Name: "checkout", Type: corev1.ServiceTypeNodePort,
		Ports:    []kubeview.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30090}},
		Families: fams}
}

// LBService is NodePortService as a LoadBalancer Service with health check node port 32000.
func LBService(fams ...kubeview.FamilyEndpoints) kubeview.ServiceState {
	s := NodePortService(0, fams...)
	s.Type, s.HealthCheckNodePort = corev1.ServiceTypeLoadBalancer, 32000
	return s
}

// RefusedKubeProxy is an address for kube-proxy's health server where nothing listens.
func RefusedKubeProxy(t testing.TB) func(kubeview.NodeState) (string, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return func(kubeview.NodeState) (string, error) { return addr, nil }
}

// Links are the host's links.
type Links []string

func (f Links) LinkNames() ([]string, error) { return f, nil }

// DualStackNode is node-1 with an IPv4 and an IPv6 loopback address.
func DualStackNode() kubeview.NodeState {
	return kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.1", "::1"}}
}

// HealthAnswer is what one family's health check server says; Status 0: nothing listens in that family.
type HealthAnswer struct {
	Status int
	Local  int
}

// DualStackHealthCheck serves kube-proxy's health check answer for kubelings/checkout on 127.0.0.1 and ::1
// at the same port, one answer per family, as v1.37's per-family servers do (tcp4 and tcp6 sockets), until
// the test ends; it returns the port.
func DualStackHealthCheck(t testing.TB, a4, a6 HealthAnswer) int32 {
	t.Helper()
	handler := func(a HealthAnswer) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Load-Balancing-Endpoint-Weight", fmt.Sprint(a.Local))
			w.WriteHeader(a.Status)
			fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": \"kubelings\",\n\t\t\"name\": \"checkout\"\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": true\n}", a.Local)
		})
	}
	for attempt := 0; attempt < 20; attempt++ {
		l4, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l4.Addr().(*net.TCPAddr).Port
		l6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", port))
		if err != nil {
			l4.Close()
			continue // the port is taken in IPv6: try another
		}
		serve := func(l net.Listener, a HealthAnswer) {
			if a.Status == 0 {
				l.Close() // nothing listens: connections are refused
				return
			}
			srv := &http.Server{Handler: handler(a), ReadHeaderTimeout: time.Second}
			go srv.Serve(l)
			t.Cleanup(func() { srv.Close() })
		}
		serve(l4, a4)
		serve(l6, a6)
		return int32(port)
	}
	t.Fatal("no port free in both families")
	return 0
}
