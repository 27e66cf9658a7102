package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// This file runs a real Prometheus and a real Alertmanager next to a harness cluster, in the cluster's outside
// client namespace: from there they reach the nodes' addresses (kube-rbac-proxy listens on <node IP>:<port> in
// front of each exporter, as in the hostNetwork DaemonSet) and the apiserver (service discovery), like a monitoring server outside the
// cluster would. Both listen on 127.0.0.1 inside that namespace only.

// monitoringTools are Prometheus (scripts/install-deps.sh prometheus) and Debian's Alertmanager
// (scripts/install-deps.sh packages).
type monitoringTools struct {
	Prometheus, Alertmanager string
}

// installMonitoringTools runs scripts/install-deps.sh prometheus (idempotent; the first run builds Prometheus
// from the Go module proxy, a few minutes) and returns the binaries. $LT_TOOLS_BIN moves the cache like the
// script does.
func installMonitoringTools(ctx context.Context, repo string) (monitoringTools, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "scripts", "install-deps.sh"), "prometheus")
	if out, err := cmd.CombinedOutput(); err != nil {
		return monitoringTools{}, fmt.Errorf("scripts/install-deps.sh prometheus: %w\n%s", err, out)
	}
	bin := os.Getenv("LT_TOOLS_BIN")
	if bin == "" {
		bin = filepath.Join(repo, ".tools", "bin")
	}
	am, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		return monitoringTools{}, fmt.Errorf("alertmanager (scripts/install-deps.sh packages installs it): %w", err)
	}
	return monitoringTools{Prometheus: filepath.Join(bin, "prometheus"), Alertmanager: am}, nil
}

