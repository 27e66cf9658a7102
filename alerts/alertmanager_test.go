package alerts

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	amconfig "github.com/prometheus/alertmanager/config"
	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	"github.com/prometheus/common/model"
)

// TestAlertmanagerConfig loads alerts/alertmanager.yaml with Alertmanager's own configuration package (what
// `amtool check-config` runs) and routes alerts through its routing tree: the per-node LocalTrafficBlackhole
// alerts of one Service share one group (one notification), LocalTrafficServiceBlackhole has its own, both go to
// the pager, warnings to tickets, and the one inhibit rule lets the per-Service alert mute the per-node ones of the
// same cluster, namespace and Service only. e2e/alerts_routing_test.go proves the same on a real Alertmanager.
func TestAlertmanagerConfig(t *testing.T) {
	cfg, err := amconfig.LoadFile(filepath.Join(repoRoot(t), AlertmanagerConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	// Alertmanager's routing for a tree of depth one without continue: the first child whose matchers match.
	route := func(ls model.LabelSet) (receiver, group string) {
		for _, r := range cfg.Route.Routes {
			if r.Continue || len(r.Routes) > 0 {
				t.Fatalf("route %+v: the test routes a flat tree without continue", r)
			}
			if !amlabels.Matchers(r.Matchers).Matches(ls) {
				continue
			}
			var key []string
			for _, ln := range r.GroupBy {
				key = append(key, string(ln)+"="+string(ls[ln]))
			}
			slices.Sort(key)
			return r.Receiver, strings.Join(key, ",")
		}
		t.Fatalf("%v reaches no localtraffic route", ls)
		return "", ""
	}
	node := func(alert, sev, n, svc string) model.LabelSet {
		return model.LabelSet{"alertname": model.LabelValue(alert), "severity": model.LabelValue(sev), "node": model.LabelValue(n),
			"namespace": "shop", "service": model.LabelValue(svc), "cluster": "prod"}
	}
	r1, g1 := route(node("LocalTrafficBlackhole", "critical", "n2", "web"))
	r2, g2 := route(node("LocalTrafficBlackhole", "critical", "n3", "web"))
	_, g3 := route(node("LocalTrafficBlackhole", "critical", "n2", "api"))
	svc := node("LocalTrafficServiceBlackhole", "critical", "", "web")
	delete(svc, "node")
	r4, g4 := route(svc)
	rt, _ := route(node("LocalTrafficRulesMismatch", "warning", "n2", "web"))
	if r1 != "localtraffic-pager" || r2 != r1 || r4 != r1 || rt != "localtraffic-tickets" {
		t.Errorf("receivers: blackhole %s, %s, service %s, mismatch %s", r1, r2, r4, rt)
	}
	if g1 != g2 || g1 == g3 || g1 == g4 {
		t.Errorf("groups: n2/web %q, n3/web %q (want the same), n2/api %q, service %q (want others)", g1, g2, g3, g4)
	}
	if want := "alertname=LocalTrafficBlackhole,cluster=prod,namespace=shop,service=web"; g1 != want {
		t.Errorf("group key %q, want %q", g1, want)
	}
	if len(cfg.InhibitRules) != 1 {
		t.Fatalf("%d inhibit rules, want 1", len(cfg.InhibitRules))
	}
	ir := cfg.InhibitRules[0]
	if !amlabels.Matchers(ir.SourceMatchers).Matches(svc) || amlabels.Matchers(ir.TargetMatchers).Matches(svc) ||
		!amlabels.Matchers(ir.TargetMatchers).Matches(node("LocalTrafficBlackhole", "critical", "n2", "web")) ||
		amlabels.Matchers(ir.TargetMatchers).Matches(node("LocalTrafficRulesMismatch", "warning", "n2", "web")) {
		t.Errorf("inhibit rule %+v: want LocalTrafficServiceBlackhole muting LocalTrafficBlackhole only", ir)
	}
	if !slices.Equal(ir.Equal, []string{"cluster", "namespace", "service"}) {
		t.Errorf("inhibit rule equal %v, want cluster, namespace, service", ir.Equal)
	}
}
