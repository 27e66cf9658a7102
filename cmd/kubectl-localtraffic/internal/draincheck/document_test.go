package draincheck

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// drain-check prints through cli-runtime's printers as status does: -o yaml is the report with apiVersion and
// kind, -o name one line per Service, go-template and json work on the document; its text stays; a format it
// does not take is bad input naming every format, before anything is read.
func TestDrainCheckPrinters(t *testing.T) {
	objs := append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
	r := invoke(t, "", nil, false, objs, "drain-check", "node-1", "-n", "kubelings", "-o", "yaml")
	var d DrainReport
	if err := yaml.UnmarshalStrict([]byte(r.Out), &d); err != nil || r.Code != cli.ExitClean || d.Kind != "DrainReport" ||
		d.APIVersion != "localtraffic.io/v1alpha1" || d.Node != "node-1" || len(d.Services) != 1 || d.Services[0].ServingAfter != 2 {
		t.Errorf("drain-check -o yaml: exit %d, %v:\n%s%s", r.Code, err, r.Out, r.ErrOut)
	}
	for _, c := range []struct {
		args       []string
		code       int
		want       string
		wantPrefix bool
	}{
		{[]string{"drain-check", "node-1", "-n", "kubelings", "-o", "name"}, cli.ExitClean, "drainservice.localtraffic.io/checkout\n", false},
		{[]string{"drain-check", "node-1", "-n", "kubelings", "-o", "go-template={{.kind}} {{range .services}}{{.servingAfter}}{{end}}"}, cli.ExitClean, "DrainReport 2", false},
		{[]string{"drain-check", "node-1", "-n", "kubelings", "-o", "json"}, cli.ExitClean, "{\n    \"kind\": \"DrainReport\",\n    \"apiVersion\": \"localtraffic.io/v1alpha1\",", true},
	} {
		objs := append(behindLoadBalancer(drillObjects(false)), pdbAllowing(1))
		r := invoke(t, "", nil, false, objs, c.args...)
		ok := r.Out == c.want || c.wantPrefix && strings.HasPrefix(r.Out, c.want)
		if r.Code != c.code || !ok {
			t.Errorf("%v: exit %d %q (%s); want %d and %q", c.args, r.Code, r.Out, r.ErrOut, c.code, c.want)
		}
	}
	args, want := []string{"drain-check", "-n", "kubelings", "-o", "xml", "node-1"}, `unknown output format "xml" for drain-check: text, json, yaml`
	if r := invoke(t, "", nil, false, nil, args...); r.Code != cli.ExitError || !strings.Contains(r.ErrOut, want) || r.Out != "" {
		t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, r.Code, r.Out, r.ErrOut, want)
	}
}

// DeepCopyObject copies the document whole and apart: the copy equals the original, and changing it changes
// nothing of the original.
func TestDocumentsDeepCopy(t *testing.T) {
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
