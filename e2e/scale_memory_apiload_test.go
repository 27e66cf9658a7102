package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// What one exporter costs the API server, next to one kube-proxy v1.37.2 at the same scale: the
// apiserver's own metrics for bytes and objects, its audit log for who asked what. The users the audit log
// names: the exporter authenticates as its ServiceAccount, kube-proxy as system:kube-proxy.
const (
	exporterUser  = "system:serviceaccount:" + cluster.ExporterNamespace + ":" + cluster.ExporterServiceAccount
	kubeProxyUser = "system:kube-proxy"
)

// auditPolicy records, without bodies, every get, list and watch of what kube-proxy and the exporter read.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [get, list, watch]
  resources:
  - group: ""
    resources: [services, nodes, endpoints]
  - group: discovery.k8s.io
    resources: [endpointslices]
  - group: networking.k8s.io
    resources: [servicecidrs]
- level: None
`

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	StageTimestamp time.Time `json:"stageTimestamp"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// request is one request as the audit log shows it, once.
type request struct {
	at                   time.Time
	user, verb, resource string
	labels, fields       string
	initialEvents        bool // a watch with sendInitialEvents=true: a streamed list
	code                 int  // the HTTP status
}

// listLike: a LIST, or a watch that streams the initial list, that the apiserver served. One it refused (a
// 429 while its watch cache initialises after a restart) cost it nothing and is retried by the reflector.
func (r request) listLike() bool {
	return (r.verb == "list" || r.initialEvents) && r.code == http.StatusOK
}

// readAudit reads the audit log, one request per audit ID (a watch logs ResponseStarted and later
// ResponseComplete).
func readAudit(tb testing.TB, path string) []request {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		fatalf(tb, "audit log: %v", err)
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fatalf(tb, "audit line: %v", err)
		}
		if seen[e.AuditID] {
			continue
		}
		seen[e.AuditID] = true
		u, err := url.Parse(e.RequestURI)
		if err != nil {
			fatalf(tb, "audit request URI %q: %v", e.RequestURI, err)
		}
		q := u.Query()
		out = append(out, request{at: e.StageTimestamp, user: e.User.Username, verb: e.Verb, resource: e.ObjectRef.Resource,
			labels: q.Get("labelSelector"), fields: q.Get("fieldSelector"),
			initialEvents: e.Verb == "watch" && q.Get("sendInitialEvents") == "true", code: e.ResponseStatus.Code})
	}
	if err := sc.Err(); err != nil {
		fatalf(tb, "audit log: %v", err)
	}
	return out
}

