package placement

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

const info = "LT110:info" // every NodePort Local Service backed by a Deployment gets the DaemonSet/LoadBalancer advice

func manifests(nodes []*corev1.Node, svc *corev1.Service, objs ...any) *Cluster {
	c := &Cluster{Nodes: nodes, Services: []*corev1.Service{svc}}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			c.Deployments = append(c.Deployments, o)
		case *appsv1.DaemonSet:
			c.DaemonSets = append(c.DaemonSets, o)
		case *appsv1.StatefulSet:
			c.StatefulSets = append(c.StatefulSets, o)
		}
	}
	return c
}

// The drill's pinned Deployment: 3 replicas on node-1, NodePort 30090; node-2 and node-3 blackhole by construction.
func TestDrillPinnedIsCritical(t *testing.T) {
	r := Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, pinnedTo("node-1"))))
	wantIDs(t, r, "LT101:critical", info)
	f := find(t, r, PinnedPlacement)
	if !slices.Equal(f.Nodes, []string{"node-2", "node-3"}) {
		t.Errorf("pinned finding names %v, want node-2, node-3", f.Nodes)
	}
	if !strings.Contains(f.Message, "nodeSelector kubernetes.io/hostname=node-1") || !strings.Contains(f.Fix, `"op":"remove","path":"/spec/template/spec/nodeSelector"`) {
		t.Errorf("message/fix do not name the pin: %q / %q", f.Message, f.Fix)
	}
	if r.Worst() != Critical {
		t.Errorf("worst %v, want critical", r.Worst())
	}
}

// The drill's fix (spread, Honor, maxSurge 0) and a DaemonSet report no warning or worse; the DaemonSet nothing.
func TestDrillFixAndDaemonSetAreClean(t *testing.T) {
	nodes := append(workers(3), controlPlane(true))
	r := Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 3, drillFix)))
	wantIDs(t, r, info)
	r = Audit(manifests(nodes, nodePortService("checkout"), daemonSet("checkout")))
	wantIDs(t, r)
}

// A control-plane node that receives NodePort traffic (not excluded) but whose taint keeps the replicas off is
// a blackhole too: the exporter on it would say so.
func TestTaintedNodeThatReceivesTrafficIsFlagged(t *testing.T) {
	r := Audit(manifests(append(workers(3), controlPlane(false)), nodePortService("checkout"), deployment("checkout", 3, drillFix)))
	wantIDs(t, r, "LT101:critical", info)
	f := find(t, r, PinnedPlacement)
	if !slices.Equal(f.Nodes, []string{"control-plane"}) || !strings.Contains(f.Message, "taint node-role.kubernetes.io/control-plane:NoSchedule") {
		t.Errorf("finding %v: %s", f.Nodes, f.Message)
	}
}

func TestReplicasBelowNodes(t *testing.T) {
	r := Audit(manifests(workers(5), nodePortService("checkout"), deployment("checkout", 3, drillFix)))
	wantIDs(t, r, "LT102:critical", info)
	if f := find(t, r, ReplicasBelowNodes); !strings.Contains(f.Message, "at least 2 of them") {
		t.Errorf("message %q", f.Message)
	}
	wantIDs(t, Audit(manifests(workers(5), nodePortService("checkout"), deployment("checkout", 5, drillFix))), info)
}

func TestNoSpread(t *testing.T) {
	r := Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3)))
	wantIDs(t, r, "LT103:warning", info)
	// A hard spread with maxSkew 2 does not force one per node with 3 replicas on 3 nodes (2+1+0 is legal)...
	wide := func(d *appsv1.Deployment) { drillFix(d); d.Spec.Template.Spec.TopologySpreadConstraints[0].MaxSkew = 2 }
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, wide))), "LT103:warning", info)
	// ...but with 5 replicas it does (5 > 2 × 2), as does required anti-affinity.
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 5, wide))), info)
	anti := func(d *appsv1.Deployment) {
		maxSurge(0)(d)
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname,
				LabelSelector: d.Spec.Selector}}}}
	}
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, anti))), info)
}

// The spread without Honor and a tainted control-plane node: the global minimum is pinned at 0.
func TestSpreadWithoutHonor(t *testing.T) {
	nodes := append(workers(3), controlPlane(true))
	noHonor := func(d *appsv1.Deployment) { drillFix(d); spread(false)(d) }
	r := Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 3, noHonor)))
	wantIDs(t, r, "LT104:warning", info)
	f := find(t, r, SpreadIgnoresTaints)
	if !slices.Equal(f.Nodes, []string{"control-plane"}) || !strings.Contains(f.Message, "at most 3 matching pods fit") ||
		!strings.Contains(f.Fix, "nodeTaintsPolicy") {
		t.Errorf("finding %v: %s / %s", f.Nodes, f.Message, f.Fix)
	}
	// 4 replicas on 3 schedulable nodes: one stays Pending now.
	r = Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 4, noHonor)))
	if f := find(t, r, SpreadIgnoresTaints); !strings.Contains(f.Message, "1 of 4 replicas stay Pending") {
		t.Errorf("message %q", f.Message)
	}
	// Without a tainted node nothing is stuck.
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, noHonor))), info)
}

