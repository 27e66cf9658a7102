package audit

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// audit prints through cli-runtime's printers as status does: -o yaml is the report with apiVersion and kind, -o
// name one line per Service, jsonpath works on the document; its own formats (text, sarif) stay; a format it does
// not take is bad input naming every format, before anything is read. (drain-check's: TestDrainCheckPrinters.)
func TestAuditPrinters(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "audit", "-n", "kubelings", "-o", "yaml")
	var a AuditReport
	if err := yaml.UnmarshalStrict([]byte(r.Out), &a); err != nil || r.Code != cli.ExitFindings || a.APIVersion != "localtraffic.io/v1alpha1" ||
		a.Kind != "AuditReport" || len(a.Services) != 1 || a.Worst() != placement.Critical {
		t.Errorf("audit -o yaml: exit %d, %v:\n%s%s", r.Code, err, r.Out, r.ErrOut)
	}
	for _, c := range []struct {
		args       []string
		code       int
		want       string
		wantPrefix bool
	}{
		{[]string{"audit", "-n", "kubelings", "-o", "name"}, cli.ExitFindings, "serviceaudit.localtraffic.io/checkout\n", false},
		{[]string{"audit", "-n", "kubelings", "-o", "jsonpath={.kind} {.services[0].findings[0].id}"}, cli.ExitFindings, "AuditReport LT100", false},
		{[]string{"audit", "-n", "kubelings", "-o", "sarif"}, cli.ExitFindings, "{", true},
		{[]string{"audit", "-n", "kubelings"}, cli.ExitFindings, "kubelings/checkout", true},
	} {
		r := invoke(t, "", nil, false, drillObjects(true), c.args...)
		ok := r.Out == c.want || c.wantPrefix && strings.HasPrefix(r.Out, c.want)
		if r.Code != c.code || !ok {
			t.Errorf("%v: exit %d %q (%s); want %d and %q", c.args, r.Code, r.Out, r.ErrOut, c.code, c.want)
		}
	}
	args, want := []string{"audit", "-n", "kubelings", "-o", "xml"}, `unknown output format "xml" for audit: text, sarif, json, yaml`
	if r := invoke(t, "", nil, false, nil, args...); r.Code != cli.ExitError || !strings.Contains(r.ErrOut, want) || r.Out != "" {
		t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, r.Code, r.Out, r.ErrOut, want)
	}
}

// DeepCopyObject copies the document whole and apart: the copy equals the original, and changing it changes
// nothing of the original.
func TestDocumentsDeepCopy(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "audit", "-n", "kubelings", "-o", "json")
	var a AuditReport
	if err := yaml.UnmarshalStrict([]byte(r.Out), &a); err != nil || len(a.Services) == 0 || len(a.Services[0].Findings) == 0 {
		t.Fatalf("audit -o json: %v\n%s", err, r.Out)
	}
	c := a.DeepCopyObject().(*AuditReport)
	if !reflect.DeepEqual(c, &a) {
		t.Fatalf("copy differs:\n%+v\n%+v", c, a)
	}
	c.Services[0].Findings[0].Nodes[0] = "changed"
	if a.Services[0].Findings[0].Nodes[0] == "changed" {
		t.Error("the copy shares the original's slices")
	}
}
