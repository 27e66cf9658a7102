package main

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/version"

	"github.com/localtraffic/localtraffic-exporter/collector"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
	"github.com/localtraffic/localtraffic-exporter/scrape"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// lastState wraps the scrape's gatherer and keeps the State of the latest scrape, so the landing page shows
// exactly what the collectors rendered last, rather than a second, different look at the node.
type lastState struct {
	source collector.StateSource
	mu     sync.Mutex
	st     *scrape.State
	at     time.Time
}

func (l *lastState) Gather(ctx context.Context) *scrape.State {
	st := l.source.Gather(ctx)
	l.mu.Lock()
	l.st, l.at = st, time.Now()
	l.mu.Unlock()
	return st
}

// latest returns the last scrape's State and when it was gathered; nil before the first scrape.
func (l *lastState) latest() (*scrape.State, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st, l.at
}

// landingPage is the exporter's "/": links and version as exporter-toolkit's landing page has them, and this
// node's Local Services as the last scrape saw them (blackbox_exporter's recent-probes page, for verdicts).
// Plain server-side HTML; html/template escapes every value. Before the first scrape it gathers once itself,
// under the probe timeout, through the same gatherer (which then is the latest scrape).
type landingPage struct {
	node, metricsPath string
	states            *lastState
	gatherTimeout     time.Duration
	now               func() time.Time
}

