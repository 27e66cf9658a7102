package alerts

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-jsonnet"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	yamlv2 "go.yaml.in/yaml/v2"
)

// The sharding test runs the shipped rules with Prometheus' own rule engine (the one promtool test rules uses)
// on three layouts of the same cluster's series:
//
//   - unsharded: one Prometheus scrapes every node's exporter and evaluates every group;
//   - two shards: the exporters' targets split by docs/scale.md's hashmod relabelling, each shard evaluating
//     the recording rules and the shard-safe alert groups (the mixin's prometheusAlerts with
//     _config.shardedPrometheus);
//   - a global ruler: it sees only what the shards recorded (the series with a ':' in their name, as a
//     remote-write that keeps only recording rules' output or a Thanos Query over the shards returns them, with
//     each shard's external label) and evaluates the mixin's prometheusGlobalAlerts.
//
// Per-node alerts must fire on the shards exactly as unsharded (each on the shard that scrapes the node), and
// the cross-node alert on the global ruler exactly as unsharded; the cross-node alert evaluated on a shard must
// be wrong, which is why the mixin keeps it off the shards.

const (
	shardCount   = 2
	shardMinutes = 30
	shardLabel   = "prometheus_shard" // the external label distinguishing the shards (any name works)
)

// shardScenario is a cluster of nodes and Local Services, and the default series their exporters export.
type shardScenario struct {
	nodes   []string          // node names, in order
	address map[string]string // node -> scrape address (__address__ and instance)
	series  []shardSeries
}

type shardSeries struct {
	node   string
	labels string // the full selector, e.g. localtraffic_blackhole{instance="...",...}
	values string // promqltest notation over shardMinutes+1 samples, one a minute
}

func (s *shardScenario) add(node, metric, extra, values string) {
	sel := fmt.Sprintf(`%s{instance=%q,job="localtraffic-exporter",node=%q`, metric, s.address[node], node)
	if extra != "" {
		sel += "," + extra
	}
	s.series = append(s.series, shardSeries{node: node, labels: sel + "}", values: values})
}

// shardOf is the shard whose Prometheus keeps the node's target under the relabelling, or -1 if none does.
func shardOf(t *testing.T, relabels []*relabel.Config, address string) int {
	t.Helper()
	found := -1
	for k := 0; k < shardCount; k++ {
		lb := labels.NewBuilder(labels.FromStrings("__address__", address, "job", "localtraffic-exporter"))
		if relabel.ProcessBuilder(lb, forShard(t, relabels, k)...) {
			if found >= 0 {
				t.Fatalf("target %s kept by shards %d and %d", address, found, k)
			}
			found = k
		}
	}
	return found
}

// forShard is the documented relabelling with its keep rule selecting shard k (the document shows shard 0).
func forShard(t *testing.T, relabels []*relabel.Config, k int) []*relabel.Config {
	t.Helper()
	out := make([]*relabel.Config, len(relabels))
	for i, c := range relabels {
		cp := *c
		if c.Action == relabel.Keep {
			cp.Regex = relabel.MustNewRegexp(strconv.Itoa(k))
		}
		out[i] = &cp
	}
	return out
}

