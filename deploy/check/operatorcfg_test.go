package check

// The scrape job prometheus-operator generates for a ServiceMonitor or PodMonitor, transcribed from the config
// generator of prometheus-operator v0.93.0: its ServiceMonitor, PodMonitor, Kubernetes discovery and relabel
// configuration and its namespace labeler's enforcement, for the fields the shipped monitors use. The operator's package itself cannot
// be a dependency here: it needs prom-label-proxy, which does not build against the Prometheus the workspace
// holds (alerts/ pins a newer one than the operator's). monitorFields refuses any field this transcription does
// not model, so a monitor gaining one fails the test instead of being checked half.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/config"
	corev1 "k8s.io/api/core/v1"
	kptr "k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// promSettings are the Prometheus resource's fields that change a monitor's job.
type promSettings struct {
	// serviceDiscoveryRole is the Prometheus resource's default for ServiceMonitors (the operator's default:
	// Endpoints).
	serviceDiscoveryRole monitoringv1.ServiceDiscoveryRole
	overrideHonorLabels  bool
	// enforcedNamespaceLabel, when set, is set to the monitor's namespace on every target and series, last.
	enforcedNamespaceLabel   string
	ignoreNamespaceSelectors bool
}

// modelled are the fields of a monitor's spec and endpoint that operatorJob turns into configuration.
var modelled = map[string][]string{
	"spec":     {"serviceDiscoveryRole", "sampleLimit", "selector", "namespaceSelector", "endpoints", "podMetricsEndpoints"},
	"endpoint": {"port", "path", "interval", "scrapeTimeout", "scheme", "tlsConfig", "bearerTokenFile", "authorization", "honorLabels", "relabelings", "metricRelabelings"},
	"selector": {"matchLabels"},
	// Within an endpoint.
	"tlsConfig":     {"insecureSkipVerify"},
	"authorization": {"type", "credentials"},
}

// monitorFields fails the test for a field of the monitor that operatorJob does not model.
func monitorFields(t *testing.T, monitor any) {
	t.Helper()
	b, err := json.Marshal(monitor)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Spec map[string]json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	check := func(what string, fields map[string]json.RawMessage) {
		for f, v := range fields {
			// The API types marshal some unset fields (structs) as empty values: only a set field counts.
			if empty := []string{"{}", "null", "[]", `""`, "false", "0"}; slices.Contains(empty, string(v)) {
				continue
			}
			if !slices.Contains(modelled[what], f) {
				t.Errorf("the monitor's %s has %s, which the transcription of the operator's config generator does not model", what, f)
			}
		}
	}
	check("spec", m.Spec)
	var sel map[string]json.RawMessage
	if err := json.Unmarshal(m.Spec["selector"], &sel); err != nil {
		t.Fatal(err)
	}
	check("selector", sel)
	for _, key := range []string{"endpoints", "podMetricsEndpoints"} {
		var eps []map[string]json.RawMessage
		if raw, ok := m.Spec[key]; ok {
			if err := json.Unmarshal(raw, &eps); err != nil {
				t.Fatal(err)
			}
		}
		for _, ep := range eps {
			check("endpoint", ep)
			for _, nested := range []string{"tlsConfig", "authorization"} {
				var fields map[string]json.RawMessage
				if raw, ok := ep[nested]; ok {
					if err := json.Unmarshal(raw, &fields); err != nil {
						t.Fatal(err)
					}
				}
				check(nested, fields)
			}
		}
	}
}

type relabelRule = map[string]any

// relabelRules is generateRelabelConfig: the operator's RelabelConfig as Prometheus' relabel_configs.
func relabelRules(rc []monitoringv1.RelabelConfig) []relabelRule {
	var out []relabelRule
	for _, c := range rc {
		r := relabelRule{}
		if len(c.SourceLabels) > 0 {
			r["source_labels"] = c.SourceLabels
		}
		if c.Separator != nil {
			r["separator"] = *c.Separator
		}
		if c.TargetLabel != "" {
			r["target_label"] = c.TargetLabel
		}
		if c.Regex != "" {
			r["regex"] = c.Regex
		}
		if c.Modulus != 0 {
			r["modulus"] = c.Modulus
		}
		if c.Replacement != nil {
			r["replacement"] = *c.Replacement
		}
		if c.Action != "" {
			r["action"] = strings.ToLower(c.Action)
		}
		out = append(out, r)
	}
	return out
}

