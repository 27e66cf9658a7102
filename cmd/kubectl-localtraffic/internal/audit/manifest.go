package audit

import (
	"bytes"
	"fmt"
	"io"
	"os"

	yaml "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/resource"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// stdinFile is the file name of objects read from standard input ("-f -").
const stdinFile = "stdin"

// loadManifests reads the objects of the -f arguments into the cluster with cli-runtime's resource builder, as
// kubectl apply -f reads them: files as given, directories' *.yaml, *.yml and *.json (recursively with
// Recursive), globs, URLs and "-" for standard input; multi-document YAML or JSON, List kinds (what kustomize
// build and helm template print) unpacked. Kinds the audit does not read are skipped; a known kind that does not
// decode, or a document that does not parse (which ends its file), is bad input: every one of them in one message.
func loadManifests(c *placement.Cluster, files resource.FilenameOptions, stdin io.Reader, defaultNamespace string) error {
	b := resource.NewLocalBuilder().Unstructured().ContinueOnError().Flatten()
	lines := lineIndex{bySource: map[string]map[string]int{}}
	for _, f := range files.Filenames {
		if f != "-" {
			b.FilenameParam(false, &resource.FilenameOptions{Filenames: []string{f}, Recursive: files.Recursive})
			continue
		}
		// The builder's own "-" reads os.Stdin; the app reads the stream it was given (tests give theirs), once.
		if !lines.piped {
			var err error
			if lines.stdin, err = io.ReadAll(stdin); err != nil {
				return cli.BadInputf("reading %s: %w", stdinFile, err)
			}
			lines.piped = true
		}
		b.Stream(bytes.NewReader(lines.stdin), stdinFile)
	}
	if c.Sources == nil {
		c.Sources = map[string]placement.Source{}
	}
	adds := adders(c)
	err := b.Do().Visit(func(info *resource.Info, err error) error {
		if err != nil {
			return err
		}
		u, ok := info.Object.(*unstructured.Unstructured)
		if !ok { // Unstructured() and Flatten() promise it
			return fmt.Errorf("%s: %s read as a %T", info.Source, info.Name, info.Object)
		}
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		return addObject(c, adds, u, placement.Source{File: info.Source, Line: lines.line(info.Source, key)}, defaultNamespace)
	})
	if err != nil {
		return cli.BadInput{Err: err}
	}
	return nil
}

// lineIndex finds the line each object starts on in its source, which the builder does not keep and findings
// point at (SARIF's regions, the JSON output's lines).
type lineIndex struct {
	stdin    []byte                    // what was piped in
	piped    bool                      // -f has a "-": stdin holds standard input
	bySource map[string]map[string]int // source → "Kind/namespace/name" → line, as objectLines reads them
}

func (x *lineIndex) line(source, key string) int {
	lines, ok := x.bySource[source]
	if !ok {
		data := x.stdin
		if source != stdinFile || !x.piped {
			// A URL's text is not kept (the builder fetched it): its objects go without a line.
			data, _ = os.ReadFile(source)
		}
		lines = objectLines(data)
		x.bySource[source] = lines
	}
	return lines[key]
}

// objectLines maps "Kind/namespace/name" (the namespace as written, empty when none is) to the line each object
// of a YAML or JSON stream starts on: a document's first key, or for a List (a document with items) each item's.
// The last of two objects of one name wins, as it does in the cluster. Where go-yaml stops (JSON indented with
// tabs, which it does not read), the objects after go without a line.
func objectLines(data []byte) map[string]int {
	out := map[string]int{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		if dec.Decode(&doc) != nil {
			return out
		}
		for _, n := range doc.Content {
			addLines(out, n)
		}
	}
}

func addLines(out map[string]int, n *yaml.Node) {
	var head struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name      string `yaml:"name"`
			Namespace string `yaml:"namespace"`
		} `yaml:"metadata"`
		Items []yaml.Node `yaml:"items"`
	}
	_ = n.Decode(&head) // fields that do not decode leave the object without a line; the builder reports the document
	for i := range head.Items {
		addLines(out, &head.Items[i])
	}
	if head.Items == nil && head.Kind != "" {
		out[head.Kind+"/"+head.Metadata.Namespace+"/"+head.Metadata.Name] = n.Line
	}
}

