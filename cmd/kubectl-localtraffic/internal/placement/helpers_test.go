package placement

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Builders in the shapes the drill uses: namespace kubelings, app checkout, NodePort 30090.

const ns = "kubelings"

func nodePortService(name string, mods ...func(*corev1.Service)) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10",
			Selector:              map[string]string{"app": name},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80,
				TargetPort: intstr.FromInt32(8080), NodePort: 30090}},
		},
	}
	for _, m := range mods {
		m(svc)
	}
	return svc
}

func loadBalancer(svc *corev1.Service) {
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.HealthCheckNodePort = 32000
}

func annotated(kv ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func template(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: app, Image: "registry.k8s.io/e2e-test-images/agnhost:2.53",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
	}
}

func deployment(name string, replicas int32, mods ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template(name),
		},
	}
	for _, m := range mods {
		m(d)
	}
	return d
}

func pinnedTo(node string) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
}

// drillFix is the drill's fix: no pin, a hard hostname spread with Honor, maxSurge 0.
func drillFix(d *appsv1.Deployment) {
	d.Spec.Template.Spec.NodeSelector = nil
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
	spread(true)(d)
}

func spread(honor bool) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		c := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": d.Name}}}
		if honor {
			c.NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
		}
		d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{c}
	}
}

func maxSurge(s int32) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) {
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(s)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
	}
}

func daemonSet(name string, mods ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	d := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: template(name),
		},
	}
	for _, m := range mods {
		m(d)
	}
	return d
}

func workers(n int) []*corev1.Node { return SyntheticNodes(n) }

// controlPlane is a tainted control-plane node, as kubeadm makes one (optionally excluded from load balancers).
func controlPlane(excluded bool) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "control-plane", Labels: map[string]string{
			corev1.LabelHostname: "control-plane", "node-role.kubernetes.io/control-plane": ""}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if excluded {
		n.Labels[corev1.LabelNodeExcludeBalancers] = ""
	}
	return n
}

// readyPods returns the Pods and the EndpointSlice the controllers would write for replicas on these nodes.
func readyPods(d *appsv1.Deployment, svc *corev1.Service, nodes ...string) ([]*corev1.Pod, []*appsv1.ReplicaSet, *discoveryv1.EndpointSlice) {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-5d8f7c", UID: types.UID("uid-rs-" + d.Name),
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: d.Name, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: d.Spec.Replicas, Template: d.Spec.Template},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	var pods []*corev1.Pod
	for i, n := range nodes {
		name := fmt.Sprintf("%s-%d", rs.Name, i)
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: name, UID: types.UID("uid-" + name),
				Labels:          d.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs.Name, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: n},
		})
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/200, i%200+10)}, NodeName: ptr.To(n),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return pods, []*appsv1.ReplicaSet{rs}, slice
}

func hpa(target string, minReplicas int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: target},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    ptr.To(minReplicas), MaxReplicas: 10,
		},
	}
}

func pdb(app string, maxUnavailable intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &maxUnavailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}
}

// ids returns the finding IDs of the report, with their severities, sorted: "LT101:critical".
func ids(r Report) []string {
	var out []string
	for _, f := range r.Findings() {
		out = append(out, string(f.ID)+":"+f.Severity.String())
	}
	sort.Strings(out)
	return out
}

func find(t *testing.T, r Report, id RuleID) Finding {
	t.Helper()
	for _, f := range r.Findings() {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("no %s finding in %v", id, ids(r))
	return Finding{}
}

func wantIDs(t *testing.T, r Report, want ...string) {
	t.Helper()
	got := ids(r)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("findings %v, want %v", got, want)
		for _, f := range r.Findings() {
			t.Logf("  %s %s: %s", f.ID, f.Severity, f.Message)
		}
	}
}
