// Package exporters reads what the nodes' exporters observe, the blackhole reasons of each node's Services: from
// a Prometheus HTTP API with one instant query (--prometheus: status, drain-check), or from each exporter pod
// through a port-forward (status --from-exporters), its DaemonSet read for where the exporter listens.
package exporters

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/metricnames"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// servicesCollector is the exporter's collector that exports the per-Service verdicts: its
// localtraffic_scrape_collector_success series says a node's report of its Services was read whole, blackholes or
// none, which tells a node that reports no blackhole from a node Prometheus does not hear from.
const servicesCollector = "services"

// defaultPrometheusTimeout is --prometheus-timeout's default: one instant query, even over 5,000 nodes' series,
// answers within seconds; a Prometheus that has not answered by then is stuck or unreachable.
const defaultPrometheusTimeout = 30 * time.Second

// PromFlags is how the plugin reaches a Prometheus HTTP API (Prometheus, Thanos Query, Mimir's or Cortex's
// Prometheus-compatible API) for the exporters' verdicts.
type PromFlags struct {
	url             string
	bearerTokenFile string
	caFile          string
	insecure        bool
	headers         []string
	// selector: label matchers added to the query's selectors (cluster="prod"), for a Thanos or Mimir that holds
	// several clusters whose node names may repeat.
	selector string
	timeout  time.Duration
	// lookback: the window the measured drain is read over (--drain-lookback).
	lookback lookbackFlag
}

// lookbackFlag is --drain-lookback: a Prometheus duration (7d, 36h), and whether it was given.
type lookbackFlag struct {
	d   model.Duration
	set bool
}

func (l *lookbackFlag) String() string { return l.d.String() }
func (l *lookbackFlag) Type() string   { return "duration" }
func (l *lookbackFlag) Set(s string) error {
	if err := l.d.Set(s); err != nil {
		return err
	}
	l.set = true
	return nil
}

// AddFlags adds --prometheus and the --prometheus-* flags to a verb.
func (p *PromFlags) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&p.url, "prometheus", "", "also show what each node's exporter reports, read from this Prometheus HTTP API with one instant query "+
		"(Prometheus, Thanos Query, or Mimir's or Cortex's Prometheus API: e.g. https://mimir.example/prometheus): "+
		"the exporters' blackhole reasons, as the alerts see them; a node they call a blackhole fails the command")
	f.StringVar(&p.bearerTokenFile, "prometheus-bearer-token-file", "", "send the token in this file as Authorization: Bearer to --prometheus (read at each request)")
	f.StringVar(&p.caFile, "prometheus-ca-file", "", "verify --prometheus's TLS certificate with this CA bundle (default: the system's)")
	f.BoolVar(&p.insecure, "prometheus-insecure-skip-tls-verify", false, "do not verify --prometheus's TLS certificate (the token still goes to whoever answers)")
	f.StringArrayVar(&p.headers, "prometheus-header", nil, "an HTTP header for --prometheus, 'Name: value' (repeatable): e.g. 'X-Scope-OrgID: tenant-1' for a Mimir or Cortex tenant")
	f.StringVar(&p.selector, "prometheus-selector", "", "label matchers added to the query, e.g. 'cluster=\"prod\"': where one Prometheus API holds several clusters")
	p.lookback.d = DefaultDrainLookback
	f.Var(&p.lookback, "drain-lookback", "with --prometheus: the window the load balancers' measured drain is read over (the exporters' "+
		"localtraffic_service_lb_drain_seconds episodes in it; a Prometheus duration: 7d, 36h)")
	f.DurationVar(&p.timeout, "prometheus-timeout", defaultPrometheusTimeout, "give up on --prometheus after this long (a stuck or unreachable Prometheus fails the read with exit status 3)")
}

// prometheusQuery is the one instant query: every node's blackhole reasons, and every node's services collector
// success (1: its report of its Services is whole), whatever the cluster's size. With no operator between them the
// series keep their names, which tells them apart.
func prometheusQuery(selector string) string {
	reasons, success := metricnames.BlackholeReason, fmt.Sprintf("%s=%q", metricnames.ScrapeCollectorSuccessLabelCollector, servicesCollector)
	if s := strings.TrimSpace(selector); s != "" {
		reasons, success = reasons+"{"+s+"}", success+","+s
	}
	return fmt.Sprintf("%s or %s{%s}", reasons, metricnames.ScrapeCollectorSuccess, success)
}

// Lookback is --drain-lookback.
func (p PromFlags) Lookback() model.Duration { return p.lookback.d }

// Given: --prometheus names an API to read.
func (p PromFlags) Given() bool { return p.url != "" }

