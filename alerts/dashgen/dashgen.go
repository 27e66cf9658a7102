// Package dashgen builds the Grafana dashboard dashboards/localtraffic-exporter.json from Go with the Grafana
// Foundation SDK (Apache-2.0), so its panels and queries are typed code rather than hand-edited JSON. The
// alerts module's generator (cmd/generate) writes its output; a test fails while the committed file differs.
//
// Every query names only metrics of package metricset (the exporter's, generated from its code) or recording
// rules of ../rules.yaml (the alerts module's metrics tests check it), and e2e/alerts_test.go runs each one
// against a real Prometheus during the drill.
package dashgen

// The dashboard stays on the SDK's v1 dashboard schema, which its dashboardv2 package deprecates: v1 JSON is what
// Grafana's file provisioning, the dashboard sidecars of the charts it ships beside and grafana.com import, and
// every Grafana before 12 read; v2 needs Grafana 12's new dashboard API.
//lint:file-ignore SA1019 the v1 dashboard schema is the one every supported Grafana imports (above)

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's stable identifier (links and Grafana's provisioning key on it).
const UID = "localtraffic-exporter"

// RunbookURL is where docs/runbooks.md is published.
const RunbookURL = "https://github.com/localtraffic/localtraffic-exporter/blob/main/docs/runbooks.md"

// Selectors are the label matchers the template variables put into every query.
const (
	serviceSel = `cluster=~"$cluster", namespace=~"$namespace", service=~"$service"`
	// The node variable narrows the per-node panels; per-Service totals (the namespace_service: recordings)
	// keep counting every node, as the alerts do.
	nodeSel        = `cluster=~"$cluster", node=~"$node"`
	nodeServiceSel = `cluster=~"$cluster", node=~"$node", namespace=~"$namespace", service=~"$service"`
)

var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// JSON renders the dashboard as Grafana reads it (indented, with a trailing newline).
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // PromQL's <, > and & stay readable in the file
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("encode dashboard: %w", err)
	}
	return buf.Bytes(), nil
}