// addObject converts one object the builder read into the type the placement story reads, under its namespace
// (defaultNamespace when it names none), and records where it was read.
func addObject(c *placement.Cluster, adds map[schema.GroupVersionKind]adder, u *unstructured.Unstructured, src placement.Source, defaultNamespace string) error {
	gvk := u.GroupVersionKind()
	add, ok := adds[gvk]
	if !ok {
		return nil // ConfigMaps, CRDs and the rest: nothing the placement story reads
	}
	if u.GetNamespace() == "" && gvk.Kind != "Node" {
		u.SetNamespace(defaultNamespace)
	}
	key := gvk.Kind + "/" + u.GetNamespace() + "/" + u.GetName()
	_, again := c.Sources[key]
	if err := add(u, again); err != nil {
		at := src.File
		if src.Line > 0 {
			at = fmt.Sprintf("%s:%d", src.File, src.Line)
		}
		return fmt.Errorf("%s: %s %s: %w", at, gvk.Kind, u.GetName(), err)
	}
	c.Sources[key] = src
	return nil
}

// adder converts an object to its type and adds it to the cluster; again: one of its kind and name was read
// before.
type adder func(u *unstructured.Unstructured, again bool) error

// adders says where each kind the placement story reads goes in the cluster, by the versions manifests carry.
func adders(c *placement.Cluster) map[schema.GroupVersionKind]adder {
	return map[schema.GroupVersionKind]adder{
		corev1.SchemeGroupVersion.WithKind("Service"):                        addTo(&c.Services, defaultProtocol),
		corev1.SchemeGroupVersion.WithKind("Node"):                           addTo(&c.Nodes, same),
		corev1.SchemeGroupVersion.WithKind("Pod"):                            addTo(&c.Pods, same),
		discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"):             addTo(&c.EndpointSlices, same),
		appsv1.SchemeGroupVersion.WithKind("Deployment"):                     addTo(&c.Deployments, same),
		appsv1.SchemeGroupVersion.WithKind("StatefulSet"):                    addTo(&c.StatefulSets, same),
		appsv1.SchemeGroupVersion.WithKind("DaemonSet"):                      addTo(&c.DaemonSets, same),
		appsv1.SchemeGroupVersion.WithKind("ReplicaSet"):                     addTo(&c.ReplicaSets, same),
		autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"): addTo(&c.HPAs, same),
		autoscalingv1.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"): addTo(&c.HPAs, hpaV2),
		policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"):          addTo(&c.PDBs, same),
	}
}

// addTo reads objects as F and adds them to list as what conv makes of them.
func addTo[F any, T any, PT interface {
	*T
	GetNamespace() string
	GetName() string
}](list *[]PT, conv func(*F) PT) adder {
	return func(u *unstructured.Unstructured, again bool) error {
		var o F
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
			return err
		}
		*list = put(*list, conv(&o), again)
		return nil
	}
}

func same[T any](o *T) *T { return o }

// defaultProtocol: the apiserver defaults a port's protocol to TCP; manifests usually leave it out.
func defaultProtocol(s *corev1.Service) *corev1.Service {
	for i := range s.Spec.Ports {
		if s.Spec.Ports[i].Protocol == "" {
			s.Spec.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	return s
}

// hpaV2 is an autoscaling/v1 HorizontalPodAutoscaler as autoscaling/v2 serves it, in the fields the audit reads.
func hpaV2(h *autoscalingv1.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: h.ObjectMeta,
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: h.Spec.MinReplicas, MaxReplicas: h.Spec.MaxReplicas,
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference(h.Spec.ScaleTargetRef)}}
}

// put adds an object, or replaces the one of the same name read earlier: as kubectl apply of the same
// files would leave it, the last document wins.
func put[T any, P interface {
	*T
	GetNamespace() string
	GetName() string
}](list []P, o P, again bool) []P {
	if again {
		for i, x := range list {
			if x.GetNamespace() == o.GetNamespace() && x.GetName() == o.GetName() {
				list[i] = o
				return list
			}
		}
	}
	return append(list, o)
}

// loadNodesFile reads Node objects (their taints, labels and providerID count) for --nodes-file.
func loadNodesFile(path string, stdin io.Reader) ([]*corev1.Node, error) {
	var c placement.Cluster
	if err := loadManifests(&c, resource.FilenameOptions{Filenames: []string{path}}, stdin, ""); err != nil {
		return nil, err
	}
	if len(c.Nodes) == 0 {
		return nil, cli.BadInputf("--nodes-file %s: no Node objects in it", path)
	}
	return c.Nodes, nil
}