// API is the API client of --prometheus, nil without it: the other --prometheus-* flags alone are bad input
// (they would silently do nothing).
func (p PromFlags) API() (promv1.API, error) {
	if p.url == "" {
		if p.bearerTokenFile != "" || p.caFile != "" || p.insecure || len(p.headers) > 0 || p.selector != "" {
			return nil, cli.BadInputf("the --prometheus-* flags say how to reach --prometheus, which is not given")
		}
		if p.lookback.set {
			return nil, cli.BadInputf("--drain-lookback is the window read from --prometheus, which is not given")
		}
		return nil, nil
	}
	if p.lookback.d <= 0 {
		return nil, cli.BadInputf("--drain-lookback %s: want a positive duration", p.lookback.d)
	}
	if p.timeout <= 0 {
		return nil, cli.BadInputf("--prometheus-timeout %s: want a positive duration", p.timeout)
	}
	return p.client()
}

// client checks the flags and builds the API client: a flag that cannot work (a token file that cannot be read,
// a header without a colon) is bad input before anything is asked.
func (p PromFlags) client() (promv1.API, error) {
	u, err := url.Parse(p.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, cli.BadInputf("--prometheus %q: want the API's base URL, http(s)://host[:port][/path]", p.url)
	}
	// Prometheus' own client configuration (a scrape job's http_config): the same TLS, authorization, header and
	// proxy handling Prometheus and its tools use, with HTTPS_PROXY and NO_PROXY honoured.
	cfg := promconfig.HTTPClientConfig{
		TLSConfig:       promconfig.TLSConfig{CAFile: p.caFile, InsecureSkipVerify: p.insecure},
		ProxyConfig:     promconfig.ProxyConfig{ProxyFromEnvironment: true},
		EnableHTTP2:     true,
		FollowRedirects: true,
		HTTPHeaders:     &promconfig.Headers{Headers: map[string]promconfig.Header{}},
	}
	if p.bearerTokenFile != "" {
		if _, err := os.ReadFile(p.bearerTokenFile); err != nil {
			return nil, cli.BadInputf("--prometheus-bearer-token-file: %w", err)
		}
		cfg.Authorization = &promconfig.Authorization{Type: "Bearer", CredentialsFile: p.bearerTokenFile}
	}
	for _, h := range p.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, cli.BadInputf("--prometheus-header %q: want 'Name: value'", h)
		}
		hd := cfg.HTTPHeaders.Headers[name]
		hd.Values = append(hd.Values, strings.TrimSpace(value))
		cfg.HTTPHeaders.Headers[name] = hd
	}
	if err := cfg.Validate(); err != nil {
		return nil, cli.BadInputf("--prometheus flags: %w", err)
	}
	rt, err := promconfig.NewRoundTripperFromConfig(cfg, "kubectl-localtraffic", promconfig.WithUserAgent("kubectl-localtraffic"))
	if err != nil {
		return nil, cli.BadInputf("--prometheus flags: %w", err)
	}
	c, err := promapi.NewClient(promapi.Config{Address: p.url, RoundTripper: rt})
	if err != nil {
		return nil, cli.BadInputf("--prometheus %q: %w", p.url, err)
	}
	return promv1.NewAPI(c), nil
}

// readPrometheus asks the Prometheus API once for every node's exporter report and reads it into the same
// model --from-exporters fills. A node whose exporter Prometheus does not hear from (not scraped, or its
// services collector failing) is absent from the result, as a node whose exporter did not answer; warnings
// (a Thanos store that did not answer) go to warn. Any failure of the query itself is an apiError: the
// picture is incomplete, and the command says so in one line and its exit status.
func (p PromFlags) readPrometheus(ctx context.Context, api promv1.API, warn func(string)) (placement.Observed, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	q := prometheusQuery(p.selector)
	val, warnings, _, err := api.Query(ctx, q, time.Now(), promv1.WithTimeout(p.timeout))
	for _, w := range warnings {
		warn(fmt.Sprintf("Prometheus at %s warns: %s", p.url, w))
	}
	if err != nil {
		return nil, cli.APIError{Err: p.queryError(ctx, err)}
	}
	vec, ok := val.(model.Vector)
	if !ok {
		return nil, cli.APIError{Err: fmt.Errorf("the Prometheus API at %s answered the instant query with a %s, not a vector: is the URL a Prometheus query API?", p.url, val.Type())}
	}
	return observedFromVector(vec), nil
}

// queryError says in one line why the query failed, and what to check.
func (p PromFlags) queryError(ctx context.Context, err error) error {
	var perr *promv1.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("the Prometheus API at %s did not answer within %s (--prometheus-timeout)", p.url, p.timeout)
	case errors.As(err, &perr) && perr.Type == promv1.ErrBadResponse:
		return fmt.Errorf("the answer of the Prometheus API at %s is not the API's JSON (%s): is the URL the API's base?", p.url, perr.Msg)
	case errors.As(err, &perr) && (strings.HasSuffix(perr.Msg, ": 401") || strings.HasSuffix(perr.Msg, ": 403")):
		return fmt.Errorf("the Prometheus API at %s refused the query (%s): check --prometheus-bearer-token-file and --prometheus-header", p.url, perr.Msg)
	case errors.As(err, &perr):
		msg := fmt.Sprintf("the Prometheus API at %s failed the query %s: %s: %s", p.url, prometheusQuery(p.selector), perr.Type, perr.Msg)
		if perr.Detail != "" {
			// The body of an error the API did not write itself (a proxy's, a query frontend's): its start.
			msg += ": " + clip(cli.OneLine(perr.Detail), 200)
		}
		return errors.New(msg)
	}
	return fmt.Errorf("querying Prometheus at %s: %w", p.url, err)
}

