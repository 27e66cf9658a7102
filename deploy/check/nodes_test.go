package check

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// The nodes the exporter cannot run on: Windows (kube-proxy's winkernel mode, a Linux image)
// and virtual nodes (virtual-kubelet's type=virtual-kubelet, EKS Fargate's compute-type=fargate: no host
// network, no kube-proxy). Every pod template the project ships keeps off them, so no scrape target exists there
// that could never be up (LocalTrafficExporterDown).

// linuxMachines is the placement every shipped pod template carries, and all of it the DaemonSet carries.
var (
	linuxSelector    = map[string]string{corev1.LabelOSStable: "linux"}
	notVirtualAffine = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"virtual-kubelet"}},
				{Key: "eks.amazonaws.com/compute-type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"fargate"}},
			},
		}}},
	}}
)

// podSpecs returns the pod templates of objs (workloads, jobs, cron jobs, bare pods), by object.
func podSpecs(t *testing.T, objs []*yaml.RNode) map[string]corev1.PodSpec {
	t.Helper()
	out := map[string]corev1.PodSpec{}
	for _, o := range objs {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			Spec struct {
				corev1.PodSpec
				Template    *corev1.PodTemplateSpec `json:"template"`
				JobTemplate *struct {
					Spec struct {
						Template corev1.PodTemplateSpec `json:"template"`
					} `json:"spec"`
				} `json:"jobTemplate"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		key := o.GetKind() + " " + o.GetName()
		switch {
		case obj.Spec.Template != nil:
			out[key] = obj.Spec.Template.Spec
		case obj.Spec.JobTemplate != nil:
			out[key] = obj.Spec.JobTemplate.Spec.Template.Spec
		case o.GetKind() == "Pod":
			out[key] = obj.Spec.PodSpec
		}
	}
	return out
}

// runsOnLinuxMachines: the spec selects Linux and requires a node that is not virtual.
func runsOnLinuxMachines(spec corev1.PodSpec) error {
	if spec.NodeSelector[corev1.LabelOSStable] != "linux" {
		return fmt.Errorf("nodeSelector %v does not select %s: linux", spec.NodeSelector, corev1.LabelOSStable)
	}
	want := notVirtualAffine.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return fmt.Errorf("no required node affinity keeping it off virtual nodes")
	}
	// Terms are ORed: each must exclude virtual nodes.
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, w := range want {
			found := false
			for _, e := range term.MatchExpressions {
				found = found || reflect.DeepEqual(e, w)
			}
			if !found {
				return fmt.Errorf("node selector term %+v does not require %s %s %v", term, w.Key, w.Operator, w.Values)
			}
		}
	}
	return nil
}

// TestEveryPodRunsOnLinuxMachinesOnly: every kustomization under deploy/ and the chart (defaults, and every
// switch on) ship pod templates that select Linux and keep off virtual nodes.
func TestEveryPodRunsOnLinuxMachinesOnly(t *testing.T) {
	root := filepath.Join(repoRoot(t), "deploy")
	rendered := map[string][]*yaml.RNode{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		rendered["kustomize "+dir] = render(t, dir)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rendered["helm defaults"] = mustRenderChart(t, nil)
	rendered["helm every switch"] = mustRenderChart(t, values(t, `
namespace: {create: true}
podMonitor: {enabled: true}
serviceMonitor: {enabled: true}
prometheusRule: {enabled: true}
dashboards: {enabled: true}
webConfig: {existingSecret: web}
kubeRBACProxy: {enabled: false}
`))
	pods := 0
	for what, objs := range rendered {
		for obj, spec := range podSpecs(t, objs) {
			pods++
			if err := runsOnLinuxMachines(spec); err != nil {
				t.Errorf("%s: %s: %v", what, obj, err)
			}
		}
	}
	if pods < 5 {
		t.Errorf("%d pod templates in %d renderings: the walk found too few to check", pods, len(rendered))
	}
}