// prometheusConfig builds a Prometheus configuration from the shipped scrape configuration (alerts/
// prometheus-scrape.yaml) and rule files. The only changes to the shipped job are where the apiserver is:
// kubeconfig_file on each kubernetes_sd_configs entry (in a cluster Prometheus uses its in-cluster config), and
// where Prometheus' ServiceAccount token is: tokenFile as the authorization's credentials_file (in a cluster, the
// projected token's path the shipped job names). The result is JSON, which Prometheus reads as YAML.
func prometheusConfig(scrapeYAML []byte, kubeconfig, tokenFile string, ruleFiles []string, alertmanager string, evalInterval time.Duration) ([]byte, error) {
	js, err := utilyaml.ToJSON(scrapeYAML)
	if err != nil {
		return nil, fmt.Errorf("shipped scrape configuration: %w", err)
	}
	var scrape struct {
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	if err := json.Unmarshal(js, &scrape); err != nil {
		return nil, fmt.Errorf("shipped scrape configuration: %w", err)
	}
	if len(scrape.ScrapeConfigs) == 0 {
		return nil, fmt.Errorf("shipped scrape configuration has no scrape_configs")
	}
	for _, job := range scrape.ScrapeConfigs {
		sds, _ := job["kubernetes_sd_configs"].([]any)
		if len(sds) == 0 {
			return nil, fmt.Errorf("job %v: no kubernetes_sd_configs", job["job_name"])
		}
		for _, sd := range sds {
			m, ok := sd.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("job %v: malformed kubernetes_sd_configs", job["job_name"])
			}
			m["kubeconfig_file"] = kubeconfig
		}
		if auth, ok := job["authorization"].(map[string]any); ok && auth["credentials_file"] != nil {
			auth["credentials_file"] = tokenFile
		}
	}
	cfg := map[string]any{
		"global": map[string]any{
			// Rules are evaluated every few seconds so that an alert fires close to its for: after the
			// condition starts; scrape intervals stay as shipped.
			"evaluation_interval": evalInterval.String(),
		},
		"rule_files": ruleFiles,
		"alerting": map[string]any{
			"alertmanagers": []any{map[string]any{"static_configs": []any{map[string]any{"targets": []string{alertmanager}}}}},
		},
		"scrape_configs": scrape.ScrapeConfigs,
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// alertmanagerConfig routes critical alerts to the pager webhook and everything else to the ticket webhook,
// one notification group per alert and node and Service (a page per blackholed node), with waits short enough
// for a test.
func alertmanagerConfig(pagerURL, ticketURL string) []byte {
	cfg := map[string]any{
		"route": map[string]any{
			"receiver":        "tickets",
			"group_by":        []string{"alertname", "node", "namespace", "service"},
			"group_wait":      "1s",
			"group_interval":  "1s",
			"repeat_interval": "1h",
			"routes": []any{map[string]any{
				"receiver": "pager",
				"matchers": []string{`severity="critical"`},
			}},
		},
		"receivers": []any{
			map[string]any{"name": "pager", "webhook_configs": []any{map[string]any{"url": pagerURL, "send_resolved": true}}},
			map[string]any{"name": "tickets", "webhook_configs": []any{map[string]any{"url": ticketURL, "send_resolved": true}}},
		},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// testAlertmanagerConfig is alertmanagerConfig with the pager and ticket webhooks under hookURL.
func testAlertmanagerConfig(hookURL string) ([]byte, error) {
	return alertmanagerConfig(hookURL+"/pager", hookURL+"/tickets"), nil
}

// shippedAlertmanagerConfig is the repository's alerts/alertmanager.yaml as shipped (route, grouping, waits,
// inhibit rule), with each placeholder receiver given a webhook at hookURL/<receiver name>: the notifications a
// user's receivers would get.
func shippedAlertmanagerConfig(repo string) func(hookURL string) ([]byte, error) {
	return func(hookURL string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(repo, "alerts", "alertmanager.yaml"))
		if err != nil {
			return nil, err
		}
		js, err := utilyaml.ToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("alerts/alertmanager.yaml: %w", err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(js, &cfg); err != nil {
			return nil, fmt.Errorf("alerts/alertmanager.yaml: %w", err)
		}
		receivers, _ := cfg["receivers"].([]any)
		if len(receivers) == 0 {
			return nil, fmt.Errorf("alerts/alertmanager.yaml: no receivers")
		}
		for _, r := range receivers {
			m, ok := r.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("alerts/alertmanager.yaml: malformed receiver %v", r)
			}
			m["webhook_configs"] = []any{map[string]any{"url": hookURL + "/" + fmt.Sprint(m["name"]), "send_resolved": true}}
		}
		return json.MarshalIndent(cfg, "", "  ")
	}
}

// nsHTTPClient talks to servers inside a network namespace.
func nsHTTPClient(ns string) *http.Client {
	return &http.Client{
		Transport: &http.Transport{DialContext: netns.Dialer{NS: ns}.DialContext, DisableKeepAlives: true},
		Timeout:   30 * time.Second,
	}
}

// promAPI queries Prometheus' HTTP API with client_golang's API client; results come back as the small types
// below, which the tests compare.
type promAPI struct {
	api promv1.API
}

// newPromAPI is a client of the Prometheus at base (http://host:port), through client (a namespace's dialer).
func newPromAPI(base string, client *http.Client) (promAPI, error) {
	c, err := promapi.NewClient(promapi.Config{Address: base, Client: client})
	if err != nil {
		return promAPI{}, fmt.Errorf("prometheus client for %s: %w", base, err)
	}
	return promAPI{api: promv1.NewAPI(c)}, nil
}

// promSample is one series of an instant or range query result: Value is [time, "value"] as the API writes it,
// Values one such pair per step.
type promSample struct {
	Metric map[string]string
	Value  []any
	Values [][]any
}

func labelMap(m model.Metric) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[string(k)] = string(v)
	}
	return out
}

func pair(t model.Time, v model.SampleValue) []any {
	return []any{float64(t) / 1000, v.String()}
}

// query runs an instant query; warnings are returned as an error (a dashboard query must run cleanly).
func (p promAPI) query(ctx context.Context, q string) ([]promSample, error) {
	v, warnings, _, err := p.api.Query(ctx, q, time.Now()) // infos (PromQL hints) do not fail a query
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", q, err)
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("query %q: warnings %v", q, warnings)
	}
	switch r := v.(type) {
	case *model.Scalar:
		return []promSample{{Value: []any{0, "scalar"}}}, nil
	case model.Vector:
		out := make([]promSample, 0, len(r))
		for _, s := range r {
			out = append(out, promSample{Metric: labelMap(s.Metric), Value: pair(s.Timestamp, s.Value)})
		}
		return out, nil
	}
	return nil, fmt.Errorf("query %q: result of type %s", q, v.Type())
}