// observedFromVector reads the query's answer: a node is observed when its services collector succeeded, and its
// blackholes are its localtraffic_blackhole_reason series. The exporter's namespace and service labels may have
// been kept as exported_namespace and exported_service by a Prometheus that does not honor the target's labels
// (OpenShift's user-workload monitoring); several replicas' copies of a series (Thanos without deduplication)
// agree or keep the strongest reason.
func observedFromVector(vec model.Vector) placement.Observed {
	obs := placement.Observed{}
	failed := map[string]bool{}
	node := func(s *model.Sample) placement.NodeObserved {
		n := string(s.Metric[metricnames.BlackholeReasonLabelNode])
		o, ok := obs[n]
		if !ok {
			o = placement.NodeObserved{Reasons: map[string]string{}}
			obs[n] = o
		}
		return o
	}
	for _, s := range vec {
		name := string(s.Metric[model.MetricNameLabel])
		n := string(s.Metric[metricnames.BlackholeReasonLabelNode])
		if n == "" {
			continue
		}
		switch name {
		case metricnames.ScrapeCollectorSuccess:
			if s.Value != 1 {
				failed[n] = true
				continue
			}
			node(s)
		case metricnames.BlackholeReason:
			if s.Value != 1 {
				continue
			}
			ns := labelOr(s.Metric, "exported_"+metricnames.BlackholeReasonLabelNamespace, metricnames.BlackholeReasonLabelNamespace)
			svc := labelOr(s.Metric, "exported_"+metricnames.BlackholeReasonLabelService, metricnames.BlackholeReasonLabelService)
			key := ns + "/" + svc
			reason := string(s.Metric[metricnames.BlackholeReasonLabelReason])
			o := node(s)
			if old, ok := o.Reasons[key]; !ok || stronger(reason, old) {
				o.Reasons[key] = reason
			}
		}
	}
	// A node one replica heard fail is unknown: half a report would show its missing blackholes as none.
	for n := range failed {
		delete(obs, n)
	}
	return obs
}

// labelOr is the value of the label first, when the series has it, else of second.
func labelOr(m model.Metric, first, second model.LabelName) string {
	if v, ok := m[first]; ok {
		return string(v)
	}
	return string(m[second])
}

// stronger tells whether blackhole reason a is stronger than b (placement.ObservedBlackholes' order; an unknown
// reason, from a newer exporter, is the weakest).
func stronger(a, b string) bool {
	order := placement.ObservedBlackholes()
	ia, ib := slices.Index(order, placement.Observation(a)), slices.Index(order, placement.Observation(b))
	return ia >= 0 && (ib < 0 || ia < ib)
}

// Observe reads the exporters' verdicts from --prometheus for status and drain-check. It reports on stderr, in
// one line each, a query that failed and the judged nodes Prometheus has no report from; complete is false then
// (exit status 3 unless something fails the command anyway).
func (p PromFlags) Observe(ctx context.Context, stderr io.Writer, api promv1.API, judged []placement.Summary) (obs placement.Observed, complete bool) {
	warn := func(msg string) { fmt.Fprintf(stderr, "kubectl-localtraffic: %s\n", cli.OneLine(msg)) }
	obs, err := p.readPrometheus(ctx, api, warn)
	if err != nil {
		warn(err.Error())
		return placement.Observed{}, false
	}
	if missing := unreported(obs, judged); len(missing) > 0 {
		warn(fmt.Sprintf("Prometheus at %s has no report from the exporter on %s (not scraped, no exporter there, or its %s collector failing): their verdicts are the API's alone",
			p.url, cli.NodeList(missing), servicesCollector))
		return obs, false
	}
	return obs, true
}

// unreported lists the judged nodes (virtual ones aside: no kube-proxy, no exporter) that obs has no report
// from, by name. Every Summary judges the same nodes: the first one's are read.
func unreported(obs placement.Observed, judged []placement.Summary) []string {
	if len(judged) == 0 {
		return nil
	}
	var out []string
	judged[0].Each(func(n placement.NodeStatus) {
		if _, ok := obs[n.Node]; !ok && !n.Virtual {
			out = append(out, n.Node)
		}
	})
	slices.Sort(out)
	return out
}

// clip cuts s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
