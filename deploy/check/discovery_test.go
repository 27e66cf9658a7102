package check

// What Prometheus scrapes from the shipped monitors, at 5,000 nodes: the monitors as rendered (the chart, the
// kustomize overlay), decoded into prometheus-operator's API types, turned into the scrape job the operator
// generates (operatorcfg_test.go), that job loaded by Prometheus' own loader, its Kubernetes discovery
// (Prometheus' endpointslice and pod discoverers) run over a fake API holding the cluster, and its targets built
// by Prometheus' own relabelling.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/scrape"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	kptr "k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

const (
	// scaleNodes is the cluster docs/scale.md plans for; an EndpointSlice holds at most 100 endpoints (the
	// EndpointSlice controller's default --max-endpoints-per-slice), so the exporter's Service has 50.
	scaleNodes     = 5000
	endpointsSlice = 100
)

// scaleCluster is the API's view of a cluster of n nodes running the rendered DaemonSet: one pod per node (the
// rendered pod template, hostNetwork: the node's address), the rendered Service and its EndpointSlices of 100
// endpoints each, as the EndpointSlice controller writes them.
func scaleCluster(t *testing.T, objs []*yaml.RNode, n int) (*fake.Clientset, map[string]string) {
	t.Helper()
	var ds appsv1.DaemonSet
	decode(t, find(t, objs, "DaemonSet", appName), &ds)
	var svc corev1.Service
	decode(t, find(t, objs, "Service", appName), &svc)

	var all []runtime.Object
	all = append(all, &svc)
	nodeOf := map[string]string{} // pod IP (the node's address) -> node
	var slice *discoveryv1.EndpointSlice
	for i := range n {
		node, ip := fmt.Sprintf("node-%04d", i), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		nodeOf[ip] = node
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", appName, i), Namespace: namespace, Labels: ds.Spec.Template.Labels},
			Spec:       *ds.Spec.Template.Spec.DeepCopy(),
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, HostIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
		}
		pod.Spec.NodeName = node
		all = append(all, pod)
		if i%endpointsSlice == 0 {
			slice = &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", svc.Name, i/endpointsSlice), Namespace: namespace,
					Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
				AddressType: discoveryv1.AddressTypeIPv4,
			}
			for _, p := range svc.Spec.Ports {
				slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr(p.Name), Port: ptr(p.Port), Protocol: ptr(p.Protocol)})
			}
			all = append(all, slice)
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			NodeName:   ptr(node),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod.Name},
		})
	}
	return fake.NewClientset(all...), nodeOf
}

