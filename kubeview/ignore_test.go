package kubeview

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestIgnoredReason(t *testing.T) {
	sel, err := labels.Parse("team=legacy,tier!=edge")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 300)
	cases := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		sel         labels.Selector
		want        string
		ignored     bool
	}{
		{"nothing", nil, nil, sel, "", false},
		{"annotation with a reason", nil, map[string]string{AnnotationIntentionalPlacement: "  GPU nodes only,\n  clients use node-1 "}, nil,
			"GPU nodes only, clients use node-1", true},
		{"empty annotation", nil, map[string]string{AnnotationIntentionalPlacement: ""}, nil, noReason, true},
		{"other annotation", nil, map[string]string{"localtraffic.io/other": "x"}, nil, "", false},
		{"selector matches", map[string]string{"team": "legacy"}, nil, sel, "ignore selector team=legacy,tier!=edge", true},
		{"selector does not match", map[string]string{"team": "legacy", "tier": "edge"}, nil, sel, "", false},
		{"nil selector", map[string]string{"team": "legacy"}, nil, nil, "", false},
		{"empty selector selects nothing", map[string]string{"team": "legacy"}, nil, labels.Everything(), "", false},
		{"annotation wins over the selector", map[string]string{"team": "legacy"}, map[string]string{AnnotationIntentionalPlacement: "pinned"}, sel, "pinned", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Labels: c.labels, Annotations: c.annotations}}
			got, ignored := IgnoredReason(svc, c.sel)
			if got != c.want || ignored != c.ignored {
				t.Errorf("IgnoredReason = %q, %v; want %q, %v", got, ignored, c.want, c.ignored)
			}
		})
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationIntentionalPlacement: long}}}
	got, _ := IgnoredReason(svc, nil)
	if n := utf8.RuneCountInString(got); n != maxIgnoredReason || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Errorf("a 300-character reason becomes %d characters %q, want %d ending in …", n, got, maxIgnoredReason)
	}
}

// The informer transform keeps the annotation and the labels the ignore selector reads (and nothing else of
// either), and is idempotent.
func TestTransformServiceKeepsWhatIgnoringReads(t *testing.T) {
	svc := localService("shop", "web", corev1.ServiceTypeNodePort)
	svc.Labels = map[string]string{"team": "legacy", "app": "web", labelServiceProxyName: "other"}
	svc.Annotations = map[string]string{AnnotationIntentionalPlacement: "pinned to the GPU node",
		"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)}
	transform := TransformService("team", "tier")
	out, err := transform(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if fmt.Sprint(got.Labels) != fmt.Sprint(map[string]string{"team": "legacy", labelServiceProxyName: "other"}) {
		t.Errorf("labels %v, want team and %s only", got.Labels, labelServiceProxyName)
	}
	if fmt.Sprint(got.Annotations) != fmt.Sprint(map[string]string{AnnotationIntentionalPlacement: "pinned to the GPU node"}) {
		t.Errorf("annotations %v, want %s only", got.Annotations, AnnotationIntentionalPlacement)
	}
	again, _ := transform(got)
	if a := again.(*corev1.Service); fmt.Sprint(a.Labels, a.Annotations) != fmt.Sprint(got.Labels, got.Annotations) {
		t.Errorf("second transform changed %v %v into %v %v", got.Labels, got.Annotations, a.Labels, a.Annotations)
	}
	plain, _ := TransformService()(localService("shop", "plain", corev1.ServiceTypeNodePort))
	if p := plain.(*corev1.Service); p.Labels != nil || p.Annotations != nil {
		t.Errorf("a Service with neither keeps labels %v, annotations %v; want nil maps", p.Labels, p.Annotations)
	}
}

// Through real informers: the annotation and the selector mark Services ignored, which are still counted; a
// change of either is followed.
func TestViewIgnoredServices(t *testing.T) {
	sel, err := labels.Parse("localtraffic.io/excluded=true")
	if err != nil {
		t.Fatal(err)
	}
	annotated := localService("shop", "pinned", corev1.ServiceTypeNodePort)
	annotated.Annotations = map[string]string{AnnotationIntentionalPlacement: "licensed on node-2 only"}
	selected := localService("shop", "legacy", corev1.ServiceTypeNodePort)
	selected.Labels = map[string]string{"localtraffic.io/excluded": "true"}
	plain := localService("shop", "web", corev1.ServiceTypeNodePort)
	v, client := startViewWith(t, "node-1", []Option{WithIgnoreSelector(sel)}, node("node-1"), annotated, selected, plain,
		slice("shop", "pinned", "pinned-abc", nil, readyOn("10.0.0.1", "node-1")))
	reasons := func(want map[string]string) func(Snapshot) error {
		return func(s Snapshot) error {
			got := map[string]string{}
			for _, st := range s.Services {
				if st.Ignored {
					got[st.Name] = st.IgnoredReason
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("ignored %v, want %v", got, want)
			}
			return nil
		}
	}
	snap := eventually(t, v, reasons(map[string]string{"pinned": "licensed on node-2 only", "legacy": "ignore selector localtraffic.io/excluded=true"}))
	if st, _ := findService(snap, "shop", "pinned"); st.LocalEndpoints() != 1 {
		t.Errorf("an ignored Service is still measured: %d local endpoints, want 1", st.LocalEndpoints())
	}
	// The owner takes the annotation off and labels the plain one.
	ctx := context.Background()
	annotated.Annotations = nil
	plain.Labels = map[string]string{"localtraffic.io/excluded": "true"}
	for _, s := range []*corev1.Service{annotated, plain} {
		if _, err := client.CoreV1().Services("shop").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, v, reasons(map[string]string{"legacy": "ignore selector localtraffic.io/excluded=true", "web": "ignore selector localtraffic.io/excluded=true"}))
}