// Build assembles the dashboard: overview stats, the node × Service verdicts over time and now, health check
// answers, kube-proxy's health per node, what the rules say (drops, local endpoints), and the exporter's own
// health. It queries only what the exporter exports with its default flags (alerts/defaults_test.go), but for
// the rollouts and drains row, which reads the opt-in service_exposure collector and says so.
func Build() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("localtraffic-exporter / Local Services per node").
		Uid(UID).
		Description("Per node and per Service with externalTrafficPolicy: Local: does the node serve or drop the Service's external traffic. Alerts: alerts/alerts.yaml; runbooks: docs/runbooks.md.").
		Tags([]string{"kubernetes", "kube-proxy", "localtraffic-exporter"}).
		Timezone("utc").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-1h", "now").
		Readonly().
		Link(dashboard.NewDashboardLinkBuilder("Runbooks").Type(dashboard.DashboardLinkTypeLink).Url(RunbookURL).TargetBlank(true)).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(queryVariable("cluster", "Cluster", "localtraffic_scrape_collector_success", "cluster")).
		// Every exporter exports its collectors' success with its node's name, whatever the node runs.
		WithVariable(queryVariable("node", "Node", `localtraffic_scrape_collector_success{cluster=~"$cluster"}`, "node")).
		// Every node's exporter exports localtraffic_blackhole (0 or 1) for every Local Service it reports, by
		// default: it lists the Services (localtraffic_service_info is opt-in).
		WithVariable(queryVariable("namespace", "Namespace", `localtraffic_blackhole{cluster=~"$cluster"}`, "namespace")).
		WithVariable(queryVariable("service", "Service", `localtraffic_blackhole{cluster=~"$cluster", namespace=~"$namespace"}`, "service"))

	b.WithRow(dashboard.NewRowBuilder("Overview"))
	b.WithPanel(alarmStat("Blackholed node × Service pairs",
		"Nodes in rotation for a Local Service that drop its external traffic (LocalTrafficBlackhole pages on each).",
		query("A", `sum(namespace_service:localtraffic_blackhole:sum{`+serviceSel+`})`).Instant()))
	b.WithPanel(alarmStat("Services with endpoints on one node",
		"Local Services whose every ready endpoint sits on a single node: one drain away from an outage.",
		query("A", `count(namespace_service:localtraffic_has_local_endpoint:sum{`+serviceSel+`} == 1) or vector(0)`).Instant()))
	b.WithPanel(alarmStat("Nodes with kube-proxy failing /livez",
		"kube-proxy's /livez answers non-200 on these nodes: its rules may be stale.",
		query("A", `count(max by (cluster, node) (localtraffic_kube_proxy_up{`+nodeSel+`, endpoint="livez"}) == 0) or vector(0)`).Instant()))
	b.WithPanel(stat.NewPanelBuilder().Title("Exporters up / discovered").
		Description("Exporter pods Prometheus scrapes successfully, of those it discovered (one per node).").
		Datasource(datasource).Height(4).Span(6).
		WithTarget(query("A", `sum(up{job="localtraffic-exporter", `+nodeSel+`})`).Instant().LegendFormat("up")).
		WithTarget(query("B", `count(up{job="localtraffic-exporter", `+nodeSel+`})`).Instant().LegendFormat("discovered")).
		ColorMode(common.BigValueColorModeNone).GraphMode(common.BigValueGraphModeNone).
		ReduceOptions(lastValue()))

	b.WithRow(dashboard.NewRowBuilder("Verdicts"))
	b.WithPanel(timeline("Verdict over time: node × Service").
		Description("One lane per node and Local Service, from localtraffic_blackhole and localtraffic_in_rotation: serving, out of rotation (drained by design), or BLACKHOLE (in rotation, traffic dropped).").
		Datasource(datasource).Height(10).Span(24).
		WithTarget(query("A", `node_namespace_service:localtraffic_verdict:max{`+nodeServiceSel+`}`).LegendFormat("{{node}} {{namespace}}/{{service}}")).
		Mappings(verdictMappings()).
		RowHeight(0.8))
	b.WithPanel(table.NewPanelBuilder().Title("Node × Service verdict").
		Description("Per node and Local Service: serving (in rotation with a local endpoint), out of rotation (health check 503, excluded or deleting node: drained by design), or BLACKHOLE (in rotation, traffic dropped).").
		Datasource(datasource).Height(10).Span(24).
		WithTarget(query("A", `label_join(node_namespace_service:localtraffic_verdict:max{`+nodeServiceSel+`}, "service_ref", "/", "namespace", "service")`).Instant().Format(prometheus.PromQueryFormatTable)).
		WithTransformation(dashboard.DataTransformerConfig{Id: "groupingToMatrix", Options: map[string]any{
			"columnField": "node", "rowField": "service_ref", "valueField": "Value", "emptyValue": "null",
		}}).
		ShowHeader(true).CellHeight(common.TableCellHeightSm).Align(common.FieldTextAlignmentCenter).
		CellOptions(common.TableCellOptions{TableColoredBackgroundCellOptions: &common.TableColoredBackgroundCellOptions{Type: "color-background"}}).
		Mappings(verdictMappings()).
		OverrideByName(`service_ref\node`, []dashboard.DynamicConfigValue{
			{Id: "custom.cellOptions", Value: map[string]any{"type": "auto"}},
			{Id: "displayName", Value: `Service \ node`},
		}))
	b.WithPanel(table.NewPanelBuilder().Title("Blackholed nodes").
		Description("Node × Service pairs dropping external traffic now.").
		Datasource(datasource).Height(8).Span(12).
		WithTarget(query("A", `max by (cluster, node, namespace, service) (localtraffic_blackhole{`+nodeServiceSel+`}) == 1`).Instant().Format(prometheus.PromQueryFormatTable)))
	b.WithPanel(table.NewPanelBuilder().Title("Health check states").
		Description("Per node and health-checked Service (a LoadBalancer with a health check node port): 1 when the node's health check node port answers 200 (in rotation), 0 when it does not (503 without a local endpoint, or no answer: the exporter's log and landing page say why; --collector.service_details adds the answer as localtraffic_health_check_result), and the node's local endpoints.").
		Datasource(datasource).Height(8).Span(12).
		WithTarget(query("A", `max by (cluster, node, namespace, service) (localtraffic_health_check_up{`+nodeServiceSel+`})`).Instant().Format(prometheus.PromQueryFormatTable)).
		WithTarget(query("B", `max by (cluster, node, namespace, service) (localtraffic_local_endpoints{`+nodeServiceSel+`}) and on (cluster, node, namespace, service) max by (cluster, node, namespace, service) (localtraffic_health_check_up{`+nodeServiceSel+`})`).Instant().Format(prometheus.PromQueryFormatTable)))
	b.WithPanel(series("Blackholed nodes per Service").
		Description("How many nodes drop each Service's external traffic.").
		Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
		WithTarget(query("A", `namespace_service:localtraffic_blackhole:sum{`+serviceSel+`}`).LegendFormat("{{namespace}}/{{service}}")))
	b.WithPanel(series("Health check answers").
		Description("Node × health-checked Service pairs whose health check node port answers 200 (in rotation), and those where it does not (drained: 503 without a local endpoint, or no answer).").
		Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
		WithTarget(query("A", `count(max by (cluster, node, namespace, service) (localtraffic_health_check_up{`+nodeServiceSel+`}) == 1)`).LegendFormat("200")).
		WithTarget(query("B", `count(max by (cluster, node, namespace, service) (localtraffic_health_check_up{`+nodeServiceSel+`}) == 0)`).LegendFormat("not 200")))
	b.WithPanel(table.NewPanelBuilder().Title("Local Services").
		Description("Per Local Service: the nodes reporting it, those with a local endpoint, those blackholing it, and those probing its health check node port (a LoadBalancer Service with a health check node port has one on every node; a NodePort Service none).").
		Datasource(datasource).Height(8).Span(24).
		WithTarget(query("A", `namespace_service:localtraffic_reporting_nodes:count{`+serviceSel+`}`).Instant().Format(prometheus.PromQueryFormatTable)).
		WithTarget(query("B", `namespace_service:localtraffic_has_local_endpoint:sum{`+serviceSel+`}`).Instant().Format(prometheus.PromQueryFormatTable)).
		WithTarget(query("C", `namespace_service:localtraffic_blackhole:sum{`+serviceSel+`}`).Instant().Format(prometheus.PromQueryFormatTable)).
		WithTarget(query("D", `count by (cluster, namespace, service) (max by (cluster, node, namespace, service) (localtraffic_health_check_up{`+serviceSel+`}))`).Instant().Format(prometheus.PromQueryFormatTable)).
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]any{"Time": true},
			"renameByName": map[string]any{
				"Value #A": "nodes reporting", "Value #B": "nodes with local endpoints",
				"Value #C": "nodes blackholing", "Value #D": "nodes health-checked",
			},
		}}).
		ShowHeader(true).CellHeight(common.TableCellHeightSm))

	b.WithRow(dashboard.NewRowBuilder("Arrivals"))
	b.WithPanel(series("New external connection attempts per node").
		Description("Where external traffic really goes: the new connection attempts (TCP SYN, SCTP INIT; UDP datagrams) the arrivals meter sees reaching each node for Local Services, by destination kind. A node that receives them while it blackholes a Service loses them (localtraffic_blackhole_reason traffic_lost).").
		Datasource(datasource).Height(8).Span(12).Min(0).Unit("cps").
		WithTarget(query("A", `sum by (cluster, node, kind) (rate(localtraffic_arrivals_total{kind!="health_check",`+nodeSel+`}[5m]))`).LegendFormat("{{node}} {{kind}}")))
	b.WithPanel(series("Health check probes per node").
		Description("Probes of the health check node ports from outside each node (a load balancer checking it), and the arrivals meter's state: a node nobody probes is never drained (LocalTrafficNodeNotHealthChecked).").
		Datasource(datasource).Height(8).Span(12).Min(0).
		WithTarget(query("A", `sum by (cluster, node) (rate(localtraffic_arrivals_total{kind="health_check",`+nodeSel+`}[5m]))`).LegendFormat("{{node}} probes/s")).
		WithTarget(query("B", `max by (cluster, node) (localtraffic_arrivals_meter_state{state!="ok",`+nodeSel+`})`).LegendFormat("{{node}} meter not ok")))

	// What rollouts and drains lose (docs/exposure.md): the node's episodes by default, the rest per Service from
	// the opt-in service_exposure collector (empty without --collector.service_exposure). The drain's p95 and the
	// preStop are the plugin's PRESTOP advice (docs/audit.md): a week of episodes, rounded up, plus 5 s.
	b.WithRow(dashboard.NewRowBuilder("Rollouts and drains"))
	b.WithPanel(series("Exposure episodes per node").
		Description("Episodes that ended on each node in the last hour: the node dropped a Local Service's new connections while load balancers still sent them (a rollout, a drain, a node leaving). docs/exposure.md.").
		Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
		WithTarget(query("A", `sum by (cluster, node) (increase(localtraffic_exposure_episode_seconds_count{`+nodeSel+`}[1h]))`).LegendFormat("{{node}}")))
	b.WithPanel(series("Lost attempts per Service").
		Description("New connection attempts lost in exposure episodes in the last hour, by cause, beside those that arrived in the Service's rollout and drain windows, served or dropped (needs --collector.service_exposure).").
		Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
		WithTarget(query("A", `sum by (cluster, namespace, service, cause) (increase(localtraffic_service_exposure_attempts_total{`+nodeServiceSel+`}[1h]))`).LegendFormat("lost {{namespace}}/{{service}} {{cause}}")).
		WithTarget(query("B", `sum by (cluster, namespace, service, cause) (increase(localtraffic_service_window_attempts_total{`+nodeServiceSel+`}[1h]))`).LegendFormat("in windows {{namespace}}/{{service}} {{cause}}")))
	b.WithPanel(series("Success through rollouts and drains (1d)").
		Description("Per Service over the last day: 1 - lost / attempts in its rollout, drain and node_deleting windows, summed over the nodes. LocalTrafficServiceRolloutLoss warns below 99 %, LocalTrafficServiceRolloutLossCritical pages below 95 %, where at least 100 attempts arrived (needs --collector.service_exposure).").
		Datasource(datasource).Height(8).Span(12).Min(0).Max(1).Unit("percentunit").
		WithTarget(query("A", `1 - (sum by (cluster, namespace, service) (node_namespace_service:localtraffic_service_exposure_attempts:increase1d{`+nodeServiceSel+`}) or 0 * sum by (cluster, namespace, service) (node_namespace_service:localtraffic_service_window_attempts:increase1d{`+nodeServiceSel+`})) / sum by (cluster, namespace, service) (node_namespace_service:localtraffic_service_window_attempts:increase1d{`+nodeServiceSel+`})`).LegendFormat("{{namespace}}/{{service}}")))
	b.WithPanel(series("Measured drain p95 vs configured window").
		Description("Per Service: the p95 over a week of its load balancer's measured drains (first 503 of the health check node port to the last new attempt that still arrived), beside the window its annotations configure (interval × unhealthy threshold), and the preStop sleep the plugin's PRESTOP column recommends: the p95 rounded up plus 5 s (needs --collector.service_exposure).").
		Datasource(datasource).Height(8).Span(12).Min(0).Unit("s").
		WithTarget(query("A", `histogram_quantile(0.95, sum by (cluster, namespace, service, le) (increase(localtraffic_service_lb_drain_seconds_bucket{`+nodeServiceSel+`}[1w])))`).LegendFormat("measured p95 {{namespace}}/{{service}}")).
		WithTarget(query("B", `max by (cluster, namespace, service) (localtraffic_service_lb_check_window_seconds{`+nodeServiceSel+`})`).LegendFormat("configured {{namespace}}/{{service}}")).
		WithTarget(query("C", `ceil(histogram_quantile(0.95, sum by (cluster, namespace, service, le) (increase(localtraffic_service_lb_drain_seconds_bucket{`+nodeServiceSel+`}[1w])))) + 5`).LegendFormat("recommended preStop {{namespace}}/{{service}}")))

	b.WithRow(dashboard.NewRowBuilder("Announcers"))
	b.WithPanel(table.NewPanelBuilder().Title("Announcer sources per node").
		Description("Per node, each load balancer announcer source the exporter reads (metallb_l2, metallb_bgp, cilium_l2, cilium_l2_policy: the announcers' own objects; kube_vip, openelb, purelb: Service annotations) and its state: ok (rotation follows it), absent (no CRD, or no Service carries the annotation), forbidden (RBAC refused the read), stale (no answer since a failure). docs/rotation.md, Announcers.").
		Datasource(datasource).Height(8).Span(12).
		WithTarget(query("A", `max by (cluster, node, source, state) (localtraffic_announcer_source_state{`+nodeSel+`})`).Instant().Format(prometheus.PromQueryFormatTable)).
		WithTransformation(dashboard.DataTransformerConfig{Id: "groupingToMatrix", Options: map[string]any{
			"columnField": "source", "rowField": "node", "valueField": "state", "emptyValue": "null",
		}}).
		ShowHeader(true).CellHeight(common.TableCellHeightSm).Align(common.FieldTextAlignmentCenter))
	b.WithPanel(alarmStat("Nodes an announcer sends to without a local endpoint",
		"Node × Service pairs whose load balancer IP an announcer announces from a node that has no local endpoint (reason announced_here: LocalTrafficAnnouncedNodeDrops).",
		query("A", `count(max by (cluster, node, namespace, service) (localtraffic_blackhole_reason{reason="announced_here", `+nodeServiceSel+`}) == 1) or vector(0)`).Instant()))
	b.WithPanel(alarmStat("Services nobody announces",
		"Services with endpoints whose load balancer IP no node announces (a Cilium L2 lease nobody renews: LocalTrafficServiceUnannounced).",
		query("A", `count(max by (cluster, namespace, service) (localtraffic_service_unannounced{`+serviceSel+`})) or vector(0)`).Instant()))

	b.WithRow(dashboard.NewRowBuilder("kube-proxy"))
	b.WithPanel(timeline("kube-proxy healthy per node").
		Description("localtraffic_kube_proxy_healthy: kube-proxy's /healthz says its rules are fresh on this node.").
		Datasource(datasource).Height(8).Span(12).
		WithTarget(query("A", `max by (cluster, node) (localtraffic_kube_proxy_healthy{`+nodeSel+`})`).LegendFormat("{{node}}")).
		Mappings([]dashboard.ValueMapping{valueMap(map[string]dashboard.ValueMappingResult{
			"0": mapResult("unhealthy", "red", 0),
			"1": mapResult("healthy", "green", 1),
		})}).
		RowHeight(0.8))
	b.WithPanel(series("kube-proxy health endpoints").
		Description("Per node: kube-proxy's /healthz and /livez answering 200, the node draining, and kube-proxy's own view of the node's eligibility.").
		Datasource(datasource).Height(8).Span(12).Min(0).Max(1).Decimals(0).
		WithTarget(query("A", `max by (cluster, node, endpoint) (localtraffic_kube_proxy_up{`+nodeSel+`})`).LegendFormat("{{node}} {{endpoint}}")).
		WithTarget(query("B", `max by (cluster, node) (localtraffic_node_draining{`+nodeSel+`})`).LegendFormat("{{node}} draining")).
		WithTarget(query("C", `max by (cluster, node) (localtraffic_kube_proxy_node_eligible{`+nodeSel+`})`).LegendFormat("{{node}} eligible")))
	b.WithPanel(series("kube-proxy sync age").
		Description("Seconds since kube-proxy last synced its rules, per node.").
		Datasource(datasource).Height(8).Span(24).Min(0).Unit("s").
		WithTarget(query("A", `node:localtraffic_kube_proxy_sync_age_seconds:max{`+nodeSel+`}`).LegendFormat("{{node}}")))

	b.WithRow(dashboard.NewRowBuilder("Rules"))
	b.WithPanel(series("Dropped packets per second by Service").
		Description("New connections kube-proxy's rules drop for each Service, summed over nodes (the DROP/reject rule's packet counters). By default for Services with a health check node port only (a NodePort Service's drops in rotation are a blackhole already); --collector.rules.per-port adds every Service.").
		Datasource(datasource).Height(8).Span(12).Min(0).Unit("pps").
		WithTarget(query("A", `sum by (cluster, namespace, service) (node_namespace_service:localtraffic_rules_dropped_packets:rate5m{`+nodeServiceSel+`})`).LegendFormat("{{namespace}}/{{service}}")))
	b.WithPanel(series("Dropped new connections per node").
		Description("The same drops per node and Service (health-checked Services by default).").
		Datasource(datasource).Height(8).Span(12).Min(0).Unit("pps").
		WithTarget(query("A", `node_namespace_service:localtraffic_rules_dropped_packets:rate5m{`+nodeServiceSel+`}`).LegendFormat("{{node}} {{namespace}}/{{service}}")))
	b.WithPanel(series("Local endpoints per node").
		Description("Ready endpoints of the selected Local Services on each node, as the API reports them.").
		Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
		WithTarget(query("A", `sum by (cluster, node) (localtraffic_local_endpoints{`+nodeServiceSel+`})`).LegendFormat("{{node}}")))
	b.WithPanel(series("Local endpoints: API view vs rules").
		Description("Per node and Service: local endpoints in the API, and whether kube-proxy's rules (or, without rules, the health check node port's count) disagree with it. --collector.rules.per-port exports the rules' own per-port counts (localtraffic_rules_local_endpoints).").
		Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
		WithTarget(query("A", `max by (cluster, node, namespace, service) (localtraffic_local_endpoints{`+nodeServiceSel+`})`).LegendFormat("api {{node}} {{namespace}}/{{service}}")).
		WithTarget(query("B", `max by (cluster, node, namespace, service) (localtraffic_rules_mismatch{`+nodeServiceSel+`})`).LegendFormat("mismatch {{node}} {{namespace}}/{{service}}")))

	b.WithRow(dashboard.NewRowBuilder("Exporter"))
	b.WithPanel(series("Collector success").
		Description("1 when each collector of each node's exporter succeeded in the last scrape.").
		Datasource(datasource).Height(8).Span(12).Min(0).Max(1).Decimals(0).
		WithTarget(query("A", `min by (cluster, node, collector) (localtraffic_scrape_collector_success{`+nodeSel+`})`).LegendFormat("{{node}} {{collector}}")))
	b.WithPanel(series("Collector duration").
		Description("How long each collector took in the last scrape.").
		Datasource(datasource).Height(8).Span(12).Min(0).Unit("s").
		WithTarget(query("A", `max by (cluster, node, collector) (localtraffic_scrape_collector_duration_seconds{`+nodeSel+`})`).LegendFormat("{{node}} {{collector}}")))

	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("build dashboard: %w", err)
	}
	return d, nil
}