// discoverTargets runs Prometheus' Kubernetes discoverer of the job's role over the fake API and returns the
// targets Prometheus would scrape (its own relabelling, scrape.TargetsFromGroup), waiting until every group the
// cluster holds has arrived.
func discoverTargets(t *testing.T, job *config.ScrapeConfig, client *fake.Clientset, groups int) []*scrape.Target {
	t.Helper()
	if len(job.ServiceDiscoveryConfigs) != 1 {
		t.Fatalf("job %s: %d service discovery configs, want one", job.JobName, len(job.ServiceDiscoveryConfigs))
	}
	sd, ok := job.ServiceDiscoveryConfigs[0].(*kubernetes.SDConfig)
	if !ok {
		t.Fatalf("job %s discovers with %T, not Kubernetes", job.JobName, job.ServiceDiscoveryConfigs[0])
	}
	if names := sd.NamespaceDiscovery.Names; len(names) != 1 || names[0] != namespace {
		t.Errorf("job %s looks in namespaces %v, want [%s]", job.JobName, names, namespace)
	}
	if len(sd.Selectors) != 0 {
		t.Errorf("job %s: API-side selectors %v, which this test does not apply", job.JobName, sd.Selectors)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	events := prom.NewCounterVec(prom.CounterOpts{Name: "events_total"}, []string{"role", "event"})
	type runner interface {
		Run(context.Context, chan<- []*targetgroup.Group)
	}
	var d runner
	switch sd.Role {
	case kubernetes.RoleEndpointSlice:
		d = kubernetes.NewEndpointSlice(nil, factory.Discovery().V1().EndpointSlices().Informer(),
			factory.Core().V1().Services().Informer(), factory.Core().V1().Pods().Informer(), nil, nil, nil, nil, false, false, false, events)
	case kubernetes.RolePod:
		d = kubernetes.NewPod(nil, factory.Core().V1().Pods().Informer(), nil, nil, nil, nil, false, false, false, events)
	default:
		t.Fatalf("job %s discovers with role %s", job.JobName, sd.Role)
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel() // before Shutdown, which waits for the informers to stop
		factory.Shutdown()
	}()
	ch := make(chan []*targetgroup.Group)
	go d.Run(ctx, ch)
	latest := map[string]*targetgroup.Group{}
	for len(latest) < groups {
		select {
		case tgs := <-ch:
			for _, tg := range tgs {
				latest[tg.Source] = tg
			}
		case <-ctx.Done():
			t.Fatalf("job %s: %d of %d target groups discovered", job.JobName, len(latest), groups)
		}
	}
	var targets []*scrape.Target
	lb := labels.NewBuilder(labels.EmptyLabels())
	for _, tg := range latest {
		got, errs := scrape.TargetsFromGroup(tg, job, nil, lb)
		for _, err := range errs {
			t.Errorf("job %s: %v", job.JobName, err)
		}
		for _, target := range got {
			// A target the relabelling dropped comes back without labels (kept for the dropped-targets page).
			if !target.Labels(lb).IsEmpty() {
				targets = append(targets, target)
			}
		}
	}
	return targets
}

// checkEveryNodeScraped: one target per node, each the node's exporter as the alerts need it.
func checkEveryNodeScraped(t *testing.T, targets []*scrape.Target, nodeOf map[string]string) {
	t.Helper()
	seen := map[string]int{}
	for _, tg := range targets {
		l := tg.Labels(labels.NewBuilder(labels.EmptyLabels()))
		addr := tg.DiscoveredLabels(labels.NewBuilder(labels.EmptyLabels())).Get("__address__")
		ip, _, _ := strings.Cut(addr, ":")
		node := nodeOf[ip]
		seen[node]++
		if l.Get("node") != node || l.Get("job") != "localtraffic-exporter" || l.Get("instance") != addr ||
			!strings.HasSuffix(addr, ":9746") {
			t.Errorf("target %s: labels %s, want node=%s, job=localtraffic-exporter, port 9746", addr, l, node)
		}
		if tg.URL().Scheme != "https" || tg.URL().Path != "/metrics" {
			t.Errorf("target %s scraped at %s, want https://…/metrics (kube-rbac-proxy)", addr, tg.URL())
		}
	}
	t.Logf("%d targets for %d nodes", len(targets), len(nodeOf))
	var missing []string
	for _, node := range nodeOf {
		if seen[node] != 1 {
			missing = append(missing, fmt.Sprintf("%s (%d targets)", node, seen[node]))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 || len(targets) != len(nodeOf) {
		t.Errorf("%d targets for %d nodes; nodes not scraped exactly once: %d, first %v", len(targets), len(nodeOf), len(missing), missing[:min(len(missing), 5)])
	}
}

// TestMonitorsScrapeEveryNodeAt5000: the shipped ServiceMonitor (overlay and chart) discovers through
// EndpointSlices, and with it Prometheus scrapes all 5,000 nodes' exporters — an Endpoints object would stop at
// 1,000 addresses; the chart's PodMonitor (role pod) does too. Without serviceDiscoveryRole the same monitor
// falls back to the Prometheus resource's default, the Endpoints role.
func TestMonitorsScrapeEveryNodeAt5000(t *testing.T) {
	chart := mustRenderChart(t, values(t, `
serviceMonitor: {enabled: true}
podMonitor: {enabled: true, authorization: {credentials: {name: scrape-token, key: token}}}
`))
	client, nodeOf := scaleCluster(t, chart, scaleNodes)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "scrape-token", Namespace: namespace}, Data: map[string][]byte{"token": []byte("t")}}

	for _, src := range []struct {
		name string
		objs []*yaml.RNode
	}{{"overlays/prometheus-operator", render(t, "overlays/prometheus-operator")}, {"chart", chart}} {
		t.Run(src.name+" ServiceMonitor", func(t *testing.T) {
			var sm monitoringv1.ServiceMonitor
			decode(t, find(t, src.objs, "ServiceMonitor", appName), &sm)
			if r := kptr.Deref(sm.Spec.ServiceDiscoveryRole, ""); r != monitoringv1.EndpointSliceRole {
				t.Errorf("serviceDiscoveryRole %q, want EndpointSlice", r)
			}
			job := promSettings{}.serviceMonitorJob(t, &sm)
			targets := discoverTargets(t, job, client, scaleNodes/endpointsSlice)
			checkEveryNodeScraped(t, targets, nodeOf)
			if !job.HonorLabels {
				t.Errorf("honor_labels false: the exporter's namespace and service labels become exported_*")
			}

			sm.Spec.ServiceDiscoveryRole = nil
			old := promSettings{}.serviceMonitorJob(t, &sm)
			if role := old.ServiceDiscoveryConfigs[0].(*kubernetes.SDConfig).Role; role != kubernetes.RoleEndpoint {
				t.Errorf("without serviceDiscoveryRole the operator discovers with role %s; the control case expects endpoints", role)
			}
		})
	}
	t.Run("chart PodMonitor", func(t *testing.T) {
		var pm monitoringv1.PodMonitor
		decode(t, find(t, chart, "PodMonitor", appName), &pm)
		job := promSettings{}.podMonitorJob(t, &pm, token)
		checkEveryNodeScraped(t, discoverTargets(t, job, client, scaleNodes), nodeOf)
	})
}

// TestOpenShiftUserWorkloadKeepsTheServiceLabels: OpenShift's user-workload Prometheus overrides honorLabels
// and enforces the monitor's namespace on every series (overrideHonorLabels, enforcedNamespaceLabel: namespace,
// ignoreNamespaceSelectors, no file access for monitors). The chart's ServiceMonitor as its README installs it
// there still gets every node scraped, and a series of the exporter keeps the judged Service's namespace and name
// (as exported_namespace and exported_service; namespace is the enforced one) and its node.
func TestOpenShiftUserWorkloadKeepsTheServiceLabels(t *testing.T) {
	objs := mustRenderChart(t, values(t, `
serviceMonitor: {enabled: true, authorization: {type: Bearer, credentials: {name: localtraffic-scrape-token, key: token}}}
kubeRBACProxy: {metricsReaders: [{namespace: localtraffic-system, name: localtraffic-scrape}]}
`))
	var sm monitoringv1.ServiceMonitor
	decode(t, find(t, objs, "ServiceMonitor", appName), &sm)
	//lint:ignore SA1019 the deprecated field is what OpenShift refuses
	if sm.Spec.Endpoints[0].BearerTokenFile != "" {
		t.Errorf("the ServiceMonitor reads a token file, which user-workload monitoring refuses")
	}
	uwm := promSettings{overrideHonorLabels: true, enforcedNamespaceLabel: "namespace", ignoreNamespaceSelectors: true}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "localtraffic-scrape-token", Namespace: namespace}, Data: map[string][]byte{"token": []byte("t")}}
	job := uwm.serviceMonitorJob(t, &sm, token)
	if job.HonorLabels {
		t.Fatalf("honor_labels true: not the configuration user-workload monitoring generates")
	}
	client, nodeOf := scaleCluster(t, objs, 3)
	targets := discoverTargets(t, job, client, 1)
	checkEveryNodeScraped(t, targets, nodeOf)

	target := targets[0].Labels(labels.NewBuilder(labels.EmptyLabels()))
	scraped := labels.FromStrings("__name__", "localtraffic_blackhole", "namespace", "kubelings", "service", "checkout", "node", target.Get("node"))
	lb := labels.NewBuilder(withTargetLabels(scraped, target, job.HonorLabels))
	keep := relabel.ProcessBuilder(lb, job.MetricRelabelConfigs...)
	got := lb.Labels()
	if !keep {
		t.Fatalf("the series %s is dropped", scraped)
	}
	want := map[string]string{"exported_namespace": "kubelings", "exported_service": "checkout", "node": target.Get("node"), "namespace": namespace, "job": "localtraffic-exporter"}
	for name, v := range want {
		if got.Get(name) != v {
			t.Errorf("stored series %s: %s=%q, want %q", got, name, got.Get(name), v)
		}
	}
}

