// Command promcost measures what localtraffic-exporter's series cost a real Prometheus: it serves the
// exporter's series for many emulated nodes on 127.0.0.1, runs the given Prometheus binary scraping every
// emulated node as its own target (with the shipped rule files loaded), and after a while reads Prometheus'
// own metrics: head series, resident memory, heap in use and rule evaluation time. docs/scale.md records its
// output; run it for two sizes to get the cost of one more series (the slope), which excludes Prometheus'
// fixed overhead:
//
//	cd alerts && go run ./cmd/promcost -prometheus ../.tools/bin/prometheus -nodes 100 -services 500
//	cd alerts && go run ./cmd/promcost -prometheus ../.tools/bin/prometheus -nodes 200 -services 500
//
// Each emulated node exports, per Local Service, what docs/metrics.md says the exporter exports (with -all,
// also every opt-in series), single port and single IP family, and node-level series as a real scrape of the
// exporter with its default flags has them. Everything listens on loopback only.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() { os.Exit(run()) }

type options struct {
	prometheus           string
	nodes, services      int
	loadBalancerPercent  int
	nodeLevel            int
	all                  bool
	scrapeInterval, wait time.Duration
	ruleFiles            string
}

func run() int {
	var o options
	flag.StringVar(&o.prometheus, "prometheus", "", "the prometheus binary (scripts/install-deps.sh prometheus installs one in .tools/bin)")
	flag.IntVar(&o.nodes, "nodes", 100, "emulated nodes (one scrape target each)")
	flag.IntVar(&o.services, "services", 500, "Local Services every node reports")
	flag.IntVar(&o.loadBalancerPercent, "lb-percent", 40, "percent of the Services that are LoadBalancers with a health check node port (the rest NodePort)")
	flag.IntVar(&o.nodeLevel, "node-series", 59, "node-level localtraffic_* series per node (a default scrape of the drill cluster's exporter has 59)")
	flag.BoolVar(&o.all, "all", false, "export every opt-in series too (--collector.service_details, --collector.rules.per-port)")
	flag.DurationVar(&o.scrapeInterval, "scrape-interval", 15*time.Second, "Prometheus' scrape and rule evaluation interval")
	flag.DurationVar(&o.wait, "wait", 3*time.Minute, "how long Prometheus scrapes before it is measured")
	flag.StringVar(&o.ruleFiles, "rules", "rules.yaml,alerts.yaml", "comma-separated rule files Prometheus evaluates (empty: none)")
	flag.Parse()
	if o.prometheus == "" || o.nodes < 1 || o.services < 0 || o.loadBalancerPercent < 0 || o.loadBalancerPercent > 100 {
		fmt.Fprintln(os.Stderr, "promcost: -prometheus is required; -nodes >= 1, -services >= 0, 0 <= -lb-percent <= 100")
		return 2
	}
	if err := measure(o); err != nil {
		fmt.Fprintln(os.Stderr, "promcost:", err)
		return 1
	}
	return 0
}

// body renders one node's scrape.
func body(o options, node string) []byte {
	var b strings.Builder
	lbs := o.services * o.loadBalancerPercent / 100
	idx, _ := strconv.Atoi(strings.TrimPrefix(node, "node-"))
	for i := 0; i < o.services; i++ {
		lb := i < lbs
		sel := fmt.Sprintf(`node=%q,namespace="ns-%02d",service="svc-%04d"`, node, i%50, i)
		// A healthy cluster: a NodePort Service (every node in rotation) runs a pod on every node, as a
		// DaemonSet; a LoadBalancer Service on one node in ten (the others out of rotation, drained).
		local := !lb || (idx+i)%10 == 0
		eps, blackhole, rotation := "0", "0", "1"
		if local {
			eps = "2"
		} else if lb {
			rotation = "0"
		} else {
			blackhole = "1"
		}
		fmt.Fprintf(&b, "localtraffic_blackhole{%s} %s\n", sel, blackhole)
		fmt.Fprintf(&b, "localtraffic_in_rotation{%s} %s\n", sel, rotation)
		fmt.Fprintf(&b, "localtraffic_local_endpoints{%s} %s\n", sel, eps)
		fmt.Fprintf(&b, "localtraffic_rules_mismatch{%s} 0\n", sel)
		if lb {
			fmt.Fprintf(&b, "localtraffic_health_check_up{%s} %s\n", sel, map[bool]string{true: "1", false: "0"}[local])
		}
		if lb || o.all {
			fmt.Fprintf(&b, "localtraffic_rules_dropped_packets_total{%s,port=\"http\",ip_family=\"IPv4\"} %d\n", sel, i%3)
		}
		if !o.all {
			continue
		}
		typ, hc := "NodePort", "0"
		if lb {
			typ, hc = "LoadBalancer", strconv.Itoa(30000+i)
		}
		fmt.Fprintf(&b, "localtraffic_service_info{%s,type=%q,health_check_node_port=%q} 1\n", sel, typ, hc)
		fmt.Fprintf(&b, "localtraffic_has_local_endpoint{%s} %s\n", sel, map[bool]string{true: "1", false: "0"}[local])
		fmt.Fprintf(&b, "localtraffic_rules_drop{%s,port=\"http\",ip_family=\"IPv4\"} %s\n", sel, map[bool]string{true: "0", false: "1"}[local])
		fmt.Fprintf(&b, "localtraffic_rules_local_endpoints{%s,port=\"http\",ip_family=\"IPv4\"} %s\n", sel, eps)
		if lb {
			for _, r := range []string{"ok", "unavailable", "empty", "invalid", "timeout", "refused", "error", "no_address"} {
				v := "0"
				if (local && r == "ok") || (!local && r == "unavailable") {
					v = "1"
				}
				fmt.Fprintf(&b, "localtraffic_health_check_result{%s,result=%q} %s\n", sel, r, v)
			}
			fmt.Fprintf(&b, "localtraffic_health_check_local_endpoints{%s} %s\n", sel, eps)
			fmt.Fprintf(&b, "localtraffic_health_check_service_proxy_healthy{%s} 1\n", sel)
			fmt.Fprintf(&b, "localtraffic_health_check_duration_seconds{%s} 0.001\n", sel)
		}
	}
	for i := 0; i < o.nodeLevel; i++ {
		fmt.Fprintf(&b, "localtraffic_node_level_%02d{node=%q} 1\n", i, node)
	}
	return []byte(b.String())
}