// series is a time series panel with its legend listed below and a tooltip of every series, largest first.
func series(title string) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title(title).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
}

// timeline is a state timeline of one lane per series: the lane's name says which, the colour what state.
func timeline(title string) *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().Title(title).
		ShowValue(common.VisibilityModeNever).MergeValues(true).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(false).DisplayMode(common.LegendDisplayModeHidden).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone))
}

func query(ref, expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(ref).Expr(expr).Datasource(datasource)
}

// queryVariable is a multi-value variable over label_values(selector, label) with ".*" as All: the queries
// use the variables as regex matchers.
func queryVariable(name, label, selector, of string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).Label(label).
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: cog.ToPtr(fmt.Sprintf("label_values(%s, %s)", selector, of))}).
		Definition(fmt.Sprintf("label_values(%s, %s)", selector, of)).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
}

// alarmStat is a stat that is green at 0 and red from 1: a count of things that should not exist.
func alarmStat(title, description string, target *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).
		Datasource(datasource).Height(4).Span(6).
		WithTarget(target).
		Unit("none").
		ColorMode(common.BigValueColorModeBackground).GraphMode(common.BigValueGraphModeNone).
		ReduceOptions(lastValue()).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
			{Value: nil, Color: "green"},
			{Value: cog.ToPtr[float64](1), Color: "red"},
		}))
}

func lastValue() *common.ReduceDataOptionsBuilder {
	return common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false).Fields("")
}

// verdictMappings name the values of node_namespace_service:localtraffic_verdict:max (alerts/rules.yaml).
func verdictMappings() []dashboard.ValueMapping {
	return []dashboard.ValueMapping{valueMap(map[string]dashboard.ValueMappingResult{
		"0": mapResult("serving", "green", 0),
		"1": mapResult("out of rotation", "blue", 1),
		"2": mapResult("BLACKHOLE", "red", 2),
	})}
}

func valueMap(options map[string]dashboard.ValueMappingResult) dashboard.ValueMapping {
	return dashboard.ValueMapping{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: options}}
}

func mapResult(text, color string, index int32) dashboard.ValueMappingResult {
	return dashboard.ValueMappingResult{Text: cog.ToPtr(text), Color: cog.ToPtr(color), Index: cog.ToPtr(index)}
}
