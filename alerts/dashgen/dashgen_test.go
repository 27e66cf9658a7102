package dashgen

//lint:file-ignore SA1019 the dashboard is built on the v1 schema on purpose (dashgen.go says why)

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

type target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

type panel struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Targets    []target `json:"targets"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

func panels(t *testing.T) []panel {
	t.Helper()
	out, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID != UID {
		t.Errorf("uid %q, want %q", d.UID, UID)
	}
	return d.Panels
}

// The panels a person reads at a glance are there, each with the query that answers its question.
func TestPanels(t *testing.T) {
	byTitle := map[string]panel{}
	for _, p := range panels(t) {
		if _, dup := byTitle[p.Title]; dup {
			t.Errorf("two panels titled %q", p.Title)
		}
		byTitle[p.Title] = p
	}
	for _, want := range []struct{ title, typ, expr string }{
		// nodes × Services: one lane per (node, Service), the verdict from localtraffic_blackhole and in_rotation.
		{"Verdict over time: node × Service", "state-timeline", "node_namespace_service:localtraffic_verdict:max{"},
		{"Dropped packets per second by Service", "timeseries", "sum by (cluster, namespace, service) (node_namespace_service:localtraffic_rules_dropped_packets:rate5m{"},
		{"Local endpoints per node", "timeseries", "sum by (cluster, node) (localtraffic_local_endpoints{"},
		{"Health check answers", "timeseries", "count(max by (cluster, node, namespace, service) (localtraffic_health_check_up{"},
		{"Health check states", "table", "localtraffic_health_check_up{"},
		{"Local Services", "table", "namespace_service:localtraffic_reporting_nodes:count{"},
		{"kube-proxy healthy per node", "state-timeline", "max by (cluster, node) (localtraffic_kube_proxy_healthy{"},
		{"Exporters up / discovered", "stat", `up{job="localtraffic-exporter"`},
		{"Collector success", "timeseries", "localtraffic_scrape_collector_success{"},
		// Rollouts and drains: episodes, lost attempts beside the window's, the SLO's ratio, drain vs configured.
		{"Exposure episodes per node", "timeseries", "localtraffic_exposure_episode_seconds_count{"},
		{"Lost attempts per Service", "timeseries", "localtraffic_service_window_attempts_total{"},
		{"Success through rollouts and drains (1d)", "timeseries", "node_namespace_service:localtraffic_service_window_attempts:increase1d{"},
		{"Measured drain p95 vs configured window", "timeseries", "localtraffic_service_lb_check_window_seconds{"},
		{"Measured drain p95 vs configured window", "timeseries", "ceil(histogram_quantile(0.95, sum by (cluster, namespace, service, le) (increase(localtraffic_service_lb_drain_seconds_bucket{"},
	} {
		p, ok := byTitle[want.title]
		if !ok {
			t.Errorf("no panel %q", want.title)
			continue
		}
		if p.Type != want.typ {
			t.Errorf("panel %q is a %s, want %s", want.title, p.Type, want.typ)
		}
		found := false
		for _, tg := range p.Targets {
			found = found || strings.Contains(tg.Expr, want.expr)
		}
		if !found {
			t.Errorf("panel %q has no query with %q: %+v", want.title, want.expr, p.Targets)
		}
	}
}

// Every non-row panel queries the dashboard's data source variable with distinct refIds, and the verdict lanes
// are named after node and Service.
func TestTargets(t *testing.T) {
	n := 0
	for _, p := range panels(t) {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			n++
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.Contains(tg.Expr, "localtraffic_verdict") && p.Type == "state-timeline" && tg.LegendFormat != "{{node}} {{namespace}}/{{service}}" {
				t.Errorf("verdict timeline lanes are named %q", tg.LegendFormat)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d queries", n)
	}
}

// The output is a dashboard the SDK itself reads back (its typed model of Grafana's schema).
func TestRoundTrip(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	out, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard.Dashboard
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("the SDK cannot read the generated dashboard back: %v", err)
	}
	if d.Title == nil || len(d.Panels) != len(panels(t)) {
		t.Errorf("round trip lost panels: %d", len(d.Panels))
	}
}

// The node variable (label_values of every exporter's collector metric) narrows every per-node panel: each query
// that keeps the node label, or names it in its legend, selects node=~"$node".
func TestNodeVariable(t *testing.T) {
	out, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range d.Templating.List {
		if v.Name == "node" {
			found = true
			if q := fmt.Sprint(v.Query); !strings.Contains(q, `label_values(localtraffic_scrape_collector_success{cluster=~"$cluster"}, node)`) {
				t.Errorf("node variable query %s", q)
			}
		}
	}
	if !found {
		t.Fatal("no node variable")
	}
	narrowed := 0
	for _, p := range panels(t) {
		for _, tg := range p.Targets {
			// Per-Service totals over every node (count by Service, namespace_service: recordings) stay whole.
			total := strings.HasPrefix(tg.Expr, "count by (cluster, namespace, service)")
			perNode := !total && (strings.Contains(tg.LegendFormat, "{{node}}") || strings.Contains(tg.Expr, "by (cluster, node") ||
				strings.Contains(tg.Expr, "node_namespace_service:") || strings.HasPrefix(tg.Expr, "node:"))
			if perNode && !strings.Contains(tg.Expr, `node=~"$node"`) {
				t.Errorf("panel %q %s: a per-node query without the node variable: %s", p.Title, tg.RefID, tg.Expr)
			}
			if strings.Contains(tg.Expr, `node=~"$node"`) {
				narrowed++
			}
		}
	}
	if narrowed < 10 {
		t.Errorf("only %d queries select the node", narrowed)
	}
}