// queryRange runs a range query as a Grafana time series panel would.
func (p promAPI) queryRange(ctx context.Context, q string, start, end time.Time, step time.Duration) ([]promSample, error) {
	v, warnings, _, err := p.api.QueryRange(ctx, q, promv1.Range{Start: start, End: end, Step: step})
	if err != nil {
		return nil, fmt.Errorf("query_range %q: %w", q, err)
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("query_range %q: warnings %v", q, warnings)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("query_range %q: result of type %s", q, v.Type())
	}
	out := make([]promSample, 0, len(m))
	for _, s := range m {
		ps := promSample{Metric: labelMap(s.Metric)}
		for _, v := range s.Values {
			ps.Values = append(ps.Values, pair(v.Timestamp, v.Value))
		}
		out = append(out, ps)
	}
	return out, nil
}

// promAlert is an entry of /api/v1/alerts.
type promAlert struct {
	Labels      map[string]string
	Annotations map[string]string
	State       string
	ActiveAt    time.Time // when the condition started to hold (pending)
}

func (p promAPI) alerts(ctx context.Context) ([]promAlert, error) {
	r, err := p.api.Alerts(ctx)
	if err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	out := make([]promAlert, 0, len(r.Alerts))
	for _, a := range r.Alerts {
		out = append(out, promAlert{Labels: labelMap(model.Metric(a.Labels)), Annotations: labelMap(model.Metric(a.Annotations)),
			State: string(a.State), ActiveAt: a.ActiveAt})
	}
	return out, nil
}

// unhealthyRules returns "<group>/<rule>: <health> <lastError>" for every rule that is not healthy, and how
// many rules there are.
func (p promAPI) unhealthyRules(ctx context.Context) (bad []string, total int, err error) {
	r, err := p.api.Rules(ctx, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("rules: %w", err)
	}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			var name, lastError string
			var health promv1.RuleHealth
			switch r := rule.(type) {
			case promv1.AlertingRule:
				name, health, lastError = r.Name, r.Health, r.LastError
			case promv1.RecordingRule:
				name, health, lastError = r.Name, r.Health, r.LastError
			default:
				return nil, 0, fmt.Errorf("rules: group %s: a rule of type %T", g.Name, rule)
			}
			total++
			if health != promv1.RuleHealthGood {
				bad = append(bad, fmt.Sprintf("%s/%s: %s %s", g.Name, name, health, lastError))
			}
		}
	}
	return bad, total, nil
}

// promTarget is an active target of /api/v1/targets.
type promTarget struct {
	Labels    map[string]string
	Health    string
	LastError string
	ScrapeURL string
}

func (p promAPI) targets(ctx context.Context) ([]promTarget, error) {
	r, err := p.api.Targets(ctx)
	if err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	out := make([]promTarget, 0, len(r.Active))
	for _, t := range r.Active {
		out = append(out, promTarget{Labels: labelMap(model.Metric(t.Labels)), Health: string(t.Health), LastError: t.LastError, ScrapeURL: t.ScrapeURL})
	}
	return out, nil
}

// notification is one webhook call of Alertmanager (its webhook payload, version 4).
type notification struct {
	received time.Time
	Receiver string `json:"receiver"`
	Status   string `json:"status"`
	Alerts   []struct {
		Status      string            `json:"status"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"alerts"`
}

// webhookReceiver records Alertmanager's notifications, per receiver path.
type webhookReceiver struct {
	URL      string // http://127.0.0.1:<port>, reachable inside the namespace
	listener net.Listener
	server   *http.Server

	mu    sync.Mutex
	calls []notification
}

func startWebhookReceiver(ns string) (*webhookReceiver, error) {
	l, err := netns.Listen(ns, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &webhookReceiver{URL: "http://" + l.Addr().String(), listener: l}
	w.server = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var n notification
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&n); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		n.received = time.Now()
		w.mu.Lock()
		w.calls = append(w.calls, n)
		w.mu.Unlock()
	})}
	go func() { _ = w.server.Serve(l) }()
	return w, nil
}

func (w *webhookReceiver) close() { _ = w.server.Close() }

// alertKey identifies an alert instance by name, node, namespace and Service.
type alertKey struct{ Alertname, Node, Namespace, Service string }

func (k alertKey) String() string {
	return fmt.Sprintf("%s{node=%q,namespace=%q,service=%q}", k.Alertname, k.Node, k.Namespace, k.Service)
}

