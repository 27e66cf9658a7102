package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// The plugin's --prometheus mode, held to the exporters in every scenario: one real Prometheus beside the shared
// cluster (started by the first verdict assertion that needs it, in the client namespace, scraping every node's
// exporter every agreeScrapeInterval; its file_sd targets follow the exporters as the harness starts and stops
// them), and, each time expectMetrics has seen a node's verdict for a Service, `kubectl localtraffic status -n NS
// SVC -o json --prometheus` must show that node with the reason (or no_blackhole) its exporter gave, within
// agreeWithin. The exporter's own page is the truth; the check is that the plugin reads it faithfully through a
// real Prometheus. LT_E2E_PROM_AGREE=0 turns the check off (to measure what it costs). TestMain logs, at the end,
// how many assertions of which scenarios were cross-checked and which scenarios opted out, and why.

const (
	// agreeScrapeInterval is the shared Prometheus' scrape interval: short, so a verdict the harness just saw is
	// in Prometheus within about a second.
	agreeScrapeInterval = time.Second
	// agreeWithin is how long the plugin gets to show a verdict: a few scrape intervals, each plugin run
	// included, on a loaded two-core machine.
	agreeWithin = 15 * time.Second
	// agreePromAddr is where the shared Prometheus listens in the client namespace: not promAddr, which the
	// alert scenarios' own Prometheus takes.
	agreePromAddr = "127.0.0.1:9190"
	// agreeEnv turns the check off with "0".
	agreeEnv = "LT_E2E_PROM_AGREE"
)

// The verdict series: an assertion that looked at one of them, for a Service on the scraped node, has seen that
// node's verdict for the Service.
var verdictSeries = []string{"localtraffic_blackhole", "localtraffic_blackhole_reason"}

// testKey carries the running test in its context (testContext): the assertion helpers take a context, not a
// *testing.T, and the check needs to know which scenario it checks.
type testKey struct{}

func testOf(ctx context.Context) testing.TB {
	t, _ := ctx.Value(testKey{}).(testing.TB)
	return t
}

// promAgreeOptOut opts the whole scenario out of the check; why says what Prometheus cannot see in it (a verdict
// that flips faster than a scrape, say). e2e/README.md lists every scenario that calls it
// (TestReadmeListsPromAgreeOptOuts). What Prometheus cannot see for want of a scrape (an exporter a scenario
// stopped: expectMetrics cannot scrape it either) or of a target (another cluster, an extra exporter) needs no
// opt-out: agreeThroughPrometheus lets it be and counts it.
func promAgreeOptOut(t testing.TB, why string) {
	t.Helper()
	a := &sharedState.agree
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.optedOut == nil {
		a.optedOut = map[string]string{}
	}
	a.optedOut[scenarioOf(t)] = why
}

// scenarioOf is the top-level test's name: subtests are counted with their scenario.
func scenarioOf(t testing.TB) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return name
}

// agreeTally counts, over the test binary's run, what the check did; TestMain logs it (report).
type agreeTally struct {
	mu sync.Mutex
	// checked: scenario → assertions cross-checked; spent: the time they took, all told.
	checked map[string]int
	spent   time.Duration
	// optedOut: scenario → why (promAgreeOptOut); skipped: scenario → why → assertions not cross-checked.
	optedOut map[string]string
	skipped  map[string]map[string]int
	disabled int // assertions not cross-checked because of LT_E2E_PROM_AGREE=0
	// agreed: the reason last cross-checked per scenario, node and Service; repeated: assertions that saw that
	// same reason again (a wait loop's polls, a hold sampled every second), not run through the plugin again.
	agreed   map[agreedKey]string
	repeated int
	// shared: the scenarios that used the shared cluster (sharedCluster), to name those with no verdict
	// assertion cross-checked (they read the exporters without expectMetrics, or assert no verdict).
	shared map[string]bool
}

// agreedKey is one Service's verdict on one node in one scenario.
type agreedKey struct {
	scenario, node string
	svc            nsName
}

// unchanged drops from want the verdicts already cross-checked with the same reason (counted as repeated): what
// Prometheus showed for them has not changed since, as far as the exporter says.
func (a *agreeTally) unchanged(scenario, node string, want map[nsName]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s, r := range want {
		if last, ok := a.agreed[agreedKey{scenario, node, s}]; ok && last == r {
			delete(want, s)
			a.repeated++
		}
	}
}

// agree notes the verdicts the plugin showed as the exporter did.
func (a *agreeTally) agree(scenario, node string, want map[nsName]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.agreed == nil {
		a.agreed = map[agreedKey]string{}
	}
	for s, r := range want {
		a.agreed[agreedKey{scenario, node, s}] = r
	}
}

// ran notes a scenario that uses the shared cluster.
func (a *agreeTally) ran(scenario string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shared == nil {
		a.shared = map[string]bool{}
	}
	a.shared[scenario] = true
}