func (p *landingPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	st, at := p.states.latest()
	if st == nil {
		ctx, cancel := context.WithTimeout(r.Context(), p.gatherTimeout)
		st = p.states.Gather(ctx)
		cancel()
		_, at = p.states.latest()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := landingTemplate.Execute(w, p.view(st, at)); err != nil {
		// Headers are gone; the client sees a truncated page. Nothing else to do.
		return
	}
}

// landingView is what the template shows; every field a string or a list of them, decided here.
type landingView struct {
	Node, MetricsPath, Version, At, Age string
	KubeProxy                           []kubeProxyRow
	Rules, API, Dataplane, Source       string
	Services                            []serviceRow
}

type kubeProxyRow struct{ Endpoint, Answer, Detail string }

type serviceRow struct {
	Service, Verdict, VerdictClass, Rotation, Why, APIEndpoints, Rules, HealthCheck, HealthCheckTook, Error string
}

func (p *landingPage) view(st *scrape.State, at time.Time) landingView {
	v := landingView{
		Node: p.node, MetricsPath: p.metricsPath, Version: version.Info(),
		At: at.UTC().Format(time.RFC3339), Age: p.now().Sub(at).Round(time.Second).String(),
		Dataplane: string(st.Dataplane), Source: string(st.Source),
	}
	if st.Replacement != "" {
		v.Dataplane += ", detected: " + st.Replacement
	}
	v.API = "ok"
	if st.APIErr != nil {
		v.API = st.APIErr.Error()
	}
	switch {
	case !st.RulesConfigured:
		v.Rules = "not read (--rules.mode=none or no kube-proxy)"
	case st.NotProgrammed:
		v.Rules = "none: kube-proxy has not programmed this node (before its first sync, or it never ran); nothing drops"
	case st.RulesErr != nil:
		v.Rules = "read failed: " + st.RulesErr.Error()
	default:
		v.Rules = "read"
	}
	if st.KubeProxy.Err != nil {
		v.KubeProxy = []kubeProxyRow{{Endpoint: "-", Answer: "not probed", Detail: st.KubeProxy.Err.Error()}}
	} else {
		for _, h := range []struct {
			ep     string
			result string
			code   int
			last   time.Time
			err    error
		}{
			{"/healthz", string(st.KubeProxy.Healthz.Result), st.KubeProxy.Healthz.StatusCode, st.KubeProxy.Healthz.LastUpdated, st.KubeProxy.Healthz.Err},
			{"/livez", string(st.KubeProxy.Livez.Result), st.KubeProxy.Livez.StatusCode, st.KubeProxy.Livez.LastUpdated, st.KubeProxy.Livez.Err},
		} {
			row := kubeProxyRow{Endpoint: h.ep, Answer: answer(h.result, h.code)}
			var detail []string
			if !h.last.IsZero() {
				detail = append(detail, "last sync "+h.last.UTC().Format(time.RFC3339))
			}
			if h.err != nil {
				detail = append(detail, h.err.Error())
			}
			row.Detail = strings.Join(detail, "; ")
			v.KubeProxy = append(v.KubeProxy, row)
		}
	}
	for _, s := range st.Services {
		v.Services = append(v.Services, serviceView(s))
	}
	return v
}

func serviceView(s *scrape.ServiceResult) serviceRow {
	row := serviceRow{Service: s.Service.Namespace + "/" + s.Service.Name}
	switch vd := s.Verdict; {
	case vd.Blackhole:
		row.Verdict, row.VerdictClass = "BLACKHOLE", "blackhole"
	case vd.InRotation && !vd.Drops:
		row.Verdict, row.VerdictClass = "serving", "serving"
	case vd.InRotation:
		row.Verdict, row.VerdictClass = "serving, some entries dropped", "serving"
	default:
		row.Verdict, row.VerdictClass = "out of rotation", "out"
	}
	if s.Service.Ignored {
		row.Verdict += " (ignored: " + s.Service.IgnoredReason + ")"
	}
	row.Rotation = "no"
	if s.Verdict.InRotation {
		row.Rotation = "yes"
	}
	var whys []string
	seen := map[string]bool{}
	for _, f := range s.Verdict.Families {
		for _, e := range f.Entries {
			if e.Why != "" && !seen[e.Why] {
				seen[e.Why] = true
				whys = append(whys, e.Why)
			}
		}
	}
	sort.Strings(whys)
	if s.Verdict.Blackhole {
		// What the page's severity follows (docs/rotation.md): first, so the reader sees it before the entries.
		sev := "warning: no client seen arriving yet"
		switch {
		case s.Verdict.Reason.Critical():
			sev = "critical"
		case s.Verdict.Reason == verdict.ReasonNotObserved:
			sev = "warning: arrivals not observed"
		}
		whys = append([]string{fmt.Sprintf("blackhole reason %s (%s)", s.Verdict.Reason, sev)}, whys...)
	}
	row.Why = strings.Join(whys, "; ")
	var eps []string
	for _, f := range s.Service.Families {
		eps = append(eps, fmt.Sprintf("%s %d", f.Family, f.LocalEndpoints))
	}
	row.APIEndpoints = strings.Join(eps, ", ")
	var rules []string
	for _, p := range s.Ports {
		state := "no rules"
		switch {
		case p.Rules.Drop:
			state = "DROP"
		case p.Rules.Reject:
			state = "reject (no endpoints)"
		case p.Rules.Programmed:
			state = fmt.Sprintf("%d local endpoints", p.Rules.LocalEndpoints)
			if p.GoneEndpoints > 0 {
				// Stale DNAT: kube-proxy still sends traffic to pods the API no longer has.
				state += fmt.Sprintf(" (%d no longer in the API: %s)", p.GoneEndpoints, endpointList(p.Rules.Endpoints))
			}
		}
		rules = append(rules, fmt.Sprintf("%s %s: %s", p.Family, p.Label, state))
	}
	row.Rules = strings.Join(rules, ", ")
	if len(s.Ports) == 0 {
		row.Rules = "not read"
	}
	var checks, took, errs []string
	for _, c := range s.Checks {
		a := answer(string(c.Result), c.StatusCode)
		if c.LocalEndpoints >= 0 && c.StatusCode != 0 {
			a += fmt.Sprintf(", localEndpoints %d", c.LocalEndpoints)
		}
		checks = append(checks, fmt.Sprintf("%s %s", c.Family, a))
		took = append(took, c.Duration.Round(100*time.Microsecond).String())
		if c.Err != nil {
			errs = append(errs, c.Err.Error())
		}
	}
	row.HealthCheck = strings.Join(checks, ", ")
	if len(s.Checks) == 0 {
		row.HealthCheck = "no health check node port"
	}
	row.HealthCheckTook = strings.Join(took, ", ")
	row.Error = strings.Join(errs, "; ")
	return row
}

// answer is a probe result with its HTTP status when there was one: "ok (200)", "refused".
func answer(result string, code int) string {
	if code != 0 {
		return fmt.Sprintf("%s (%d)", result, code)
	}
	return result
}

var landingTemplate = template.Must(template.New("landing").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>localtraffic-exporter on {{.Node}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #eee; }
td.blackhole { background: #f4c7c3; font-weight: bold; }
td.serving { background: #d9ead3; }
td.out { background: #cfe2f3; }
</style>
</head>
<body>
<h1>localtraffic-exporter</h1>
<p>Per node and per Service with <code>externalTrafficPolicy: Local</code>: does this node serve or drop the Service's external traffic?</p>
<ul>
<li><a href="{{.MetricsPath}}">Metrics</a></li>
<li>Version: {{.Version}}</li>
</ul>
<h2>Node {{.Node}}</h2>
<p id="as-of">As of the last scrape at {{.At}} ({{.Age}} ago). Verdicts from: {{.Source}}; dataplane: {{.Dataplane}}; kube-proxy rules: {{.Rules}}; API view: {{.API}}.</p>
<h3>kube-proxy</h3>
<table id="kube-proxy">
<tr><th>Endpoint</th><th>Answer</th><th>Detail</th></tr>
{{range .KubeProxy}}<tr><td>{{.Endpoint}}</td><td>{{.Answer}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
<h3>Local Services</h3>
<table id="services">
<tr><th>Service</th><th>Verdict</th><th>In rotation</th><th>Why</th><th>API local endpoints</th><th>Rules</th><th>Health check</th><th>Took</th><th>Last error</th></tr>
{{range .Services}}<tr><td>{{.Service}}</td><td class="{{.VerdictClass}}">{{.Verdict}}</td><td>{{.Rotation}}</td><td>{{.Why}}</td><td>{{.APIEndpoints}}</td><td>{{.Rules}}</td><td>{{.HealthCheck}}</td><td>{{.HealthCheckTook}}</td><td>{{.Error}}</td></tr>
{{else}}<tr><td colspan="9">No Service with externalTrafficPolicy: Local.</td></tr>
{{end}}</table>
</body>
</html>
`))

// endpointList spells the rules' endpoints ("10.244.1.5:8080, ..."); an endpoint pod address is fine on a
// page about one node, where a metric label would not be.
func endpointList(eps []dataplane.Endpoint) string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.String()
	}
	return strings.Join(out, ", ")
}