// selectorsOf is the set of "labels | fields" one user asked a resource with.
func selectorsOf(reqs []request, user, resource string) []string {
	set := map[string]bool{}
	for _, r := range reqs {
		if r.user == user && r.resource == resource && (r.verb == "list" || r.verb == "watch") {
			set[r.labels+" | "+r.fields] = true
		}
	}
	var out []string
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// countListLike counts user's streamed or plain lists of resource from since (inclusive) to until (exclusive;
// zero: no end).
func countListLike(reqs []request, user, resource string, since, until time.Time) int {
	n := 0
	for _, r := range reqs {
		if r.user == user && r.resource == resource && r.listLike() && !r.at.Before(since) && (until.IsZero() || r.at.Before(until)) {
			n++
		}
	}
	return n
}

// apiCounters is what the apiserver's metrics say, per resource: requests by verb, LIST response bytes, watch
// events sent and their bytes.
type apiCounters map[string]float64

// readAPICounters sums the apiserver's counters by "metric/verb/resource" for the resources of interest.
func readAPICounters(tb testing.TB, c *cluster.Cluster) apiCounters {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := c.APIServerMetrics(ctx)
	if err != nil {
		fatalln(tb, err)
	}
	out := apiCounters{}
	label := func(s *dto.Metric, name string) string {
		for _, l := range s.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	wanted := map[string]bool{"services": true, "endpointslices": true, "nodes": true, "servicecidrs": true}
	for _, s := range m.Series("apiserver_request_total", nil) {
		if r := label(s, "resource"); wanted[r] && label(s, "subresource") == "" {
			out["requests/"+label(s, "verb")+"/"+r] += s.GetCounter().GetValue()
		}
	}
	for _, s := range m.Series("apiserver_response_sizes", nil) {
		if r := label(s, "resource"); wanted[r] && label(s, "subresource") == "" {
			out["response-bytes/"+label(s, "verb")+"/"+r] += s.GetHistogram().GetSampleSum()
		}
	}
	for _, s := range m.Series("apiserver_watch_events_total", nil) {
		if r := label(s, "resource"); wanted[r] {
			out["watch-events/"+r] += s.GetCounter().GetValue()
		}
	}
	for _, s := range m.Series("apiserver_watch_events_sizes", nil) {
		if r := label(s, "resource"); wanted[r] {
			out["watch-event-bytes/"+r] += s.GetHistogram().GetSampleSum()
		}
	}
	return out
}

// settledAPICounters reads the counters once they have stopped moving (two readings a second apart agree, at
// least two seconds after the call): a watch event that a loaded machine delivers late is still in the window
// it belongs to, instead of a fixed wait deciding whether the change "reached no watcher". Up to 30 s.
func settledAPICounters(tb testing.TB, c *cluster.Cluster) apiCounters {
	tb.Helper()
	start := time.Now()
	prev := readAPICounters(tb, c)
	for {
		time.Sleep(time.Second)
		cur := readAPICounters(tb, c)
		if time.Since(start) >= 2*time.Second && fmt.Sprint(cur) == fmt.Sprint(prev) || time.Since(start) > 30*time.Second {
			return cur
		}
		prev = cur
	}
}

// sub is a − b, keys of either.
func (a apiCounters) sub(b apiCounters) apiCounters {
	out := apiCounters{}
	for k, v := range a {
		out[k] = v - b[k]
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out[k] = -v
		}
	}
	return out
}

// min is the smaller of a and b figure by figure; a nil a is b.
func (a apiCounters) min(b apiCounters) apiCounters {
	if a == nil {
		return b
	}
	out := apiCounters{}
	for k := range a {
		out[k] = math.Min(a[k], b[k])
	}
	for k := range b {
		out[k] = math.Min(a[k], b[k])
	}
	return out
}

// changeTries is how many times each change is measured.
const changeTries = 3

func (a apiCounters) String() string {
	var keys []string
	for k, v := range a {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n    %-45s %12.0f", k, a[k])
	}
	return b.String()
}

// apiLoadServices is the population of TestScaleAPILoad: LT_E2E_SCALE_SERVICES, default memoryCIServices.
func apiLoadServices(tb testing.TB) int {
	tb.Helper()
	v := os.Getenv("LT_E2E_SCALE_SERVICES")
	if v == "" {
		return memoryCIServices
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		fatalf(tb, "LT_E2E_SCALE_SERVICES=%q: want a positive number", v)
	}
	return n
}

// quietPeriod is how long the test watches a client with nothing changing: longer than a minute, so that the
// apiserver's bookmarks (about one a minute) and any relist a resync or a watch timeout would cause show up.
const quietPeriod = 65 * time.Second

// TestScaleAPILoad measures the initial list and per-change cost of one exporter and of one kube-proxy, each
// running alone against the population, and holds the exporter to kube-proxy's conversation: the same label
// and field selectors on Services and EndpointSlices, no list in a quiet period, and at most one list per
// resource after the apiserver restarts (every watch broken at once).
//
//	cd e2e && LT_E2E_SCALE_SERVICES=2000 go test -run '^TestScaleAPILoad$' -v -timeout 60m
func TestScaleAPILoad(t *testing.T) {
	c := scaleCluster(t)
	ctx := testContext(t)
	policy := filepath.Join(c.WorkDir, "audit-policy.yaml")
	auditLog := filepath.Join(c.WorkDir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		fatalln(t, err)
	}
	if err := c.RestartAPIServerWith(ctx, "--audit-policy-file="+policy, "--audit-log-path="+auditLog, "--audit-log-maxsize=0"); err != nil {
		fatalln(t, err)
	}
	services := apiLoadServices(t)
	have := 0
	growScale(t, c, &have, services)
	pop := cluster.Population{Namespace: scaleNamespace}
	n := c.Nodes()[0]
	gen := 0
	// change measures one change: the smallest of changeTries windows, figure by figure, since a watch's
	// bookmark (one a minute per watch, 86 bytes) may land in any window.
	change := func(what string, f func() error) apiCounters {
		t.Helper()
		var least apiCounters
		for range changeTries {
			time.Sleep(time.Second)
			before := readAPICounters(t, c)
			if err := f(); err != nil {
				fatalf(t, "%s: %v", what, err)
			}
			least = least.min(settledAPICounters(t, c).sub(before))
		}
		return least
	}
	touchService := func() error {
		gen++
		return c.TouchPopulationService(ctx, pop, 0, gen)
	}
	touchSlice := func() error {
		gen++
		return c.TouchPopulationSlice(ctx, pop, 0)
	}

	// Nobody watching but the apiserver's own controllers: what a change costs without either client.
	baseService := change("baseline Service change", touchService)
	baseSlice := change("baseline slice change", touchSlice)

	type result struct {
		initial, service, slice apiCounters
	}
	measure := func(who string, start func() error, synced func() error) result {
		t.Helper()
		before := readAPICounters(t, c)
		if err := start(); err != nil {
			fatalln(t, err)
		}
		if err := cluster.Eventually(ctx, 10*time.Minute, time.Second, synced); err != nil {
			fatalf(t, "%s never synced: %v", who, err)
		}
		time.Sleep(3 * time.Second)
		r := result{initial: readAPICounters(t, c).sub(before)}
		r.service = change(who+" Service change", touchService).sub(baseService)
		r.slice = change(who+" slice change", touchSlice).sub(baseSlice)
		t.Logf("%s, %d Services of 100 endpoints: initial list%s\n  one Service change (net of the baseline)%s\n  one EndpointSlice change (net)%s",
			who, services, r.initial, r.service, r.slice)
		return r
	}

	exporterSynced := func() error { return showsServices(ctx, c, n.Name, services) }
	exp := measure("exporter", func() error { return n.StartExporter(ctx, "--rules.mode=none") }, exporterSynced)

	// A quiet period: no list.
	quietFrom := time.Now()
	time.Sleep(quietPeriod)
	quietUntil := time.Now()
	n.StopExporter()

	kp := measure("kube-proxy", func() error { return n.StartKubeProxy(ctx, cluster.KubeProxyOptions{}) },
		func() error { return n.WaitKubeProxyHealthy(ctx, 10*time.Second) })

	// Both running, then an apiserver restart: every watch breaks at once, and each client's reflectors
	// resume (or relist, when the restarted apiserver no longer has their resource version).
	if err := n.StartExporter(ctx, "--rules.mode=none"); err != nil {
		fatalln(t, err)
	}
	if err := cluster.Eventually(ctx, 5*time.Minute, time.Second, exporterSynced); err != nil {
		fatalln(t, err)
	}
	time.Sleep(5 * time.Second)
	restartAt := time.Now()
	c.StopAPIServer()
	if err := c.StartAPIServer(ctx); err != nil {
		fatalln(t, err)
	}
	if err := cluster.Eventually(ctx, 5*time.Minute, time.Second, exporterSynced); err != nil {
		fatalln(t, err)
	}
	time.Sleep(quietPeriod)
	n.StopExporter()
	n.StopKubeProxy()
	reqs := readAudit(t, auditLog)
	for _, r := range []string{"services", "endpointslices", "nodes"} {
		if got := countListLike(reqs, exporterUser, r, quietFrom, quietUntil); got > 0 {
			errorf(t, "the exporter listed %s %d times in a %s quiet period: want none (no resync, no relist)", r, got, quietPeriod)
		}
		if got := countListLike(reqs, exporterUser, r, restartAt, time.Time{}); got > 1 {
			errorf(t, "the exporter listed %s %d times after the apiserver restarted: want at most one", r, got)
		}
		t.Logf("%s lists after the apiserver restart: exporter %d, kube-proxy %d", r,
			countListLike(reqs, exporterUser, r, restartAt, time.Time{}), countListLike(reqs, kubeProxyUser, r, restartAt, time.Time{}))
	}
	for _, r := range []string{"services", "endpointslices"} {
		e, k := selectorsOf(reqs, exporterUser, r), selectorsOf(reqs, kubeProxyUser, r)
		if fmt.Sprint(e) != fmt.Sprint(k) {
			errorf(t, "%s: the exporter asks with %q, kube-proxy with %q", r, e, k)
		} else {
			t.Logf("%s: exporter and kube-proxy both ask with %q", r, e)
		}
	}
	// The exporter must not cost more than kube-proxy: no more objects, at most 5% more bytes (every phase
	// changes the same Service and slice, but resource versions and bookmarks differ in length).
	for _, key := range []string{"services", "endpointslices"} {
		if e, k := exp.initial["watch-events/"+key]+exp.initial["requests/LIST/"+key], kp.initial["watch-events/"+key]+kp.initial["requests/LIST/"+key]; e > k {
			errorf(t, "initial list of %s: the exporter got %.0f objects, kube-proxy %.0f", key, e, k)
		}
		if e, k := exp.initial["watch-event-bytes/"+key]+exp.initial["response-bytes/LIST/"+key], kp.initial["watch-event-bytes/"+key]+kp.initial["response-bytes/LIST/"+key]; e > 1.05*k {
			errorf(t, "initial list of %s: the exporter got %.0f bytes, kube-proxy %.0f", key, e, k)
		}
	}
	for _, r := range []result{exp, kp} {
		if r.service["watch-events/services"] < 1 || r.slice["watch-events/endpointslices"] < 1 {
			errorf(t, "a change reached no watcher (Service %v, slice %v): the measurement is broken",
				r.service["watch-events/services"], r.slice["watch-events/endpointslices"])
		}
	}
	for _, ch := range []struct {
		what, resource string
		exp, kp        apiCounters
	}{{"a Service change", "services", exp.service, kp.service}, {"an EndpointSlice change", "endpointslices", exp.slice, kp.slice}} {
		if e, k := ch.exp["watch-events/"+ch.resource], ch.kp["watch-events/"+ch.resource]; e > k {
			errorf(t, "%s: the exporter gets %.0f watch events, kube-proxy %.0f", ch.what, e, k)
		}
		if e, k := ch.exp["watch-event-bytes/"+ch.resource], ch.kp["watch-event-bytes/"+ch.resource]; e > 1.05*k {
			errorf(t, "%s: the exporter gets %.0f bytes, kube-proxy %.0f", ch.what, e, k)
		}
	}
}
