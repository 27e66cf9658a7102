package main

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// audit and drain-check print through status's printers: -o yaml is the report with apiVersion and kind, -o name
// one line per Service, jsonpath and go-template work on the document; their own formats (text, sarif) stay; a
// format none takes is bad input naming every format, before anything is read.
func TestAuditAndDrainCheckPrinters(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "audit", "-n", "kubelings", "-o", "yaml")
	var a AuditReport
	if err := yaml.UnmarshalStrict([]byte(r.out), &a); err != nil || r.code != cli.ExitFindings || a.APIVersion != "localtraffic.io/v1alpha1" ||
		a.Kind != "AuditReport" || len(a.Services) != 1 || a.Worst() != placement.Critical {
		t.Errorf("audit -o yaml: exit %d, %v:\n%s%s", r.code, err, r.out, r.errOut)
	}
	objs := append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
	r = invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "-o", "yaml")
	var d DrainReport
	if err := yaml.UnmarshalStrict([]byte(r.out), &d); err != nil || r.code != cli.ExitClean || d.Kind != "DrainReport" ||
		d.APIVersion != "localtraffic.io/v1alpha1" || d.Node != "node-1" || len(d.Services) != 1 || d.Services[0].ServingAfter != 2 {
		t.Errorf("drain-check -o yaml: exit %d, %v:\n%s%s", r.code, err, r.out, r.errOut)
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
		{[]string{"drain-check", "node-1", "-n", "kubelings", "-o", "name"}, cli.ExitClean, "drainservice.localtraffic.io/checkout\n", false},
		{[]string{"drain-check", "node-1", "-n", "kubelings", "-o", "go-template={{.kind}} {{range .services}}{{.servingAfter}}{{end}}"}, cli.ExitClean, "DrainReport 2", false},
		{[]string{"drain-check", "node-1", "-n", "kubelings", "-o", "json"}, cli.ExitClean, "{\n    \"kind\": \"DrainReport\",\n    \"apiVersion\": \"localtraffic.io/v1alpha1\",", true},
	} {
		objs := drillObjects(true)
		if c.args[0] == "drain-check" {
			objs = append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
		}
		r := invoke(t, "", nil, false, objs, c.args...)
		ok := r.out == c.want || c.wantPrefix && strings.HasPrefix(r.out, c.want)
		if r.code != c.code || !ok {
			t.Errorf("%v: exit %d %q (%s); want %d and %q", c.args, r.code, r.out, r.errOut, c.code, c.want)
		}
	}
	for cmd, want := range map[string]string{
		"audit":       `unknown output format "xml" for audit: text, sarif, json, yaml`,
		"drain-check": `unknown output format "xml" for drain-check: text, json, yaml`,
	} {
		args := []string{cmd, "-n", "kubelings", "-o", "xml"}
		if cmd == "drain-check" {
			args = append(args, "node-1")
		}
		if r := invoke(t, "", nil, false, nil, args...); r.code != cli.ExitError || !strings.Contains(r.errOut, want) || r.out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, r.code, r.out, r.errOut, want)
		}
	}
}

// DeepCopyObject copies the documents whole and apart: the copy equals the original, and changing it changes
// nothing of the original.
func TestDocumentsDeepCopy(t *testing.T) {
	r := invoke(t, "", nil, false, drillObjects(true), "audit", "-n", "kubelings", "-o", "json")
	var a AuditReport
	if err := yaml.UnmarshalStrict([]byte(r.out), &a); err != nil || len(a.Services) == 0 || len(a.Services[0].Findings) == 0 {
		t.Fatalf("audit -o json: %v\n%s", err, r.out)
	}
	c := a.DeepCopyObject().(*AuditReport)
	if !reflect.DeepEqual(c, &a) {
		t.Fatalf("copy differs:\n%+v\n%+v", c, a)
	}
	c.Services[0].Findings[0].Nodes[0] = "changed"
	if a.Services[0].Findings[0].Nodes[0] == "changed" {
		t.Error("the copy shares the original's slices")
	}
	d := &DrainReport{TypeMeta: cli.TypeMeta("DrainReport"), DrainReport: placement.DrainReport{Node: "node-1",
		Services: []placement.DrainService{{Name: "checkout", Elsewhere: []string{"node-2"}, Observed: map[string][]string{"traffic_lost": {"node-3"}}}}}}
	dc := d.DeepCopyObject().(*DrainReport)
	if !reflect.DeepEqual(dc, d) {
		t.Fatalf("drain copy differs:\n%+v\n%+v", dc, d)
	}
	dc.Services[0].Observed["traffic_lost"][0] = "changed"
	if d.Services[0].Observed["traffic_lost"][0] == "changed" {
		t.Error("the drain copy shares the original's map")
	}
}