// enforced is the namespace labeler's rule, appended after the user's relabelings and metric relabelings.
func (p promSettings) enforced(rules []relabelRule, ns string) []relabelRule {
	if p.enforcedNamespaceLabel == "" {
		return rules
	}
	return append(rules, relabelRule{"target_label": p.enforcedNamespaceLabel, "replacement": ns})
}

// namespaces is getNamespacesFromNamespaceSelector.
func (p promSettings) namespaces(sel monitoringv1.NamespaceSelector, own string) []string {
	switch {
	case p.ignoreNamespaceSelectors:
		return []string{own}
	case sel.Any:
		return nil
	case len(sel.MatchNames) == 0:
		return []string{own}
	}
	return sel.MatchNames
}

// selectorKeeps are the keep rules of a matchLabels selector over the service's or pod's labels.
func selectorKeeps(kind string, matchLabels map[string]string) []relabelRule {
	var keys []string
	for k := range matchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []relabelRule
	for _, k := range keys {
		name := sanitize(k)
		out = append(out, relabelRule{"action": "keep",
			"source_labels": []string{"__meta_kubernetes_" + kind + "_label_" + name, "__meta_kubernetes_" + kind + "_labelpresent_" + name},
			"regex":         fmt.Sprintf("(%s);true", matchLabels[k])})
	}
	return out
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, name)
}