// withTargetLabels attaches the target's labels to a scraped series as Prometheus' scrape loop does
// (mutateSampleLabels): with honor_labels the series' own values win; without, a series label the target also
// has is renamed exported_<name> (exported_exported_<name> if that is taken too) and the target's value is set.
func withTargetLabels(series, target labels.Labels, honor bool) labels.Labels {
	b := labels.NewBuilder(series)
	target.Range(func(l labels.Label) {
		if strings.HasPrefix(l.Name, "__") {
			return
		}
		if v := series.Get(l.Name); v != "" {
			if honor {
				return
			}
			name := "exported_" + l.Name
			for series.Has(name) {
				name = "exported_" + name
			}
			b.Set(name, v)
		}
		b.Set(l.Name, l.Value)
	})
	return b.Labels()
}

// TestOperatorPinnedOnce: the operator version whose API types decode the monitors here (go.mod), whose config
// generator operatorcfg_test.go transcribes, and whose CRDs e2e validates the monitors against
// (e2e/deploy_test.go) are one.
func TestOperatorPinnedOnce(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	version := regexp.MustCompile(`(?m)^\s*github\.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring (v\S+)`).FindStringSubmatch(read("deploy/check/go.mod"))
	if version == nil {
		t.Fatal("deploy/check/go.mod does not require the operator's API types")
	}
	for path, want := range map[string]string{
		"e2e/deploy_test.go":               `"github.com/prometheus-operator/prometheus-operator@` + version[1] + `"`,
		"deploy/check/operatorcfg_test.go": "prometheus-operator " + version[1] + ":",
		"deploy/README.md":                 "prometheus-operator CRDs of " + version[1],
	} {
		if !strings.Contains(read(path), want) {
			t.Errorf("%s does not name the operator at %s (%s), as deploy/check/go.mod pins it", path, version[1], want)
		}
	}
}
