package status

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	corev1 "k8s.io/api/core/v1"
)

// status shows an annotated Service's drops, marked ignored with the reason, and exits 0 for it.
func TestStatusIgnored(t *testing.T) {
	r := invoke(t, "", nil, false, clitest.IgnoredDrill("licensed on node-1 only"), "status", "-n", "kubelings")
	if r.Code != 0 {
		t.Errorf("exit %d, want 0: the only blackholes are an ignored Service's; stderr %s", r.Code, r.ErrOut)
	}
	if !regexp.MustCompile(`kubelings\s+checkout\s+NodePort\s+Ignored\s+3\s+1\s+2\s+node-2,node-3\n`).MatchString(r.Out) {
		t.Errorf("status output lacks the ignored row with its 2 dropping nodes:\n%s", r.Out)
	}
	r = invoke(t, "", nil, false, clitest.IgnoredDrill("licensed on node-1 only"), "status", "-n", "kubelings", "-o", "wide")
	if !regexp.MustCompile(`ok 3\s+drop\s+drop\n`).MatchString(r.Out) || regexp.MustCompile(`\sDROP\s`).MatchString(r.Out) {
		t.Errorf("the grid shows an ignored Service's drops as failing, or not at all:\n%s", r.Out)
	}
	r = invoke(t, "", nil, false, clitest.IgnoredDrill("licensed on node-1 only"), "status", "-n", "kubelings", "-o", "json")
	var st ServiceStatusList
	if err := json.Unmarshal([]byte(r.Out), &st); err != nil || len(st.Items) != 1 || st.Items[0].Status != "Ignored" ||
		st.Items[0].IgnoredReason != "licensed on node-1 only" || st.Items[0].Dropping != 2 {
		t.Errorf("json %v: %s", err, r.Out)
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
	if r.Code != cli.ExitClean || !regexp.MustCompile(`"ignoredReason":\s*"ignore selector team=legacy"`).MatchString(r.Out) {
		t.Errorf("selected: exit %d, want 0 with the Service ignored by the selector\n%s%s", r.Code, r.Out, r.ErrOut)
	}
	if r := invoke(t, "", nil, false, objs, "status", "-n", "kubelings", "--ignore-selector", "team=shop"); r.Code != cli.ExitFindings {
		t.Errorf("not selected: exit %d, want 1\n%s", r.Code, r.Out)
	}
	for _, bad := range []string{"team==legacy,", " "} {
		r := invoke(t, "", nil, false, objs, "status", "-n", "kubelings", "--ignore-selector", bad)
		if r.Code != cli.ExitError || !strings.Contains(r.ErrOut, "--ignore-selector") || strings.Count(r.ErrOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q", bad, r.Code, r.ErrOut)
		}
	}
}