// optedOutWhy is why the scenario opted out ("" when it did not).
func (a *agreeTally) optedOutWhy(scenario string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.optedOut[scenario]
}

func (a *agreeTally) skip(scenario, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.skipped == nil {
		a.skipped = map[string]map[string]int{}
	}
	if a.skipped[scenario] == nil {
		a.skipped[scenario] = map[string]int{}
	}
	a.skipped[scenario][why]++
}

func (a *agreeTally) add(scenario string, took time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.checked == nil {
		a.checked = map[string]int{}
	}
	a.checked[scenario]++
	a.spent += took
}

func (a *agreeTally) off() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.disabled++
}

// report writes the tally: how many assertions of how many scenarios were cross-checked, and what was not and why;
// started is how long the Prometheus took to start (zero when it was not).
func (a *agreeTally) report(w io.Writer, started time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.checked) == 0 && len(a.optedOut) == 0 && len(a.skipped) == 0 && a.disabled == 0 && len(a.shared) == 0 {
		return
	}
	total := 0
	var per []string
	for s, n := range a.checked {
		total += n
		per = append(per, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(per)
	if total > 0 {
		fmt.Fprintf(w, "e2e: status --prometheus cross-checked %d verdict assertions in %d scenarios (%s in the checks, %s to start Prometheus): %s\n",
			total, len(a.checked), a.spent.Round(100*time.Millisecond), started.Round(100*time.Millisecond), strings.Join(per, ", "))
	}
	if a.repeated > 0 {
		fmt.Fprintf(w, "e2e: %d more verdict assertions repeated a reason already cross-checked for their scenario, node and Service\n", a.repeated)
	}
	if a.disabled > 0 {
		fmt.Fprintf(w, "e2e: status --prometheus not cross-checked: %d assertions (%s=0)\n", a.disabled, agreeEnv)
	}
	var outs []string
	for s, why := range a.optedOut {
		outs = append(outs, fmt.Sprintf("%s (%s)", s, why))
	}
	sort.Strings(outs)
	if len(outs) > 0 {
		fmt.Fprintf(w, "e2e: scenarios opted out of the status --prometheus check: %s\n", strings.Join(outs, "; "))
	}
	var skips []string
	for s, whys := range a.skipped {
		for why, n := range whys {
			skips = append(skips, fmt.Sprintf("%s %d (%s)", s, n, why))
		}
	}
	sort.Strings(skips)
	if len(skips) > 0 {
		fmt.Fprintf(w, "e2e: verdict assertions not cross-checked: %s\n", strings.Join(skips, "; "))
	}
	var none []string
	for s := range a.shared {
		if a.checked[s] == 0 && a.optedOut[s] == "" && len(a.skipped[s]) == 0 {
			none = append(none, s)
		}
	}
	sort.Strings(none)
	if len(none) > 0 && a.disabled == 0 {
		fmt.Fprintf(w, "e2e: shared-cluster scenarios with no verdict assertion through expectMetrics (nothing cross-checked): %s\n", strings.Join(none, ", "))
	}
}

// sharedProm is the shared cluster's Prometheus for the check, and the plugin it runs; started once (start).
type sharedProm struct {
	once sync.Once
	err  error

	c       *cluster.Cluster
	dir     string
	targets string // the file_sd file
	plugin  string // the built kubectl-localtraffic
	proc    *cluster.Process
	// took is how long start took (tools installed, plugin built, Prometheus ready): once per test binary.
	took time.Duration

	mu sync.Mutex // serialises writes of the targets file
}

// agreeThroughPrometheus is expectMetrics' check, once its own checks passed on m, node's scrape: for every
// Service whose verdict on node those checks looked at, the plugin must show, through the shared Prometheus, the
// reason m gives. Assertions on another cluster, without a test in ctx, or opted out are counted and let be.
func agreeThroughPrometheus(ctx context.Context, c *cluster.Cluster, node string, m cluster.Metrics) error {
	svcs := verdictServices(m, node)
	if len(svcs) == 0 {
		return nil
	}
	tally := &sharedState.agree
	t := testOf(ctx)
	if t == nil {
		// A cleanup's or goroutine's context.Background: no scenario to count it for, and nothing is waiting on
		// it. Every scenario's own assertions carry testContext's.
		return nil
	}
	scenario := scenarioOf(t)
	switch {
	case os.Getenv(agreeEnv) == "0":
		tally.off()
		return nil
	case c != sharedClusterIfUp():
		// Prometheus scrapes the shared cluster's exporters only.
		tally.skip(scenario, "not the shared cluster")
		return nil
	case tally.optedOutWhy(scenario) != "":
		tally.skip(scenario, "opted out")
		return nil
	}
	if err := m.Expect("localtraffic_scrape_collector_success", cluster.Labels{"node": node, "collector": "services"}, 1); err != nil {
		// The plugin (rightly) shows no report from a node whose services collector fails: nothing to compare.
		tally.skip(scenario, "services collector failing")
		return nil
	}
	want := map[nsName]string{}
	for _, s := range svcs {
		want[s] = exporterReason(m, node, s)
	}
	// A verdict cross-checked before with the same reason is not run through the plugin again: a wait loop
	// polls the same verdict many times, and a scenario that samples a held verdict every second would spend
	// most of its time in the plugin.
	if tally.unchanged(scenario, node, want); len(want) == 0 {
		return nil
	}
	p, err := sharedPrometheus(c)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := p.agree(ctx, node, want); err != nil {
		return err
	}
	tally.agree(scenario, node, want)
	tally.add(scenario, time.Since(start))
	return nil
}

// nsName is a Service's namespace and name.
type nsName struct{ ns, name string }

func (s nsName) String() string { return s.ns + "/" + s.name }

// verdictServices is the Services whose verdict on node the checks run on m looked at (m.Lookups) and m has.
func verdictServices(m cluster.Metrics, node string) []nsName {
	var out []nsName
	for _, l := range m.Lookups() {
		if !slices.Contains(verdictSeries, l.Name) || l.Labels["namespace"] == "" || l.Labels["service"] == "" {
			continue
		}
		if n, ok := l.Labels["node"]; ok && n != node {
			continue
		}
		s := nsName{l.Labels["namespace"], l.Labels["service"]}
		// An absent verdict (a Cluster-policy Service, an excluded one, one not synced yet) is no verdict: the
		// plugin has none to show either.
		if len(m.Series("localtraffic_blackhole", cluster.Labels{"node": node, "namespace": s.ns, "service": s.name})) == 0 {
			continue
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// exporterReason is the reason the exporter's page m gives for the Service on node: its
// localtraffic_blackhole_reason series at 1, no_blackhole without one.
func exporterReason(m cluster.Metrics, node string, s nsName) string {
	for _, series := range m.Series("localtraffic_blackhole_reason", cluster.Labels{"node": node, "namespace": s.ns, "service": s.name}) {
		if series.GetGauge().GetValue() != 1 {
			continue
		}
		for _, l := range series.GetLabel() {
			if l.GetName() == "reason" {
				return l.GetValue()
			}
		}
	}
	return "no_blackhole"
}

// sharedClusterIfUp is the shared cluster, nil before a test started it.
func sharedClusterIfUp() *cluster.Cluster {
	sharedState.mu.Lock()
	defer sharedState.mu.Unlock()
	return sharedState.c
}

// sharedPrometheus starts the check's Prometheus beside c (the shared cluster) on first use; a failed start fails
// every later check with the same error.
func sharedPrometheus(c *cluster.Cluster) (*sharedProm, error) {
	p := &sharedState.prom
	p.once.Do(func() {
		// The Prometheus outlives the test that starts it: not that test's context.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		start := time.Now()
		p.err = p.start(ctx, c)
		p.took = time.Since(start)
		if p.err != nil {
			p.err = fmt.Errorf("the status --prometheus check's Prometheus (%s=0 turns the check off): %w", agreeEnv, p.err)
		}
	})
	return p, p.err
}

func (p *sharedProm) start(ctx context.Context, c *cluster.Cluster) error {
	mod, err := cluster.ModuleDir()
	if err != nil {
		return err
	}
	repo := filepath.Dir(mod)
	tools, err := installMonitoringTools(ctx, repo)
	if err != nil {
		return err
	}
	p.c = c
	if p.dir, err = os.MkdirTemp(c.WorkDir, "prom-agree-"); err != nil {
		return err
	}
	p.targets = filepath.Join(p.dir, "targets.json")
	if err := p.writeTargets(); err != nil {
		return err
	}
	// From now on every start and stop of an exporter rewrites the targets; Prometheus' file_sd watches the file.
	c.WatchExporters(func() {
		if err := p.writeTargets(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: status --prometheus check: %v\n", err)
		}
	})
	cfg, err := json.MarshalIndent(map[string]any{
		"global": map[string]any{"scrape_interval": agreeScrapeInterval.String(), "scrape_timeout": agreeScrapeInterval.String()},
		"scrape_configs": []any{map[string]any{
			"job_name":        "localtraffic-exporter",
			"file_sd_configs": []any{map[string]any{"files": []string{p.targets}}},
		}},
	}, "", "  ")
	if err != nil {
		return err
	}
	cfgFile := filepath.Join(p.dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, cfg, 0o644); err != nil {
		return err
	}
	p.proc, err = cluster.StartProcess(cluster.ProcessSpec{Name: "prometheus-agree", LogDir: p.dir, NS: c.ClientNS, Bin: tools.Prometheus, Args: []string{
		"--config.file=" + cfgFile, "--storage.tsdb.path=" + filepath.Join(p.dir, "data"), "--storage.tsdb.retention.time=2h",
		"--web.listen-address=" + agreePromAddr, "--log.level=warn"}})
	if err != nil {
		return err
	}
	// The plugin builds while Prometheus starts.
	p.plugin = filepath.Join(p.dir, "kubectl-localtraffic")
	build := exec.CommandContext(ctx, "go", "build", "-o", p.plugin, "./cmd/kubectl-localtraffic")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build kubectl-localtraffic: %w\n%s", err, out)
	}
	client := nsHTTPClient(c.ClientNS)
	return p.proc.Await(ctx, 2*time.Minute, 250*time.Millisecond, func() error {
		resp, err := client.Get("http://" + agreePromAddr + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("prometheus /-/ready: %s", resp.Status)
		}
		return nil
	})
}

// stop stops the Prometheus, if it was started.
func (p *sharedProm) stop() {
	if p.proc != nil {
		p.proc.Stop(10 * time.Second)
	}
}

// writeTargets writes the file_sd file: every node whose usual exporter runs, at the address the harness scrapes
// it on. Written whole and renamed into place, so Prometheus never reads half a file.
func (p *sharedProm) writeTargets() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var targets []string
	for _, n := range p.c.Nodes() {
		if n.ExporterRunning() {
			targets = append(targets, cluster.HostPort(n.IP, cluster.ExporterPort))
		}
	}
	b, err := json.Marshal([]map[string]any{{"targets": targets, "labels": map[string]string{}}})
	if err != nil {
		return err
	}
	tmp := p.targets + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write the file_sd targets: %w", err)
	}
	if err := os.Rename(tmp, p.targets); err != nil {
		return fmt.Errorf("write the file_sd targets: %w", err)
	}
	return nil
}

// agree runs the plugin for each Service of want until it shows node with want's reason through the shared
// Prometheus, for agreeWithin; the last disagreement otherwise.
func (p *sharedProm) agree(ctx context.Context, node string, want map[nsName]string) error {
	deadline := time.Now().Add(agreeWithin)
	pending := make(map[nsName]string, len(want))
	for s, r := range want {
		pending[s] = r
	}
	for {
		var errs []error
		for s, reason := range pending {
			got, err := p.observed(ctx, s, node)
			switch {
			case err != nil:
				errs = append(errs, err)
			case got != reason && !p.movedOn(ctx, node, s, got):
				errs = append(errs, fmt.Errorf("status -n %s %s --prometheus shows %s %q, its exporter %q", s.ns, s.name, node, got, reason))
			default:
				delete(pending, s)
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the plugin through Prometheus within %s: %w", agreeWithin, errors.Join(errs...))
		}
		// A scrape lands every agreeScrapeInterval: look again in a quarter of one.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(agreeScrapeInterval / 4):
		}
	}
}

// movedOn reports whether node's exporter, scraped now, gives s the reason got the plugin showed: the verdict
// moved on (a grace window ran out, a hold ended) while the check waited for Prometheus, and the plugin reads the
// exporter's newer page faithfully. A scrape that fails proves nothing.
func (p *sharedProm) movedOn(ctx context.Context, node string, s nsName, got string) bool {
	m, err := p.c.Metrics(ctx, node)
	if err != nil || len(m.Series("localtraffic_blackhole", cluster.Labels{"node": node, "namespace": s.ns, "service": s.name})) == 0 {
		return false
	}
	return exporterReason(m, node, s) == got
}

// observed runs `status -n NS SVC -o json --prometheus` in the client namespace and returns what it shows node
// observed ("" for no report from node). Its exit status is the Service's (1 for a blackhole) and stderr may
// name other nodes without a report (an exporter a scenario stopped): neither concerns node.
func (p *sharedProm) observed(ctx context.Context, s nsName, node string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{"status", "-n", s.ns, s.name, "-o", "json", "--prometheus", "http://" + agreePromAddr,
		"--prometheus-timeout=10s", "--kubeconfig", p.c.AdminKubeconfigInNamespaces()}
	cmd := netns.Command(ctx, p.c.ClientNS, p.plugin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	runErr := cmd.Run()
	var ee *exec.ExitError
	if runErr != nil && !errors.As(runErr, &ee) {
		return "", fmt.Errorf("kubectl-localtraffic %s: %w", strings.Join(args, " "), runErr)
	}
	var st observedStatus
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || len(st.Items) != 1 {
		return "", fmt.Errorf("status -n %s %s --prometheus: %v, %v: %s%s", s.ns, s.name, runErr, err, out.String(), errOut.String())
	}
	for _, n := range st.Items[0].NodeStatuses {
		if n.Node == node {
			return n.Observed, nil
		}
	}
	return "", nil
}