// scrapeSettings are the job's HTTP settings of an endpoint: interval, timeout, path, scheme, TLS and
// credentials (a Secret's token read from secrets, as the operator's store does).
func (p promSettings) scrapeSettings(t *testing.T, job map[string]any, ep monitoringv1.Endpoint, ns string, secrets []*corev1.Secret) {
	t.Helper()
	job["honor_labels"] = ep.HonorLabels && !p.overrideHonorLabels
	for key, v := range map[string]string{"scrape_interval": string(ep.Interval), "scrape_timeout": string(ep.ScrapeTimeout), "metrics_path": ep.Path} {
		if v != "" {
			job[key] = v
		}
	}
	if ep.Scheme != nil {
		job["scheme"] = ep.Scheme.String()
	}
	if tls := ep.TLSConfig; tls != nil {
		job["tls_config"] = map[string]any{"insecure_skip_verify": kptr.Deref(tls.InsecureSkipVerify, false)}
	}
	// The deprecated field is the shipped ServiceMonitor's way to send Prometheus' own token; the operator still
	// writes it into the job.
	//lint:ignore SA1019 see above
	if token := ep.BearerTokenFile; token != "" {
		job["bearer_token_file"] = token
	}
	if a := ep.Authorization; a != nil && a.Credentials != nil {
		var token string
		for _, s := range secrets {
			if s.Namespace == ns && s.Name == a.Credentials.Name {
				token = string(s.Data[a.Credentials.Key])
			}
		}
		if token == "" {
			t.Fatalf("the monitor's authorization names Secret %s/%s key %s, which the test does not hold", ns, a.Credentials.Name, a.Credentials.Key)
		}
		job["authorization"] = map[string]any{"type": cmpOr(a.Type, "Bearer"), "credentials": token}
	}
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// serviceMonitorJob is generateServiceMonitorConfig for the monitor's first endpoint.
func (p promSettings) serviceMonitorJob(t *testing.T, m *monitoringv1.ServiceMonitor, secrets ...*corev1.Secret) *config.ScrapeConfig {
	t.Helper()
	monitorFields(t, m)
	ep := m.Spec.Endpoints[0]
	job := map[string]any{"job_name": fmt.Sprintf("serviceMonitor/%s/%s/0", m.Namespace, m.Name)}
	role := "endpoints"
	if kptr.Deref(m.Spec.ServiceDiscoveryRole, p.serviceDiscoveryRole) == monitoringv1.EndpointSliceRole {
		role = "endpointslice"
	}
	job["kubernetes_sd_configs"] = []any{p.sdConfig(role, m.Spec.NamespaceSelector, m.Namespace)}
	p.scrapeSettings(t, job, ep, m.Namespace, secrets)
	meta := "__meta_kubernetes_" + map[string]string{"endpoints": "endpoint", "endpointslice": "endpointslice"}[role]
	rules := []relabelRule{{"source_labels": []string{"job"}, "target_label": "__tmp_prometheus_job_name"}}
	rules = append(rules, selectorKeeps("service", m.Spec.Selector.MatchLabels)...)
	if ep.Port != "" {
		rules = append(rules, relabelRule{"action": "keep", "source_labels": []string{meta + "_port_name"}, "regex": ep.Port})
	}
	target := []string{meta + "_address_target_kind", meta + "_address_target_name"}
	rules = append(rules,
		relabelRule{"source_labels": target, "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
		relabelRule{"source_labels": target, "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
		relabelRule{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		relabelRule{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
		relabelRule{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		relabelRule{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
		relabelRule{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"},
		relabelRule{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
	)
	if ep.Port != "" {
		rules = append(rules, relabelRule{"target_label": "endpoint", "replacement": ep.Port})
	}
	return p.finish(t, job, rules, ep.RelabelConfigs, ep.MetricRelabelConfigs, m.Spec.SampleLimit, m.Namespace)
}

// podMonitorJob is generatePodMonitorConfig for the monitor's first endpoint.
func (p promSettings) podMonitorJob(t *testing.T, m *monitoringv1.PodMonitor, secrets ...*corev1.Secret) *config.ScrapeConfig {
	t.Helper()
	monitorFields(t, m)
	pep := m.Spec.PodMetricsEndpoints[0]
	job := map[string]any{"job_name": fmt.Sprintf("podMonitor/%s/%s/0", m.Namespace, m.Name)}
	job["kubernetes_sd_configs"] = []any{p.sdConfig("pod", m.Spec.NamespaceSelector, m.Namespace)}
	// The fields the two endpoint types share, through the ServiceMonitor's.
	p.scrapeSettings(t, job, monitoringv1.Endpoint{HonorLabels: pep.HonorLabels, Interval: pep.Interval, ScrapeTimeout: pep.ScrapeTimeout,
		Path: pep.Path, Scheme: pep.Scheme, HTTPConfigWithProxyAndTLSFiles: monitoringv1.HTTPConfigWithProxyAndTLSFiles{
			HTTPConfigWithTLSFiles: monitoringv1.HTTPConfigWithTLSFiles{TLSConfig: tlsFiles(pep.TLSConfig),
				HTTPConfigWithoutTLS: pep.HTTPConfigWithoutTLS}}}, m.Namespace, secrets)
	rules := []relabelRule{
		{"source_labels": []string{"job"}, "target_label": "__tmp_prometheus_job_name"},
		{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"},
	}
	rules = append(rules, selectorKeeps("pod", m.Spec.Selector.MatchLabels)...)
	port := kptr.Deref(pep.Port, "")
	if port != "" {
		rules = append(rules, relabelRule{"action": "keep", "source_labels": []string{"__meta_kubernetes_pod_container_port_name"}, "regex": port})
	}
	rules = append(rules,
		relabelRule{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		relabelRule{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
		relabelRule{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		relabelRule{"target_label": "job", "replacement": m.Namespace + "/" + m.Name},
	)
	if port != "" {
		rules = append(rules, relabelRule{"target_label": "endpoint", "replacement": port})
	}
	return p.finish(t, job, rules, pep.RelabelConfigs, pep.MetricRelabelConfigs, m.Spec.SampleLimit, m.Namespace)
}

// tlsFiles is a PodMetricsEndpoint's SafeTLSConfig as the TLSConfig the shared settings read.
func tlsFiles(c *monitoringv1.SafeTLSConfig) *monitoringv1.TLSConfig {
	if c == nil {
		return nil
	}
	return &monitoringv1.TLSConfig{SafeTLSConfig: *c}
}

// sdConfig is generateK8SSDConfig without an API server section (in-cluster) or attached metadata.
func (p promSettings) sdConfig(role string, sel monitoringv1.NamespaceSelector, ns string) map[string]any {
	sd := map[string]any{"role": role}
	if names := p.namespaces(sel, ns); len(names) > 0 {
		sd["namespaces"] = map[string]any{"names": names}
	}
	return sd
}

// finish appends the user's relabelings, the enforced namespace, the sample limit and the metric relabelings, and
// loads the job into a Prometheus configuration.
func (p promSettings) finish(t *testing.T, job map[string]any, rules []relabelRule, user, metric []monitoringv1.RelabelConfig, sampleLimit *int64, ns string) *config.ScrapeConfig {
	t.Helper()
	job["relabel_configs"] = p.enforced(append(rules, relabelRules(user)...), ns)
	if kptr.Deref(sampleLimit, 0) > 0 {
		job["sample_limit"] = *sampleLimit
	}
	if mr := p.enforced(relabelRules(metric), ns); len(mr) > 0 {
		job["metric_relabel_configs"] = mr
	}
	b, err := sigsyaml.Marshal(map[string]any{"scrape_configs": []any{job}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(string(b), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Prometheus refuses the job: %v\n%s", err, b)
	}
	return cfg.ScrapeConfigs[0]
}