func measure(o options) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer l.Close()
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body(o, r.URL.Query().Get("node")))
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	dir, err := os.MkdirTemp("", "promcost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", o.scrapeInterval, o.scrapeInterval, o.scrapeInterval)
	if o.ruleFiles != "" {
		cfg.WriteString("rule_files:\n")
		for _, f := range strings.Split(o.ruleFiles, ",") {
			abs, err := filepath.Abs(f)
			if err != nil {
				return err
			}
			fmt.Fprintf(&cfg, "  - %s\n", abs)
		}
	}
	fmt.Fprintf(&cfg, "scrape_configs:\n  - job_name: localtraffic-exporter\n    honor_labels: true\n    static_configs:\n")
	for i := 0; i < o.nodes; i++ {
		n := fmt.Sprintf("node-%05d", i)
		fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {instance: %q, node: %q, __param_node: %q}\n", l.Addr().String(), n, n, n)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return err
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	promAddr := pl.Addr().String()
	pl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, o.prometheus, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start prometheus: %w", err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()

	perNode := len(strings.Split(strings.TrimSpace(string(body(o, "x"))), "\n"))
	fmt.Printf("nodes %d, services %d (%d%% LoadBalancer), all=%v: %d series per node, %d expected in total (+ up and scrape_* per target)\n",
		o.nodes, o.services, o.loadBalancerPercent, o.all, perNode, perNode*o.nodes)
	time.Sleep(o.wait)
	m, err := promMetrics("http://" + promAddr + "/metrics")
	if err != nil {
		return err
	}
	series := m["prometheus_tsdb_head_series"]
	rss := m["process_resident_memory_bytes"]
	heap := m["go_memstats_heap_inuse_bytes"]
	rulesTop, err := slowestRules("http://"+promAddr+"/api/v1/rules", 6)
	if err != nil {
		return err
	}
	evals := m["prometheus_rule_evaluations_total"]
	fmt.Printf("process CPU %.1f s over the run; %.0f rule evaluations; slowest rules (last evaluation): %s\n",
		m["process_cpu_seconds_total"], evals, rulesTop)
	fmt.Printf("after %s at %s: head series %.0f, RSS %.0f MiB, heap in use %.0f MiB, RSS/series %.0f B, heap/series %.0f B, head chunks %.0f, rule groups' last evaluation %.3f s, scrape samples %.0f\n",
		o.wait, o.scrapeInterval, series, rss/(1<<20), heap/(1<<20), rss/series, heap/series, m["prometheus_tsdb_head_chunks"], m["rule_group_last_duration_sum"], m["prometheus_tsdb_head_samples_appended_total"])
	return nil
}

// promMetrics reads the gauges it needs from Prometheus' own /metrics (summing rule groups' durations).
func promMetrics(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("read prometheus metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			if name[:j] == "prometheus_rule_group_last_duration_seconds" {
				out["rule_group_last_duration_sum"] += v
			}
			if name[:j] == "prometheus_tsdb_head_samples_appended_total" || name[:j] == "prometheus_rule_evaluations_total" {
				out[name[:j]] += v
			}
			continue
		}
		out[name] = v
	}
	return out, sc.Err()
}

// slowestRules lists the n rules with the longest last evaluation, from Prometheus' rules API.
func slowestRules(url string, n int) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", fmt.Errorf("read prometheus rules: %w", err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name           string  `json:"name"`
					EvaluationTime float64 `json:"evaluationTime"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", fmt.Errorf("decode prometheus rules: %w", err)
	}
	type rule struct {
		name string
		secs float64
	}
	var all []rule
	for _, g := range r.Data.Groups {
		for _, x := range g.Rules {
			all = append(all, rule{x.Name, x.EvaluationTime})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].secs > all[j].secs })
	var parts []string
	for i := 0; i < n && i < len(all); i++ {
		parts = append(parts, fmt.Sprintf("%s %.3fs", all[i].name, all[i].secs))
	}
	if len(parts) == 0 {
		return "none", nil
	}
	return strings.Join(parts, ", "), nil
}
