package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/localtraffic/localtraffic-exporter/alerts/dashquery"
	"github.com/localtraffic/localtraffic-exporter/alerts/metricset"
)

// The live test's Prometheus configuration is the shipped scrape job plus only the apiserver's location and its
// token file.
// (Runs without root or a cluster.)
func TestAlertsPrometheusConfigKeepsTheShippedJob(t *testing.T) {
	repo := alertsRepoDir(t)
	scrape, err := os.ReadFile(filepath.Join(repo, "alerts", "prometheus-scrape.yaml"))
	if err != nil {
		fatalln(t, err)
	}
	out, err := prometheusConfig(scrape, "/tmp/kubeconfig", "/tmp/token", []string{"/r/rules.yaml"}, "127.0.0.1:9093", 5*time.Second)
	if err != nil {
		fatalln(t, err)
	}
	var got struct {
		Global        map[string]any   `json:"global"`
		RuleFiles     []string         `json:"rule_files"`
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		fatalln(t, err)
	}
	shippedJSON, err := utilyaml.ToJSON(scrape)
	if err != nil {
		fatalln(t, err)
	}
	var shipped struct {
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	if err := json.Unmarshal(shippedJSON, &shipped); err != nil {
		fatalln(t, err)
	}
	if len(got.ScrapeConfigs) != len(shipped.ScrapeConfigs) || len(got.ScrapeConfigs) == 0 {
		fatalf(t, "scrape configs: got %d, shipped %d", len(got.ScrapeConfigs), len(shipped.ScrapeConfigs))
	}
	for i, job := range got.ScrapeConfigs {
		for _, sd := range job["kubernetes_sd_configs"].([]any) {
			m := sd.(map[string]any)
			if m["kubeconfig_file"] != "/tmp/kubeconfig" {
				errorf(t, "job %v: kubeconfig_file %v", job["job_name"], m["kubeconfig_file"])
			}
			delete(m, "kubeconfig_file")
		}
		// The token: Prometheus' own ServiceAccount token for kube-rbac-proxy, from the test's file.
		auth, _ := job["authorization"].(map[string]any)
		if auth["credentials_file"] != "/tmp/token" {
			errorf(t, "job %v: authorization %v, want credentials_file /tmp/token", job["job_name"], auth)
		}
		auth["credentials_file"] = shipped.ScrapeConfigs[i]["authorization"].(map[string]any)["credentials_file"]
		if !reflect.DeepEqual(job, shipped.ScrapeConfigs[i]) {
			errorf(t, "job %v differs from the shipped one beyond kubeconfig_file:\n%v\n%v", job["job_name"], job, shipped.ScrapeConfigs[i])
		}
	}
	if got.ScrapeConfigs[0]["job_name"] != "localtraffic-exporter" || got.ScrapeConfigs[0]["honor_labels"] != true ||
		got.ScrapeConfigs[0]["scheme"] != "https" {
		errorf(t, "shipped job: name %v, honor_labels %v, scheme %v: want localtraffic-exporter, true, https (kube-rbac-proxy)",
			got.ScrapeConfigs[0]["job_name"], got.ScrapeConfigs[0]["honor_labels"], got.ScrapeConfigs[0]["scheme"])
	}
	if got.Global["evaluation_interval"] != "5s" || !reflect.DeepEqual(got.RuleFiles, []string{"/r/rules.yaml"}) {
		errorf(t, "global %v, rule files %v", got.Global, got.RuleFiles)
	}
}

// The live test reads every query of the shipped dashboards; here, that it finds them all.
func TestAlertsDashboardQueriesFound(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(alertsRepoDir(t), "dashboards", "localtraffic-exporter.json"))
	if err != nil {
		fatalln(t, err)
	}
	qs, err := dashquery.Queries(data)
	if err != nil {
		fatalln(t, err)
	}
	// Panel targets, and each query variable (counted from the dashboard, not assumed: the node variable
	// came after the first three).
	var d struct {
		Templating struct {
			List []struct{ Type string } `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		fatalln(t, err)
	}
	vars := 0
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			vars++
		}
	}
	if want := strings.Count(string(data), `"expr":`) + vars; len(qs) != want || vars < 4 {
		errorf(t, "found %d queries, want %d (%d query variables, the node variable among them)", len(qs), want, vars)
	}
	for _, q := range qs {
		if e := dashquery.Expand(q.Expr); strings.Contains(e, "$") {
			errorf(t, "%s: unexpanded variable in %q", q.Where, e)
		}
	}
}

// The live test finds the opt-in metrics (package metricset) and the alert expressions it evaluates.
func TestAlertsLiveInputsFound(t *testing.T) {
	repo := alertsRepoDir(t)
	optIn := metricset.OptIn()
	for _, want := range []string{"localtraffic_service_info", "localtraffic_has_local_endpoint", "localtraffic_health_check_result"} {
		found := false
		for _, n := range optIn {
			found = found || n == want
		}
		if !found {
			errorf(t, "opt-in metrics %v lack %s", optIn, want)
		}
	}
	for _, a := range []string{"LocalTrafficServiceSingleNode", "LocalTrafficOutOfRotationNodeDropsTraffic"} {
		if expr, err := alertExpr(repo, alertRuleFiles[1], a); err != nil || expr == "" {
			errorf(t, "%s: %q %v", a, expr, err)
		}
	}
}