// documentedShardRelabel reads the relabel_configs of the sharding example in docs/scale.md (between the
// shard-relabel markers) and checks it is the hashmod split this test assumes.
func documentedShardRelabel(t *testing.T) []*relabel.Config {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), ScaleDocPath))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- shard-relabel:start -->\\s*```yaml\\n(.*?)```\\s*<!-- shard-relabel:end -->").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("%s: no ```yaml block between <!-- shard-relabel:start --> and <!-- shard-relabel:end -->", ScaleDocPath)
	}
	var job struct {
		RelabelConfigs []*relabel.Config `yaml:"relabel_configs"`
	}
	if err := yamlv2.Unmarshal(m[1], &job); err != nil {
		t.Fatalf("%s: shard relabelling: %v", ScaleDocPath, err)
	}
	var hashmod, keep bool
	for _, c := range job.RelabelConfigs {
		if err := c.Validate(model.UTF8Validation); err != nil {
			t.Fatalf("%s: relabel config %+v: %v", ScaleDocPath, c, err)
		}
		switch c.Action {
		case relabel.HashMod:
			hashmod = c.Modulus == shardCount && len(c.SourceLabels) == 1 && c.SourceLabels[0] == "__address__"
		case relabel.Keep:
			keep = c.Regex.String() == "^(?s:0)$" || c.Regex.String() == "0"
		}
	}
	if !hashmod || !keep {
		t.Fatalf("%s: want a hashmod of __address__ modulo %d and a keep of shard 0, got %+v", ScaleDocPath, shardCount, job.RelabelConfigs)
	}
	return job.RelabelConfigs
}

// newShardScenario builds a cluster of 10 nodes whose roles are picked by shard, so that every case below
// straddles the shards the way it must: a Service's only endpoint node on one shard, the nodes it blackholes
// on both; and a Service with endpoints on two nodes, one per shard (each shard alone sees a single node).
func newShardScenario(t *testing.T, relabels []*relabel.Config) (*shardScenario, map[string]int) {
	s := &shardScenario{address: map[string]string{}}
	shard := map[string]int{}
	byShard := make([][]string, shardCount)
	for i := 1; i <= 10; i++ {
		n := fmt.Sprintf("node-%02d", i)
		s.nodes = append(s.nodes, n)
		s.address[n] = fmt.Sprintf("10.0.0.%d:9746", i)
		k := shardOf(t, relabels, s.address[n])
		if k < 0 {
			t.Fatalf("no shard keeps %s", s.address[n])
		}
		shard[n] = k
		byShard[k] = append(byShard[k], n)
	}
	for k, ns := range byShard {
		if len(ns) < 3 {
			t.Fatalf("shard %d scrapes only %v of 10 nodes: pick other addresses", k, ns)
		}
	}
	a, a2, a3 := byShard[0][0], byShard[0][1], byShard[0][2] // on shard 0
	b, b2 := byShard[1][0], byShard[1][1]                    // on shard 1
	const steady = "1x30"
	for _, n := range s.nodes {
		// Node-level defaults. b2's kube-proxy stops answering /livez at 2m; a3's exporter is down from 3m
		// (its series go stale, up is 0); a2's rules collector fails from 1m.
		livez := steady
		if n == b2 {
			livez = "1 1 0x29"
		}
		s.add(n, "localtraffic_kube_proxy_up", `endpoint="livez"`, livez)
		s.add(n, "localtraffic_kube_proxy_up", `endpoint="healthz"`, livez)
		s.add(n, "localtraffic_kube_proxy_last_sync_timestamp_seconds", "", "0+60x30")
		s.add(n, "localtraffic_kube_proxy_node_eligible", "", steady)
		s.add(n, "localtraffic_node_draining", "", "0x30")
		s.add(n, "localtraffic_rules_supported", "", steady)
		rulesOK := steady
		if n == a2 {
			rulesOK = "1 0x29"
		}
		s.add(n, "localtraffic_scrape_collector_success", `collector="rules"`, rulesOK)
		s.add(n, "localtraffic_scrape_collector_success", `collector="services"`, steady)
		s.add(n, "localtraffic_informer_synced", `resource="services"`, steady)
		s.add(n, "localtraffic_informer_last_success_timestamp_seconds", `resource="services"`, "0+60x30")

		// shop/solo (NodePort): endpoints on a only. Every other node blackholes; a is its single node.
		// shop/split (NodePort): endpoints on a and b, one per shard: no single node, yet each shard alone
		// sees one. shop/lb (LoadBalancer, health-checked): endpoints on b only; the other nodes' health check
		// answers 503 (out of rotation), and a2 keeps receiving and dropping connections. shop/spread: every
		// node has endpoints.
		for _, svc := range []struct {
			name  string
			local map[string]bool
			lb    bool
		}{
			{"solo", map[string]bool{a: true}, false},
			{"split", map[string]bool{a: true, b: true}, false},
			{"lb", map[string]bool{b: true}, true},
			{"spread", nil, false},
		} {
			local := svc.local == nil || svc.local[n]
			sel := fmt.Sprintf(`namespace="shop",service=%q`, svc.name)
			eps, blackhole, rotation := "2x30", "0x30", steady
			if !local {
				eps = "0x30"
				if svc.lb {
					rotation = "0x30"
				} else {
					blackhole = steady
				}
			}
			s.add(n, "localtraffic_local_endpoints", sel, eps)
			s.add(n, "localtraffic_blackhole", sel, blackhole)
			if blackhole == steady {
				// The exporter reports what each blackhole rests on: clients are being dropped.
				s.add(n, "localtraffic_blackhole_reason", sel+`,reason="traffic_lost"`, steady)
			}
			s.add(n, "localtraffic_in_rotation", sel, rotation)
			mismatch := "0x30"
			if n == b && svc.name == "spread" {
				mismatch = "0 1x29" // kube-proxy's rules disagree on b from 1m
			}
			s.add(n, "localtraffic_rules_mismatch", sel, mismatch)
			if svc.lb {
				s.add(n, "localtraffic_health_check_up", sel, map[bool]string{true: steady, false: "0x30"}[local])
				drops := "0x30"
				if n == a2 {
					drops = "0+10x30"
				}
				s.add(n, "localtraffic_rules_dropped_packets_total", sel+`,port="http",ip_family="IPv4"`, drops)
			}
		}
	}
	// The exporter on a3 goes away at 3m: its series stop (they go stale) and its target is down.
	for i, sr := range s.series {
		if sr.node == a3 {
			s.series[i].values = truncateValues(sr.values, 3)
		}
	}
	for _, n := range s.nodes {
		up := steady
		if n == a3 {
			up = "1 1 1 0x28"
		}
		s.series = append(s.series, shardSeries{node: n, labels: fmt.Sprintf(`up{instance=%q,job="localtraffic-exporter",node=%q}`, s.address[n], n), values: up})
	}
	// kube-state-metrics, scraped with the first node's targets (one shard), reports an exporter pod on every node
	// and on z1, whose pod no target covers: LocalTrafficExporterNotScraped, a cross-node alert, fires for z1 alone
	// (a3's target is down, not missing).
	for _, n := range append(slices.Clone(s.nodes), "z1") {
		s.series = append(s.series, shardSeries{node: s.nodes[0], values: steady,
			labels: fmt.Sprintf(`kube_pod_info{job="kube-state-metrics",namespace="localtraffic-system",pod="localtraffic-exporter-%s",node=%q,created_by_kind="DaemonSet",created_by_name="localtraffic-exporter"}`, n, n)})
	}
	return s, shard
}

// truncateValues keeps the first n samples of a promqltest series and marks the series stale after them, as
// Prometheus does when a target stops answering.
func truncateValues(values string, n int) string {
	var expanded []string
	for _, f := range strings.Fields(values) {
		expanded = append(expanded, expandValues(f)...)
	}
	return strings.Join(expanded[:n], " ") + " stale"
}

// expandValues expands one promqltest term ("a", "axn", "a+bxn") into its samples.
func expandValues(term string) []string {
	m := regexp.MustCompile(`^(-?[0-9.]+)(?:([+-][0-9.]+))?x([0-9]+)$`).FindStringSubmatch(term)
	if m == nil {
		return []string{term}
	}
	start, _ := strconv.ParseFloat(m[1], 64)
	step := 0.0
	if m[2] != "" {
		step, _ = strconv.ParseFloat(m[2], 64)
	}
	count, _ := strconv.Atoi(m[3])
	out := make([]string, 0, count+1)
	for i := 0; i <= count; i++ {
		out = append(out, strconv.FormatFloat(start+float64(i)*step, 'f', -1, 64))
	}
	return out
}

// ruleRun is one Prometheus (or ruler): its input series in promqltest's load notation and its rule files.
type ruleRun struct {
	name      string
	load      []string // "<selector> <values>" lines
	ruleFiles []string
}

// runResult is what a run produced: at each minute, the firing alerts ("<alertname>{labels}"), and every
// sample its recording rules wrote (for a global ruler to read).
type runResult struct {
	firing   map[int][]string
	recorded []string // "<selector> <values>" lines over minutes 0..shardMinutes
}

// evaluate evaluates the run's rule files every minute from 0 to shardMinutes with Prometheus' rule manager,
// as promtool test rules does: every group in file order, recording rules before the alerts that read them.
func evaluate(t *testing.T, run ruleRun) runResult {
	t.Helper()
	input := "load 1m\n  " + strings.Join(run.load, "\n  ") + "\n"
	p := promQL()
	suite, err := promqltest.NewLazyLoader(input, promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true, Parser: p})
	if err != nil {
		t.Fatalf("%s: load series: %v", run.name, err)
	}
	defer suite.Close()
	suite.SubqueryInterval = time.Minute
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
		Parser:       p,
	})
	loaded, errs := m.LoadGroups(time.Minute, labels.EmptyLabels(), "", nil, false, run.ruleFiles...)
	if len(errs) > 0 {
		t.Fatalf("%s: load rules: %v", run.name, errs)
	}
	var groups []*rules.Group
	for _, f := range run.ruleFiles {
		gs, err := ParseRulesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range gs {
			g := loaded[rules.GroupKey(f, name)]
			if g == nil {
				t.Fatalf("%s: group %s of %s not loaded", run.name, name, f)
			}
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true)
			}
		}
	}
	res := runResult{firing: map[int][]string{}}
	start := time.Unix(0, 0).UTC()
	for i := 0; i <= shardMinutes; i++ {
		ts := start.Add(time.Duration(i) * time.Minute)
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				t.Fatalf("%s: %v", run.name, err)
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						t.Fatalf("%s: rule %s at %dm: %v", run.name, r.Name(), i, r.LastError())
					}
				}
			}
		})
		for _, g := range groups {
			for _, ar := range g.AlertingRules() {
				for _, a := range ar.ActiveAlerts() {
					if a.State == rules.StateFiring {
						res.firing[i] = append(res.firing[i], a.Labels.String())
					}
				}
			}
		}
		sort.Strings(res.firing[i])
	}
	res.recorded = recordedSeries(t, suite, start)
	return res
}

// recordedSeries reads back every sample the recording rules wrote (metric names with a ':'), one value a
// minute, stale markers included, in promqltest's load notation.
func recordedSeries(t *testing.T, suite *promqltest.LazyLoader, start time.Time) []string {
	t.Helper()
	q, err := suite.Storage().Querier(start.UnixMilli(), start.Add(shardMinutes*time.Minute).UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+:.+"))
	var out []string
	for set.Next() {
		s := set.At()
		vals := make([]string, shardMinutes+1)
		for i := range vals {
			vals[i] = "_"
		}
		it := s.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			i := int((ts - start.UnixMilli()) / time.Minute.Milliseconds())
			switch {
			case value.IsStaleNaN(v):
				vals[i] = "stale"
			case math.IsNaN(v):
				vals[i] = "NaN"
			default:
				vals[i] = strconv.FormatFloat(v, 'g', -1, 64)
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		out = append(out, s.Labels().String()+" "+strings.Join(vals, " "))
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// withLabel adds name="value" to a load line's selector (a shard's external label).
func withLabel(line, name, value string) string {
	i := strings.Index(line, "}")
	return line[:i] + fmt.Sprintf(", %s=%q", name, value) + line[i:]
}

// mixinRuleFile renders a field of the mixin ({groups: [...]}) with _config overrides into a rule file (JSON
// is YAML).
func mixinRuleFile(t *testing.T, dir, field, overrides string) string {
	t.Helper()
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{filepath.Join(repoRoot(t), "mixin")}})
	out, err := vm.EvaluateAnonymousSnippet("field.jsonnet", "((import 'mixin.libsonnet') + "+overrides+")."+field)
	if err != nil {
		t.Fatalf("jsonnet %s: %v", field, err)
	}
	path := filepath.Join(dir, field+".json")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// alertNode is the node an alert names ("" for none).
func alertNode(alert string) string {
	m := regexp.MustCompile(`node="([^"]*)"`).FindStringSubmatch(alert)
	if m == nil {
		return ""
	}
	return m[1]
}

