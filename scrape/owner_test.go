package scrape

import (
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"
)

// swapTracker is an APITracker whose Services the test replaces; Update reports the keys set since the last.
type swapTracker struct {
	mu      sync.Mutex
	states  map[string]kubeview.ServiceState
	changed []string
}

// set makes the tracker hold svcs (and nothing else) at its next Update, as one informer catch-up does.
func (s *swapTracker) set(svcs ...kubeview.ServiceState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[string]kubeview.ServiceState{}
	for _, svc := range svcs {
		next[svc.Namespace+"/"+svc.Name] = svc
	}
	for k := range s.states {
		s.changed = append(s.changed, k)
	}
	for k := range next {
		s.changed = append(s.changed, k)
	}
	s.states = next
}

func (s *swapTracker) Update(time.Time) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.changed
	s.changed = nil
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (s *swapTracker) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.states))
	for k := range s.states {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *swapTracker) State(key string) (kubeview.ServiceState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[key]
	return st, ok
}

func (s *swapTracker) Node() kubeview.NodeState {
	return kubeview.NodeState{Name: "node-1", Found: true, InternalIPs: []string{"127.0.0.1"}}
}
func (s *swapTracker) Announcers() map[announce.Source]announce.SourceState { return nil }
func (s *swapTracker) NextChange() time.Time                                { return time.Time{} }

// ownedNodePort is scrapetest.NodePortService (NodePort 30090) named name, of the Service object uid.
func ownedNodePort(name string, uid types.UID) kubeview.ServiceState {
	s := scrapetest.NodePortService(0)
	s.Name, s.UID = name, uid
	return s
}

// The meter learns at a destination what its owner's traffic is (arrivals.Watch.Owners): the node model names
// the Service that holds each destination now. A Service deleted and a new one given its NodePort in one
// catch-up of the informers, and a Service deleted and created again under its name with the same ports
// (another object), each give the meter a Watch naming the new owner, so that it forgets the old one's
// checkers and clients there (nodeprobe/arrivals' TestOwnerChange*). Before, the destinations were the same,
// and the second case gave the meter no new Watch at all.
func TestModelWatchNamesTheNewOwner(t *testing.T) {
	np := arrivals.NodeDest(arrivals.TCP, false, 30090)
	tr := &swapTracker{}
	meter := &scrapetest.Meter{Status: arrivals.StatusOK, Now: time.Unix(1_800_000_000, 0)}
	g := NewGatherer(GathererConfig{View: &scrapetest.View{}, RuleReader: &scrapetest.Reader{Snap: rulesWith(1, false)},
		Addrs: scrapetest.Addrs{"127.0.0.1"}, Meter: meter, KubeProxyAddress: scrapetest.NoAddress, ProbeTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	m := NewModel(g, ModelConfig{Tracker: tr, Synchronous: true})
	ctx, now := context.Background(), time.Unix(1_800_000_000, 0)
	owner := func() (string, bool) {
		meter.Mu.Lock()
		defer meter.Mu.Unlock()
		return meter.Watched.Owners[np], slices.Contains(meter.Watched.Dests, np)
	}
	for i, step := range []struct {
		what string
		svc  kubeview.ServiceState
	}{
		{"first", ownedNodePort("checkout", "uid-a")},
		{"the NodePort given to a new Service", ownedNodePort("billing", "uid-b")},
		{"the Service created again under its name", ownedNodePort("billing", "uid-c")},
	} {
		tr.set(step.svc)
		now = now.Add(time.Second)
		m.Step(ctx, now)
		if got, watched := owner(); !watched || got != string(step.svc.UID) {
			t.Fatalf("step %d (%s): NodePort watched %v, owner %q; want %q", i+1, step.what, watched, got, step.svc.UID)
		}
		if st := m.Latest(); st == nil || len(st.Services) != 1 || st.Services[0].Service.Name != step.svc.Name {
			t.Fatalf("step %d (%s): published Services %v, want %s alone", i+1, step.what, st, step.svc.Name)
		}
	}
}

// setNodePort gives the Service's first port the NodePort np, in its spec and in each family.
func setNodePort(s *kubeview.ServiceState, np int32) {
	s.Ports[0].NodePort = np
	for i := range s.Families {
		s.Families[i].Ports[0].NodePort = np
	}
}

// Two Services sharing a destination (a load balancer IP one announces for both, on different ports, shares
// nothing; the same address and port would) own it together, in one order whatever the API lists first.
func TestArrivalsWatchOwners(t *testing.T) {
	a, b := ownedNodePort("checkout", "uid-a"), ownedNodePort("billing", "uid-b")
	noUID := ownedNodePort("web", "")
	setNodePort(&noUID, 30091)
	lb := scrapetest.LBService()
	lb.Name, lb.UID = "front", "uid-lb"
	setNodePort(&lb, 30092)
	lb.LoadBalancerIPs = []string{"192.0.2.50"}
	for _, order := range [][]kubeview.ServiceState{{a, b, noUID, lb}, {lb, noUID, b, a}} {
		w := arrivalsWatch(order, nil, nil, nil)
		want := map[arrivals.Dest]string{
			arrivals.NodeDest(arrivals.TCP, false, 30090):                                  "uid-a,uid-b",
			arrivals.NodeDest(arrivals.TCP, false, 30092):                                  "uid-lb",
			{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.50"), Port: 80}:    "uid-lb",
			arrivals.NodeDest(arrivals.TCP, false, 32000):                                  "uid-lb",
			{Protocol: arrivals.TCP, Addr: netip.MustParseAddr("192.0.2.50"), Port: 32000}: "uid-lb",
		}
		for d, o := range want {
			if w.Owners[d] != o {
				t.Errorf("owner of %v: %q, want %q", d, w.Owners[d], o)
			}
		}
		if o, ok := w.Owners[arrivals.NodeDest(arrivals.TCP, false, 30091)]; ok {
			t.Errorf("a Service without a UID owns its NodePort as %q, want no owner named", o)
		}
	}
}

// The state file keeps whose traffic each run was, and a restarted exporter hands it back with the run: the
// meter applies it only to a destination of the same owner (nodeprobe/arrivals' TestRestoreOnlyOntoItsOwner).
func TestStateFileKeepsRunOwners(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	path := filepath.Join(t.TempDir(), "state.json")
	c := &clock{now: t0}
	before := startNode(t, path, c)
	before.meter.Mu.Lock()
	before.meter.Counts[restartNP] = arrivals.DestCount{Dest: restartNP, Attempts: 30, FirstSeen: t0.Add(-time.Minute),
		LastSeen: t0.Add(-time.Second), ActiveSince: t0.Add(-time.Minute), WatchedSince: t0.Add(-time.Hour), Owner: "uid-a"}
	before.meter.Mu.Unlock()
	before.g.Gather(context.Background())
	before.g.SaveState()

	c.now = t0.Add(10 * time.Second)
	after := startNode(t, path, c)
	if run, ok := after.meter.restored[restartNP]; !ok || run.Owner != "uid-a" {
		t.Errorf("restored run %+v (found %v), want it owned by uid-a", run, ok)
	}
}
