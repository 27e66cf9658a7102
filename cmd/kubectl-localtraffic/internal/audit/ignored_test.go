package audit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	gosarif "github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
	"github.com/xeipuuv/gojsonschema"
)

// audit reports an annotated Service's findings as ignored, with their severity and the reason; they do not
// fail --fail-on, whatever its level; SARIF has them as suppressed notes and still validates.
func TestAuditIgnored(t *testing.T) {
	objs := clitest.IgnoredDrill("licensed on node-1 only")
	r := invoke(t, "", nil, false, objs, "audit", "-A", "--fail-on", "info")
	if r.Code != 0 {
		t.Errorf("exit %d, want 0: every finding is an ignored Service's", r.Code)
	}
	for _, want := range []string{
		"ignored: licensed on node-1 only (localtraffic.io/intentional-placement): its findings are reported, not failing",
		"IGNORED (critical) LT100 blackhole-now", "IGNORED (critical) LT101 pinned-placement",
		"1 Local Services: 0 critical, 0 warning, 0 info, 3 ignored",
	} {
		if !strings.Contains(r.Out, want) {
			t.Errorf("audit output lacks %q:\n%s", want, r.Out)
		}
	}
	r = invoke(t, "", nil, false, objs, "audit", "-A", "-o", "sarif")
	if r.Code != 0 {
		t.Errorf("sarif: exit %d", r.Code)
	}
	res, err := gojsonschema.Validate(sarifSchema210(t), gojsonschema.NewStringLoader(r.Out))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors() {
		t.Errorf("schema: %s", e)
	}
	rep, err := gosarif.FromString(r.Out)
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
	if r := invoke(t, "", nil, false, drillObjects(true), "audit", "-A", "-o", "sarif"); r.Code != 1 || strings.Contains(r.Out, "suppressions") {
		t.Errorf("unannotated: exit %d, suppressions in %s", r.Code, r.Out)
	}
}
