package audit

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/resource"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// Every finding, flagged and its fix not flagged, the same from manifests (-f with --nodes-file) and from a
// fake apiserver holding the same objects (live mode).

const findingNodes = `
apiVersion: v1
kind: NodeList
items:
- {apiVersion: v1, kind: Node, metadata: {name: node-1, labels: {kubernetes.io/hostname: node-1}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-2, labels: {kubernetes.io/hostname: node-2}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-3, labels: {kubernetes.io/hostname: node-3}}}
- apiVersion: v1
  kind: Node
  metadata:
    name: control-plane
    labels: {kubernetes.io/hostname: control-plane, node.kubernetes.io/exclude-from-external-load-balancers: ""}
  spec:
    taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
`

// service is the drill's Service; extra goes into its metadata (annotations) and spec.
func service(typ, annotations string) string {
	return `apiVersion: v1
kind: Service
metadata:
  name: checkout
  namespace: kubelings
  annotations: {` + annotations + `}
spec:
  type: ` + typ + `
  externalTrafficPolicy: Local
  selector: {app: checkout}
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30090}]
`
}

// deploymentYAML is a Deployment of the drill's app; spec and podSpec are extra fields (YAML flow mappings'
// contents) for the Deployment's spec and its pod template's spec.
func deploymentYAML(replicas, spec, podSpec string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: checkout, namespace: kubelings}
spec: {replicas: ` + replicas + `, selector: {matchLabels: {app: checkout}}, ` + spec + `
  template: {metadata: {labels: {app: checkout}}, spec: {containers: [{name: c, image: agnhost}], ` + podSpec + `}}}
