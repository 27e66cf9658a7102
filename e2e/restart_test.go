package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// rawDropCounter reads the packet counter of the service port's "has no local endpoints" DROP rule(s) straight
// from iptables-save -c on the node, summed over families.
func rawDropCounter(ctx context.Context, n *cluster.Node, svc *corev1.Service) (uint64, error) {
	re := regexp.MustCompile(`^\[(\d+):\d+\] .*"` + regexp.QuoteMeta(svc.Namespace+"/"+svc.Name+":http") + ` has no local endpoints".* -j DROP`)
	var total uint64
	found := false
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := n.Exec(ctx, save, "-c", "-t", "filter")
		if err != nil {
			return 0, fmt.Errorf("%s on %s: %w", save, n.Name, err)
		}
		for _, line := range regexpLines(out) {
			if m := re.FindStringSubmatch(line); m != nil {
				v, _ := strconv.ParseUint(m[1], 10, 64)
				total += v
				found = true
			}
		}
	}
	if !found {
		return 0, fmt.Errorf("no drop rule for %s/%s on %s", svc.Namespace, svc.Name, n.Name)
	}
	return total, nil
}

func regexpLines(s string) []string { return regexp.MustCompile(`\r?\n`).Split(s, -1) }

// counterWatch scrapes one counter series every half second and records every value, so a fall between two
// checkpoints cannot hide.
type counterWatch struct {
	mu     sync.Mutex
	values []float64
	stop   chan struct{}
	done   chan struct{}
}