func isCrossNode(alert string) bool {
	return strings.Contains(alert, `alertname="LocalTrafficServiceSingleNode"`) ||
		strings.Contains(alert, `alertname="LocalTrafficServiceBlackhole"`) ||
		strings.Contains(alert, `alertname="LocalTrafficExporterNotScraped"`) ||
		strings.Contains(alert, `alertname="LocalTrafficServiceRolloutLoss"`) ||
		strings.Contains(alert, `alertname="LocalTrafficServiceRolloutLossCritical"`)
}

func TestShardedAlerts(t *testing.T) {
	relabels := documentedShardRelabel(t)
	scenario, shard := newShardScenario(t, relabels)
	root := repoRoot(t)
	dir := t.TempDir()
	rulesFile := filepath.Join(root, RuleFiles[0])
	var all []string
	perShard := make([][]string, shardCount)
	for _, s := range scenario.series {
		line := s.labels + " " + s.values
		all = append(all, line)
		perShard[shard[s.node]] = append(perShard[shard[s.node]], line)
	}

	unsharded := evaluate(t, ruleRun{name: "unsharded", load: all, ruleFiles: []string{rulesFile, filepath.Join(root, RuleFiles[1])}})
	shardAlerts := mixinRuleFile(t, dir, "prometheusAlerts", "{_config+:: {shardedPrometheus: true}}")
	globalAlerts := mixinRuleFile(t, dir, "prometheusGlobalAlerts", "{_config+:: {shardedPrometheus: true}}")
	crossOnShard := globalAlerts // what a shard would do if it loaded the global ruler's group too

	shards := make([]runResult, shardCount)
	wrongOnShard := make([]runResult, shardCount)
	var recorded []string
	for k := range shards {
		shards[k] = evaluate(t, ruleRun{name: fmt.Sprintf("shard %d", k), load: perShard[k], ruleFiles: []string{rulesFile, shardAlerts}})
		wrongOnShard[k] = evaluate(t, ruleRun{name: fmt.Sprintf("shard %d with the cross-node group", k), load: perShard[k], ruleFiles: []string{rulesFile, crossOnShard}})
		for _, line := range shards[k].recorded {
			recorded = append(recorded, withLabel(line, shardLabel, strconv.Itoa(k)))
		}
	}
	global := evaluate(t, ruleRun{name: "global ruler", load: recorded, ruleFiles: []string{globalAlerts}})

	for i := 0; i <= shardMinutes; i++ {
		var wantPerNode, wantCross []string
		for _, a := range unsharded.firing[i] {
			if isCrossNode(a) {
				wantCross = append(wantCross, a)
			} else {
				wantPerNode = append(wantPerNode, a)
			}
		}
		// Per-node alerts: the union of the shards' is the unsharded set, each alert on its node's shard.
		var gotPerNode []string
		for k, r := range shards {
			for _, a := range r.firing[i] {
				if isCrossNode(a) {
					t.Errorf("%dm: shard %d evaluated the cross-node alert: %s", i, k, a)
					continue
				}
				if n := alertNode(a); n != "" && shard[n] != k {
					t.Errorf("%dm: shard %d fired %s for a node of shard %d", i, k, a, shard[n])
				}
				gotPerNode = append(gotPerNode, a)
			}
		}
		sort.Strings(gotPerNode)
		if strings.Join(gotPerNode, "\n") != strings.Join(wantPerNode, "\n") {
			t.Errorf("%dm: per-node alerts on the shards\n%s\nunsharded\n%s", i, strings.Join(gotPerNode, "\n"), strings.Join(wantPerNode, "\n"))
		}
		// The cross-node alert: the global ruler over the shards' recordings fires exactly the unsharded set.
		if got := global.firing[i]; strings.Join(got, "\n") != strings.Join(wantCross, "\n") {
			t.Errorf("%dm: cross-node alerts on the global ruler\n%s\nunsharded\n%s", i, strings.Join(got, "\n"), strings.Join(wantCross, "\n"))
		}
	}

	// The scenario exercises what it claims at the end: per-node alerts of both shards, and the cross-node
	// alert for the single-node Services only (not shop/split, whose endpoints sit on one node per shard).
	end := unsharded.firing[shardMinutes]
	count := func(list []string, substr ...string) int {
		n := 0
		for _, a := range list {
			ok := true
			for _, s := range substr {
				ok = ok && strings.Contains(a, s)
			}
			if ok {
				n++
			}
		}
		return n
	}
	for _, want := range []struct {
		what  string
		match []string
		n     int
	}{
		// shop/solo and shop/split blackhole on the nodes without endpoints (a3's exporter is gone: no series).
		{"blackholes of shop/solo", []string{`LocalTrafficBlackhole`, `service="solo"`}, 8},
		{"blackholes of shop/split", []string{`LocalTrafficBlackhole`, `service="split"`}, 7},
		{"single-node shop/solo", []string{`LocalTrafficServiceSingleNode`, `service="solo"`}, 1},
		{"single-node shop/lb", []string{`LocalTrafficServiceSingleNode`, `service="lb"`}, 1},
		{"single-node shop/split", []string{`LocalTrafficServiceSingleNode`, `service="split"`}, 0},
		// One per-Service page for each blackholing Service, however many nodes and shards drop it.
		{"per-Service blackhole of shop/solo", []string{`LocalTrafficServiceBlackhole`, `service="solo"`}, 1},
		{"per-Service blackhole of shop/split", []string{`LocalTrafficServiceBlackhole`, `service="split"`}, 1},
		{"out-of-rotation drops", []string{`LocalTrafficOutOfRotationNodeDropsTraffic`}, 1},
		{"kube-proxy unhealthy", []string{`LocalTrafficKubeProxyUnhealthy`}, 1},
		{"rules mismatch", []string{`LocalTrafficRulesMismatch`}, 1},
		{"exporter down", []string{`LocalTrafficExporterDown`}, 1},
		{"collector failing", []string{`LocalTrafficCollectorFailing`}, 1},
		{"exporter not scraped", []string{`LocalTrafficExporterNotScraped`, `node="z1"`}, 1},
		{"exporters not scraped", []string{`LocalTrafficExporterNotScraped`}, 1},
	} {
		if got := count(end, want.match...); got != want.n {
			t.Errorf("unsharded at %dm: %d alerts for %s, want %d", shardMinutes, got, want.what, want.n)
		}
	}
	for k, r := range shards {
		if len(r.firing[shardMinutes]) == 0 {
			t.Errorf("shard %d fired nothing", k)
		}
	}
	// Evaluated on a shard, the cross-node alert is wrong: each shard sees one node with shop/split's endpoints
	// and warns, although the Service has two.
	for k, r := range wrongOnShard {
		if n := count(r.firing[shardMinutes], `LocalTrafficServiceSingleNode`, `service="split"`); n != 1 {
			t.Errorf("shard %d with the cross-node group: %d false single-node alerts for shop/split, want the 1 this test expects (is the scenario still split across shards?)", k, n)
		}
	}
	// So is the coverage alert: the shard that scrapes kube-state-metrics takes every node of the other shard for
	// unscraped.
	ksm := shard[scenario.nodes[0]]
	if n := count(wrongOnShard[ksm].firing[shardMinutes], `LocalTrafficExporterNotScraped`); n <= 1 {
		t.Errorf("shard %d with the cross-node group: %d coverage alerts, want the other shard's nodes too", ksm, n)
	}
	t.Logf("%d series on %d nodes: shard 0 scrapes %d, shard 1 %d; %d alerts firing at %dm unsharded, %d recorded series sent to the global ruler",
		len(all), len(scenario.nodes), len(perShard[0]), len(perShard[1]), len(end), shardMinutes, len(recorded))
}