// maxSurge above 0 with maxUnavailable 0 parks the rollout only when the surge pod cannot fit: the global
// minimum pinned at 0 (a stuck domain) or anti-affinity. A Honor'ed spread over schedulable nodes admits it
// (1 + 1 − 1 ≤ maxSkew), so that case must not be flagged.
func TestSurgeDeadlock(t *testing.T) {
	nodes := append(workers(3), controlPlane(true))
	stuck := func(d *appsv1.Deployment) { spread(false)(d); maxSurge(1)(d) }
	r := Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 3, stuck)))
	wantIDs(t, r, "LT104:warning", "LT105:warning", info)
	if f := find(t, r, SurgeDeadlock); !strings.Contains(f.Fix, `"maxSurge":0`) {
		t.Errorf("fix %q", f.Fix)
	}
	// The default strategy (25%/25% of 3 → surge 1, unavailable 0) parks the same way.
	wantIDs(t, Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 3, spread(false)))), "LT104:warning", "LT105:warning", info)
	// maxUnavailable 1 frees a place: no deadlock.
	unavail := func(d *appsv1.Deployment) {
		stuck(d)
		d.Spec.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	}
	wantIDs(t, Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 3, unavail))), "LT104:warning", info)
	// Honor: the surge pod fits.
	wantIDs(t, Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 3, spread(true), maxSurge(1)))), info)
	// matchLabelKeys pod-template-hash: the old revision does not count.
	hash := func(d *appsv1.Deployment) {
		stuck(d)
		d.Spec.Template.Spec.TopologySpreadConstraints[0].MatchLabelKeys = []string{"pod-template-hash"}
	}
	wantIDs(t, Audit(manifests(nodes, nodePortService("checkout"), deployment("checkout", 3, hash))), "LT104:warning", info)
	// Required anti-affinity with one replica per node and a surge.
	anti := func(d *appsv1.Deployment) {
		maxSurge(1)(d)
		d.Spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname,
				LabelSelector: d.Spec.Selector}}}}
	}
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, anti))), "LT105:warning", info)
}

func TestHPAMinBelowNodes(t *testing.T) {
	c := manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, drillFix))
	c.HPAs = append(c.HPAs, hpa("checkout", 1))
	wantIDs(t, Audit(c), "LT106:warning", info)
	c.HPAs[0] = hpa("checkout", 3)
	wantIDs(t, Audit(c), info)
}

func TestDisruption(t *testing.T) {
	recreate := func(d *appsv1.Deployment) {
		spread(true)(d)
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	}
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, recreate))), "LT107:warning", info)

	c := manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, drillFix))
	c.PDBs = append(c.PDBs, pdb("checkout", intstr.FromString("100%")))
	r := Audit(c)
	wantIDs(t, r, "LT107:warning", info)
	if f := find(t, r, DisruptionEmptiesNode); !strings.Contains(f.Fix, `"maxUnavailable":1`) {
		t.Errorf("fix %q", f.Fix)
	}
	c.PDBs[0] = pdb("checkout", intstr.FromInt32(1))
	wantIDs(t, Audit(c), info)
}

func TestDaemonSetMissesNodes(t *testing.T) {
	sel := func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "edge"} }
	r := Audit(manifests(workers(3), nodePortService("checkout"), daemonSet("checkout", sel)))
	wantIDs(t, r, "LT108:critical")
	if f := find(t, r, DaemonSetMissesNodes); len(f.Nodes) != 3 || !strings.Contains(f.Fix, "nodeSelector") {
		t.Errorf("finding %v / %s", f.Nodes, f.Fix)
	}
	// A tainted node that receives traffic: the daemon pods do not tolerate it...
	nodes := append(workers(2), controlPlane(false))
	r = Audit(manifests(nodes, nodePortService("checkout"), daemonSet("checkout")))
	wantIDs(t, r, "LT108:critical")
	if f := find(t, r, DaemonSetMissesNodes); !strings.Contains(f.Fix, `"key":"node-role.kubernetes.io/control-plane"`) {
		t.Errorf("fix %q", f.Fix)
	}
	// ...until they do; a cordoned node never keeps a daemon pod off.
	tol := func(d *appsv1.DaemonSet) {
		d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
	}
	nodes[0].Spec.Unschedulable = true
	wantIDs(t, Audit(manifests(nodes, nodePortService("checkout"), daemonSet("checkout", tol))))
}