func watchCounter(ctx context.Context, c *cluster.Cluster, node, name string, labels cluster.Labels) *counterWatch {
	w := &counterWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if m, err := c.Metrics(ctx, node); err == nil {
				if v, ok, err := m.Value(name, labels); err == nil && ok {
					w.mu.Lock()
					w.values = append(w.values, v)
					w.mu.Unlock()
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

// end stops the watch and returns the first fall seen (an error) and the values.
func (w *counterWatch) end() ([]float64, error) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 1; i < len(w.values); i++ {
		if w.values[i] < w.values[i-1] {
			return w.values, fmt.Errorf("counter fell from %v to %v (sample %d of %d)", w.values[i-1], w.values[i], i, len(w.values))
		}
	}
	return w.values, nil
}

// sendDroppedSYNs makes n connection attempts from the outside client to addr, each of which must be a
// blackhole (SYNs dropped by kube-proxy's rule).
func sendDroppedSYNs(t *testing.T, c *cluster.Cluster, addr string, n int) {
	t.Helper()
	for range n {
		if r := c.Request(testContext(t), addr); r.Verdict != cluster.Blackhole {
			fatalf(t, "request to %s: %s, want blackhole", addr, r)
		}
	}
}

// TestRestartsAndDropCounter: real dropped SYNs are counted before and after a real kube-proxy restart, which
// rewrites its rules and so resets the DROP rule's counter; localtraffic_rules_dropped_packets_total never falls
// (sampled every half second throughout) and grows with the new drops. Then the exporter itself restarts: its
// counters start afresh from zero — the dropped-packet total too, although kube-proxy's rule still holds its
// count: a counter seen for the first time is a baseline — a counter reset Prometheus' rate() and
// increase() handle.
func TestRestartsAndDropCounter(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	n1, n2 := c.Node("node-1"), c.Node("node-2")
	if n1.ProxyMode != cluster.IPTables {
		fatalf(t, "node-1 runs %s; the drop rule counters exist in iptables mode", n1.ProxyMode)
	}
	svc := newService(t, c, "e2e-restarts", "dropping", corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal)
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, n2.Name)...))
	addr := nodePortAddr(n1, svc)
	labels := portLabels(svc, n1.Name)
	eventually(t, converge, "node-1 drops the Service and the exporter counts it", func() error {
		return expectMetrics(ctx, c, n1.Name, metricIs("localtraffic_rules_drop", labels, 1),
			metricIs("localtraffic_blackhole", svcLabels(svc, n1.Name), 1))
	})

	watch := watchCounter(ctx, c, n1.Name, "localtraffic_rules_dropped_packets_total", labels)
	sendDroppedSYNs(t, c, addr, 3)
	var before float64
	eventually(t, converge, "the SYNs before the restart counted", func() error {
		m, err := c.Metrics(ctx, n1.Name)
		if err != nil {
			return err
		}
		v, _, err := m.Value("localtraffic_rules_dropped_packets_total", labels)
		if err != nil || v < 3 {
			return fmt.Errorf("dropped packets %v (%v), want at least the 3 connection attempts' SYNs", v, err)
		}
		before = v
		return nil
	})
	rawBefore, err := rawDropCounter(ctx, n1, svc)
	if err != nil {
		fatalln(t, err)
	}

	n1.StopKubeProxy()
	if err := n1.StartKubeProxy(ctx, cluster.KubeProxyOptions{}); err != nil {
		fatalln(t, err)
	}
	if err := n1.WaitKubeProxyHealthy(ctx, converge); err != nil {
		fatalln(t, err)
	}
	// The new kube-proxy rewrote the rule: its counter starts over. Without that this test would prove nothing.
	eventually(t, converge, "kube-proxy's restart reset the DROP rule's counter", func() error {
		raw, err := rawDropCounter(ctx, n1, svc)
		if err != nil {
			return err
		}
		if raw >= rawBefore {
			return fmt.Errorf("raw counter %d, %d before the restart: not rewritten yet", raw, rawBefore)
		}
		return nil
	})
	sendDroppedSYNs(t, c, addr, 3)
	var after float64
	eventually(t, converge, "the SYNs after the restart counted on top", func() error {
		m, err := c.Metrics(ctx, n1.Name)
		if err != nil {
			return err
		}
		v, _, err := m.Value("localtraffic_rules_dropped_packets_total", labels)
		if err != nil || v < before+3 {
			return fmt.Errorf("dropped packets %v (%v), want at least %v + 3", v, err, before)
		}
		after = v
		return nil
	})
	values, err := watch.end()
	if err != nil {
		errorf(t, "across the kube-proxy restart: %v\nsamples: %v", err, values)
	}
	t.Logf("dropped packets: %v before kube-proxy's restart (raw rule counter %d), %v after; %d samples, none falling",
		before, rawBefore, after, len(values))

	// The exporter's own restart.
	startBefore := processStart(t, c, n1.Name)
	n1.StopExporter()
	if err := n1.StartExporter(ctx); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := n1.WaitExporter(context.Background(), time.Minute); err != nil {
			errorln(t, err)
		}
	})
	if err := n1.WaitExporter(ctx, time.Minute); err != nil {
		fatalln(t, err)
	}
	eventually(t, converge, "the restarted exporter starts its counters afresh", func() error {
		m, err := c.Metrics(ctx, n1.Name)
		if err != nil {
			return err
		}
		raw, err := rawDropCounter(ctx, n1, svc)
		if err != nil {
			return err
		}
		total, ok, err := m.Value("localtraffic_rules_dropped_packets_total", labels)
		if err != nil || !ok {
			return fmt.Errorf("dropped packets absent after the restart (%v)", err)
		}
		// No traffic meanwhile: the rule's count so far is the fresh exporter's baseline, not new drops.
		if total != 0 || raw == 0 {
			return fmt.Errorf("dropped packets %v after the exporter's restart, raw rule counter %d: want 0 over a non-zero rule counter", total, raw)
		}
		// The informer counters are the new process's: its initial list (a streaming watch-list on this
		// kube-apiserver) and nothing failed yet.
		for _, r := range []string{"services", "endpointslices", "nodes"} {
			var ok float64
			for _, name := range []string{"localtraffic_informer_list_total", "localtraffic_informer_watch_total"} {
				v, _, err := m.Value(name, cluster.Labels{"node": n1.Name, "resource": r, "result": "success"})
				if err != nil {
					return err
				}
				ok += v
				if err := m.Expect(name, cluster.Labels{"node": n1.Name, "resource": r, "result": "error"}, 0); err != nil {
					return err
				}
			}
			if ok < 1 || ok > 3 {
				return fmt.Errorf("%s: %v successful lists and watches in a fresh process", r, ok)
			}
		}
		return nil
	})
	if start := processStart(t, c, n1.Name); start <= startBefore {
		errorf(t, "process_start_time_seconds %v, %v before: not a new process", start, startBefore)
	}
}

func processStart(t *testing.T, c *cluster.Cluster, node string) float64 {
	t.Helper()
	m, err := c.Metrics(testContext(t), node)
	if err != nil {
		fatalln(t, err)
	}
	v, ok, err := m.Value("process_start_time_seconds", cluster.Labels{"node": node})
	if err != nil || !ok {
		fatalf(t, "process_start_time_seconds on %s: present %v, %v", node, ok, err)
	}
	return v
}
