package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	gosarif "github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
	"github.com/xeipuuv/gojsonschema"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// ignoredDrill is the pinned drill with its Service annotated as placed on purpose.
func ignoredDrill(reason string) []runtime.Object {
	objs := drillObjects(true)
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.Annotations = map[string]string{kubeview.AnnotationIntentionalPlacement: reason}
		}
	}
	return objs
}

// status shows an annotated Service's drops, marked ignored with the reason, and exits 0 for it.
func TestStatusIgnored(t *testing.T) {
	r := invoke(t, "", nil, false, ignoredDrill("licensed on node-1 only"), "status", "-n", "kubelings")
	if r.code != 0 {
		t.Errorf("exit %d, want 0: the only blackholes are an ignored Service's; stderr %s", r.code, r.errOut)
	}
	if !regexp.MustCompile(`kubelings\s+checkout\s+NodePort\s+Ignored\s+3\s+1\s+2\s+node-2,node-3\n`).MatchString(r.out) {
		t.Errorf("status output lacks the ignored row with its 2 dropping nodes:\n%s", r.out)
	}
	r = invoke(t, "", nil, false, ignoredDrill("licensed on node-1 only"), "status", "-n", "kubelings", "-o", "wide")
	if !regexp.MustCompile(`ok 3\s+drop\s+drop\n`).MatchString(r.out) || regexp.MustCompile(`\sDROP\s`).MatchString(r.out) {
		t.Errorf("the grid shows an ignored Service's drops as failing, or not at all:\n%s", r.out)
	}
	r = invoke(t, "", nil, false, ignoredDrill("licensed on node-1 only"), "status", "-n", "kubelings", "-o", "json")
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Items) != 1 || st.Items[0].Status != "Ignored" ||
		st.Items[0].IgnoredReason != "licensed on node-1 only" || st.Items[0].Dropping != 2 {
		t.Errorf("json %v: %s", err, r.out)
	}
}

// audit reports an annotated Service's findings as ignored, with their severity and the reason; they do not
// fail --fail-on, whatever its level; SARIF has them as suppressed notes and still validates.
func TestAuditIgnored(t *testing.T) {
	objs := ignoredDrill("licensed on node-1 only")
	r := invoke(t, "", nil, false, objs, "audit", "-A", "--fail-on", "info")
	if r.code != 0 {
		t.Errorf("exit %d, want 0: every finding is an ignored Service's", r.code)
	}
	for _, want := range []string{
		"ignored: licensed on node-1 only (localtraffic.io/intentional-placement): its findings are reported, not failing",
		"IGNORED (critical) LT100 blackhole-now", "IGNORED (critical) LT101 pinned-placement",
		"1 Local Services: 0 critical, 0 warning, 0 info, 3 ignored",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("audit output lacks %q:\n%s", want, r.out)
		}
	}
	r = invoke(t, "", nil, false, objs, "audit", "-A", "-o", "sarif")
	if r.code != 0 {
		t.Errorf("sarif: exit %d", r.code)
	}
	res, err := gojsonschema.Validate(sarifSchema210(t), gojsonschema.NewStringLoader(r.out))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors() {
		t.Errorf("schema: %s", e)
	}
	rep, err := gosarif.FromString(r.out)
	if err != nil {
		t.Fatal(err)
	}
	results := rep.Runs[0].Results
	if len(results) != 3 {
		t.Fatalf("%d results, want the 3 findings", len(results))
	}
	for _, res := range results {
		if res.Level != "note" || len(res.Suppressions) != 1 || *res.Suppressions[0].Kind != "inSource" ||
			*res.Suppressions[0].Justification != "localtraffic.io/intentional-placement: licensed on node-1 only" {
			b, _ := json.Marshal(res)
			t.Errorf("result %s: want a note suppressed in source with the reason", b)
		}
	}
	// The same manifests without the annotation fail as before.
	if r := invoke(t, "", nil, false, drillObjects(true), "audit", "-A", "-o", "sarif"); r.code != 1 || strings.Contains(r.out, "suppressions") {
		t.Errorf("unannotated: exit %d, suppressions in %s", r.code, r.out)
	}
}

// status --ignore-selector marks the Services the exporter's --services.ignore-selector selects as ignored,
// with the exporter's reason, and exits 0 for their drops; a Service it does not select fails as before; a
// selector kubectl would not take, or one that selects everything, is bad input.
func TestStatusIgnoreSelector(t *testing.T) {
	objs := drillObjects(true)
	for _, o := range objs {
		if s, ok := o.(*corev1.Service); ok {
			s.Labels = map[string]string{"team": "legacy"}
		}
	}
	r := invoke(t, "", nil, false, objs, "status", "-n", "kubelings", "--ignore-selector", "team=legacy", "-o", "json")
	if r.code != cli.ExitClean || !regexp.MustCompile(`"ignoredReason":\s*"ignore selector team=legacy"`).MatchString(r.out) {
		t.Errorf("selected: exit %d, want 0 with the Service ignored by the selector\n%s%s", r.code, r.out, r.errOut)
	}
	if r := invoke(t, "", nil, false, objs, "status", "-n", "kubelings", "--ignore-selector", "team=shop"); r.code != cli.ExitFindings {
		t.Errorf("not selected: exit %d, want 1\n%s", r.code, r.out)
	}
	for _, bad := range []string{"team==legacy,", " "} {
		r := invoke(t, "", nil, false, objs, "status", "-n", "kubelings", "--ignore-selector", bad)
		if r.code != cli.ExitError || !strings.Contains(r.errOut, "--ignore-selector") || strings.Count(r.errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q", bad, r.code, r.errOut)
		}
	}
}