func TestLoadBalancerHealthCheck(t *testing.T) {
	pinned := deployment("checkout", 3, pinnedTo("node-1"))
	// A health-checked LoadBalancer: the pin costs capacity, not packets.
	r := Audit(manifests(workers(3), nodePortService("checkout", loadBalancer), pinned))
	wantIDs(t, r, "LT101:info")
	if !r.Services[0].HealthChecked {
		t.Error("LoadBalancer without annotations should count as health-checked")
	}
	cases := []struct {
		name string
		ann  []string
		want []string
	}{
		{"aws kube-proxy healthz", []string{announce.AnnAWSHCPort, "10256"}, []string{"LT101:critical", "LT109:warning"}},
		{"aws tcp on healthCheckNodePort", []string{announce.AnnAWSHCPort, "32000", announce.AnnAWSHCProtocol, "TCP"}, []string{"LT101:critical", "LT109:warning"}},
		{"aws http on healthCheckNodePort", []string{announce.AnnAWSHCPort, "32000", announce.AnnAWSHCProtocol, "HTTP"}, []string{"LT101:info"}},
		{"aws lbc traffic-port", []string{announce.AnnAWSType, "external", announce.AnnAWSHCPort, "traffic-port"}, []string{"LT101:info", "LT109:info"}},
		{"aws lbc ip targets", []string{announce.AnnAWSType, "external", announce.AnnAWSTargetType, "ip", announce.AnnAWSHCPort, "10256"}, []string{"LT101:info"}},
		{"aws other service's port", []string{announce.AnnAWSHCPort, "31000"}, []string{"LT101:critical", "LT109:warning"}},
		{"hetzner default", []string{"load-balancer.hetzner.cloud/location", "fsn1"}, []string{"LT101:info", "LT109:info"}},
		{"hetzner healthCheckNodePort http", []string{announce.AnnHetznerHCPort, "32000", announce.AnnHetznerHCProto, "http"}, []string{"LT101:info"}},
		{"hetzner healthCheckNodePort tcp", []string{announce.AnnHetznerHCPort, "32000"}, []string{"LT101:critical", "LT109:warning"}},
		{"digitalocean default", []string{"service.beta.kubernetes.io/do-loadbalancer-name", "x"}, []string{"LT101:info"}},
		{"digitalocean override", []string{announce.AnnDOOverride, "true", announce.AnnDOHCPort, "80"}, []string{"LT101:info", "LT109:info"}},
		{"linode none", []string{announce.AnnLinodeCheckType, "none"}, []string{"LT101:critical", "LT109:warning"}},
		{"linode default", []string{"service.beta.kubernetes.io/linode-loadbalancer-throttle", "5"}, []string{"LT101:info", "LT109:info"}},
		{"scaleway default", []string{"service.beta.kubernetes.io/scw-loadbalancer-type", "LB-S"}, []string{"LT101:info", "LT109:info"}},
		{"scaleway from service", []string{announce.AnnScalewayFromSvc, "true"}, []string{"LT101:info"}},
		{"azure probe annotations ignored for Local", []string{"service.beta.kubernetes.io/port_80_health-probe_port", "10256", "service.beta.kubernetes.io/azure-load-balancer-internal", "true"}, []string{"LT101:info"}},
		{"gcp", []string{"cloud.google.com/l4-rbs", "enabled"}, []string{"LT101:info"}},
		{"oracle", []string{"service.beta.kubernetes.io/oci-load-balancer-shape", "flexible"}, []string{"LT101:info"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := nodePortService("checkout", loadBalancer, annotated(tc.ann...))
			wantIDs(t, Audit(manifests(workers(3), svc, pinned)), tc.want...)
		})
	}
	// The provider comes from the nodes' providerID when the Service has no annotation of its own.
	nodes := workers(3)
	for _, n := range nodes {
		n.Spec.ProviderID = "hcloud://1234"
	}
	wantIDs(t, Audit(manifests(nodes, nodePortService("checkout", loadBalancer), pinned)), "LT101:info", "LT109:info")
}

func TestSelectorMatchesNoWorkload(t *testing.T) {
	other := deployment("checkout", 3, drillFix)
	other.Spec.Template.Labels = map[string]string{"app": "checkout-v2"}
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), other)), "LT111:warning", info)
	wantIDs(t, Audit(manifests(workers(3), nodePortService("checkout"), deployment("checkout", 3, drillFix))), info)
	// No selector: endpoints by hand, nothing to judge.
	noSel := nodePortService("checkout", func(s *corev1.Service) { s.Spec.Selector = nil })
	wantIDs(t, Audit(manifests(workers(3), noSel)))
}

func TestNonLocalServicesAreIgnored(t *testing.T) {
	svc := nodePortService("checkout", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster })
	r := Audit(manifests(workers(3), svc, deployment("checkout", 1, pinnedTo("node-1"))))
	if len(r.Services) != 0 {
		t.Errorf("Cluster policy Service audited: %+v", r.Services)
	}
}

func TestRulesAreUniqueAndKnown(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules() {
		if seen[string(r.ID)] || seen[r.Name] || r.Short == "" {
			t.Errorf("rule %+v duplicated or undocumented", r)
		}
		seen[string(r.ID)], seen[r.Name] = true, true
	}
}