`
}

const (
	honorSpread   = `topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Honor, labelSelector: {matchLabels: {app: checkout}}}]`
	noHonorSpread = `topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: checkout}}}]`
	noSurge       = `strategy: {rollingUpdate: {maxSurge: 0, maxUnavailable: 1}},`
	surge         = `strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 0}},`
)

func join(docs ...string) string { return strings.Join(docs, "---\n") }

var findingCases = []struct {
	id             placement.RuleID
	flagged, fixed string
}{
	{placement.PinnedPlacement,
		join(service("NodePort", ""), deploymentYAML("3", noSurge, `nodeSelector: {kubernetes.io/hostname: node-1}`)),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread))},
	{placement.ReplicasBelowNodes,
		join(service("NodePort", ""), deploymentYAML("2", noSurge, honorSpread)),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread))},
	{placement.NoSpread,
		join(service("NodePort", ""), deploymentYAML("3", noSurge, "")),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread))},
	{placement.SpreadIgnoresTaints,
		join(service("NodePort", ""), deploymentYAML("3", noSurge, noHonorSpread)),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread))},
	{placement.SurgeDeadlock,
		join(service("NodePort", ""), deploymentYAML("3", surge, noHonorSpread)),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, noHonorSpread))},
	{placement.HPAMinBelowNodes,
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread),
			"apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: checkout, namespace: kubelings}\nspec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: checkout}, minReplicas: 1, maxReplicas: 6}\n"),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread),
			"apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: checkout, namespace: kubelings}\nspec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: checkout}, minReplicas: 3, maxReplicas: 6}\n")},
	{placement.DisruptionEmptiesNode,
		join(service("NodePort", ""), deploymentYAML("3", `strategy: {type: Recreate},`, honorSpread)),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread))},
	{placement.DaemonSetMissesNodes,
		join(service("NodePort", ""), "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: checkout, namespace: kubelings}\nspec: {selector: {matchLabels: {app: checkout}}, template: {metadata: {labels: {app: checkout}}, spec: {nodeSelector: {pool: edge}, containers: [{name: c, image: agnhost}]}}}\n"),
		join(service("NodePort", ""), "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: checkout, namespace: kubelings}\nspec: {selector: {matchLabels: {app: checkout}}, template: {metadata: {labels: {app: checkout}}, spec: {containers: [{name: c, image: agnhost}]}}}\n")},
	{placement.HealthCheckMisdirect,
		join(service("LoadBalancer", `service.beta.kubernetes.io/aws-load-balancer-healthcheck-port: "10256"`), deploymentYAML("3", noSurge, honorSpread)),
		join(service("LoadBalancer", `service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol: http`), deploymentYAML("3", noSurge, honorSpread))},
	{placement.NodePortNoHealthCheck,
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread)),
		join(service("LoadBalancer", ""), deploymentYAML("3", noSurge, honorSpread))},
	{placement.SelectorMatchesNone,
		join(service("NodePort", ""), strings.ReplaceAll(deploymentYAML("3", noSurge, honorSpread), "{app: checkout}", "{app: checkout-v2}")),
		join(service("NodePort", ""), deploymentYAML("3", noSurge, honorSpread))},
	{placement.MetalLBFewNodes,
		join(service("LoadBalancer", `metallb.io/address-pool: production`), deploymentYAML("1", noSurge, honorSpread)),
		join(service("LoadBalancer", `metallb.io/address-pool: production`), deploymentYAML("3", noSurge, honorSpread))},
}

// objectsOf decodes manifests into API objects for the fake clientset (autoscaling/v1 as the apiserver would
// serve it through autoscaling/v2, as the plugin converts it).
func objectsOf(t *testing.T, docs string) []runtime.Object {
	t.Helper()
	c := placement.Cluster{Sources: map[string]placement.Source{}}
	if err := loadManifests(&c, resource.FilenameOptions{Filenames: []string{"-"}}, strings.NewReader(docs), "default"); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, o := range c.Nodes {
		objs = append(objs, o)
	}
	for _, o := range c.Services {
		objs = append(objs, o)
	}
	for _, o := range c.Deployments {
		objs = append(objs, o)
	}
	for _, o := range c.DaemonSets {
		objs = append(objs, o)
	}
	for _, o := range c.HPAs {
		objs = append(objs, o)
	}
	for _, o := range c.PDBs {
		objs = append(objs, o)
	}
	return objs
}

func findingIDs(t *testing.T, out string) []placement.RuleID {
	t.Helper()
	var rep placement.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var ids []placement.RuleID
	for _, f := range rep.Findings() {
		if !slices.Contains(ids, f.ID) {
			ids = append(ids, f.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestEveryFindingFromManifestsAndLive(t *testing.T) {
	nodesFile := t.TempDir() + "/nodes.yaml"
	writeFile(t, nodesFile, findingNodes)
	covered := map[placement.RuleID]bool{}
	for _, tc := range findingCases {
		t.Run(string(tc.id), func(t *testing.T) {
			for _, variant := range []struct {
				name, docs string
				want       bool
			}{{"flagged", tc.flagged, true}, {"fixed", tc.fixed, false}} {
				manifest := invoke(t, variant.docs, nil, false, nil, "audit", "-o", "json", "-f", "-", "--nodes-file", nodesFile)
				live := invoke(t, "", nil, false, append(objectsOf(t, findingNodes), objectsOf(t, variant.docs)...), "audit", "-o", "json", "-A")
				for mode, r := range map[string]result{"manifests": manifest, "live": live} {
					ids := findingIDs(t, r.Out)
					if slices.Contains(ids, tc.id) != variant.want {
						t.Errorf("%s, %s: findings %v, %s expected %v", variant.name, mode, ids, tc.id, variant.want)
					}
				}
				if m, l := findingIDs(t, manifest.Out), findingIDs(t, live.Out); !slices.Equal(m, l) {
					t.Errorf("%s: manifests find %v, live %v", variant.name, m, l)
				}
			}
		})
		covered[tc.id] = true
	}
	for _, r := range placement.Rules() {
		// LT100 needs running pods (TestAuditLive); LT112 running pods and an announcer's records
		// (placement's TestAuditAnnouncedWithoutLocal).
		if !covered[r.ID] && r.ID != placement.BlackholeNow && r.ID != placement.AnnouncedWithoutLocal {
			t.Errorf("no case for %s", r.ID)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