func keyOf(labels map[string]string) alertKey {
	return alertKey{labels["alertname"], labels["node"], labels["namespace"], labels["service"]}
}

// delivery is what a receiver was told about one alert instance.
type delivery struct {
	FirstFiring time.Time         // when the first firing notification arrived
	Labels      map[string]string // of the last firing notification
	Annotations map[string]string // of the last firing notification
	Resolved    bool              // a resolved notification arrived after the first firing one
}

// delivered returns, for receiver, every alert instance Alertmanager has notified as firing.
func (w *webhookReceiver) delivered(receiver string) map[alertKey]*delivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[alertKey]*delivery{}
	for _, n := range w.calls {
		if n.Receiver != receiver {
			continue
		}
		for _, a := range n.Alerts {
			k := keyOf(a.Labels)
			d := out[k]
			switch a.Status {
			case "firing":
				if d == nil {
					d = &delivery{FirstFiring: n.received}
					out[k] = d
				}
				d.Labels, d.Annotations = a.Labels, a.Annotations
			case "resolved":
				if d != nil {
					d.Resolved = true
				}
			}
		}
	}
	return out
}

func keys[V any](m map[alertKey]V) []string {
	var out []string
	for k := range m {
		out = append(out, k.String())
	}
	sort.Strings(out)
	return out
}

// promAddr is where startMonitoring's Prometheus listens, in the cluster's client namespace.
const promAddr = "127.0.0.1:9090"

// startMonitoring starts Alertmanager, the webhook receiver and Prometheus in the cluster's client namespace
// and returns Prometheus' API and the receiver; everything stops at the end of the test.
// amConfig writes Alertmanager's configuration for the webhook receiver at hookURL (testAlertmanagerConfig is
// the test's own routing; shippedAlertmanagerConfig the repository's).
func startMonitoring(ctx context.Context, c *cluster.Cluster, tools monitoringTools, dir string, promConfig func(alertmanager string) ([]byte, error),
	amConfig func(hookURL string) ([]byte, error)) (promAPI, *webhookReceiver, func(), error) {
	const amAddr = "127.0.0.1:9093"
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) (promAPI, *webhookReceiver, func(), error) {
		stopAll()
		return promAPI{}, nil, nil, err
	}
	hook, err := startWebhookReceiver(c.ClientNS)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, hook.close)

	amCfg := filepath.Join(dir, "alertmanager.yml")
	amBytes, err := amConfig(hook.URL)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(amCfg, amBytes, 0o644); err != nil {
		return fail(err)
	}
	am, err := cluster.StartProcess(cluster.ProcessSpec{Name: "alertmanager", LogDir: dir, NS: c.ClientNS, Bin: tools.Alertmanager, Args: []string{
		"--config.file=" + amCfg, "--storage.path=" + filepath.Join(dir, "alertmanager-data"),
		"--web.listen-address=" + amAddr, "--cluster.listen-address=", "--log.level=debug"}})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { am.Stop(10 * time.Second) })

	cfg, err := promConfig(amAddr)
	if err != nil {
		return fail(err)
	}
	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfg, cfg, 0o644); err != nil {
		return fail(err)
	}
	prom, err := cluster.StartProcess(cluster.ProcessSpec{Name: "prometheus", LogDir: dir, NS: c.ClientNS, Bin: tools.Prometheus, Args: []string{
		"--config.file=" + promCfg, "--storage.tsdb.path=" + filepath.Join(dir, "prometheus-data"),
		"--web.listen-address=" + promAddr, "--log.level=info"}})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { prom.Stop(10 * time.Second) })

	client := nsHTTPClient(c.ClientNS)
	api, err := newPromAPI("http://"+promAddr, client)
	if err != nil {
		return fail(err)
	}
	for _, probe := range []struct {
		p   *cluster.Process
		url string
	}{{am, "http://" + amAddr + "/-/ready"}, {prom, "http://" + promAddr + "/-/ready"}} {
		err := probe.p.Await(ctx, 2*time.Minute, 500*time.Millisecond, func() error {
			resp, err := client.Get(probe.url)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", probe.url, resp.Status)
			}
			return nil
		})
		if err != nil {
			return fail(err)
		}
	}
	return api, hook, stopAll, nil
}
