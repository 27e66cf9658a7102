package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/kubeview/placement"
)

// badInput is an error in what the user gave us (a file, its YAML, a flag): exit status 2.
type badInput struct{ err error }

func (b badInput) Error() string { return b.err.Error() }
func (b badInput) Unwrap() error { return b.err }

func badInputf(format string, a ...any) error { return badInput{fmt.Errorf(format, a...)} }

// manifestFiles expands the -f arguments: files as given, directories recursively (*.yaml, *.yml, *.json, in
// lexical order, as kubectl apply -R reads them), "-" for standard input.
func manifestFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if p == "-" {
			out = append(out, p)
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			return nil, badInputf("reading %s: %w", p, err)
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				if !d.IsDir() {
					found = append(found, path)
				}
			}
			return nil
		})
		if err != nil {
			return nil, badInputf("reading directory %s: %w", p, err)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

// loadManifests decodes every object of the files into the cluster: multi-document YAML or JSON, List kinds
// (what kustomize build and helm template print) unpacked. Kinds the audit does not read are skipped;
// a document that is not valid YAML, or a known kind that does not decode, is bad input.
func loadManifests(c *placement.Cluster, paths []string, stdin io.Reader, defaultNamespace string) error {
	files, err := manifestFiles(paths)
	if err != nil {
		return err
	}
	if c.Sources == nil {
		c.Sources = map[string]string{}
	}
	for _, f := range files {
		var r io.Reader
		name := f
		if f == "-" {
			r, name = stdin, "stdin"
		} else {
			fh, err := os.Open(f)
			if err != nil {
				return badInputf("reading %s: %w", f, err)
			}
			defer fh.Close()
			r = fh
		}
		if err := decodeStream(c, bufio.NewReader(r), name, defaultNamespace); err != nil {
			return err
		}
	}
	return nil
}

func decodeStream(c *placement.Cluster, r *bufio.Reader, name, defaultNamespace string) error {
	reader := utilyaml.NewYAMLReader(r)
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return badInputf("%s: document %d: %w", name, doc, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			continue
		}
		js, err := sigsyaml.YAMLToJSON(raw)
		if err != nil {
			return badInputf("%s: document %d: invalid YAML: %w", name, doc, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(js); err != nil {
			return badInputf("%s: document %d: not a Kubernetes object: %w", name, doc, err)
		}
		if err := addObject(c, &u, name, doc, defaultNamespace); err != nil {
			return err
		}
	}
}

// stripComments drops YAML comment lines, so a document of comments alone counts as empty.
func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func addObject(c *placement.Cluster, u *unstructured.Unstructured, name string, doc int, defaultNamespace string) error {
	if u.IsList() {
		list, err := u.ToList()
		if err != nil {
			return badInputf("%s: document %d: %w", name, doc, err)
		}
		for i := range list.Items {
			if err := addObject(c, &list.Items[i], name, doc, defaultNamespace); err != nil {
				return err
			}
		}
		return nil
	}
	gvk := u.GroupVersionKind()
	if u.GetNamespace() == "" && gvk.Kind != "Node" {
		u.SetNamespace(defaultNamespace)
	}
	js, err := u.MarshalJSON()
	if err != nil {
		return badInputf("%s: document %d: %w", name, doc, err)
	}
	if gvk.Group == "autoscaling" && gvk.Version == "v1" && gvk.Kind == "HorizontalPodAutoscaler" {
		var h autoscalingv1.HorizontalPodAutoscaler
		if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(autoscalingv1.SchemeGroupVersion), js, &h); err != nil {
			return badInputf("%s: document %d: %s %s: %w", name, doc, gvk.Kind, u.GetName(), err)
		}
		key := "HorizontalPodAutoscaler/" + h.Namespace + "/" + h.Name
		_, again := c.Sources[key]
		c.Sources[key] = name
		c.HPAs = put(c.HPAs, &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: h.ObjectMeta,
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: h.Spec.MinReplicas, MaxReplicas: h.Spec.MaxReplicas,
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference(h.Spec.ScaleTargetRef)}}, again)
		return nil
	}
	known := map[string]bool{
		"/v1/Service": true, "/v1/Node": true, "/v1/Pod": true, "discovery.k8s.io/v1/EndpointSlice": true,
		"apps/v1/Deployment": true, "apps/v1/StatefulSet": true, "apps/v1/DaemonSet": true, "apps/v1/ReplicaSet": true,
		"autoscaling/v2/HorizontalPodAutoscaler": true, "policy/v1/PodDisruptionBudget": true,
	}
	if !known[gvk.Group+"/"+gvk.Version+"/"+gvk.Kind] {
		return nil // ConfigMaps, CRDs and the rest: nothing the placement story reads
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(js, nil, nil)
	if err != nil {
		return badInputf("%s: document %d: %s %s: %w", name, doc, gvk.Kind, u.GetName(), err)
	}
	key := gvk.Kind + "/" + u.GetNamespace() + "/" + u.GetName()
	_, again := c.Sources[key]
	c.Sources[key] = name
	switch o := obj.(type) {
	case *corev1.Service:
		// The apiserver defaults a port's protocol to TCP; manifests usually leave it out.
		for i := range o.Spec.Ports {
			if o.Spec.Ports[i].Protocol == "" {
				o.Spec.Ports[i].Protocol = corev1.ProtocolTCP
			}
		}
		c.Services = put(c.Services, o, again)
	case *corev1.Node:
		c.Nodes = put(c.Nodes, o, again)
	case *corev1.Pod:
		c.Pods = put(c.Pods, o, again)
	case *discoveryv1.EndpointSlice:
		c.EndpointSlices = put(c.EndpointSlices, o, again)
	case *appsv1.Deployment:
		c.Deployments = put(c.Deployments, o, again)
	case *appsv1.StatefulSet:
		c.StatefulSets = put(c.StatefulSets, o, again)
	case *appsv1.DaemonSet:
		c.DaemonSets = put(c.DaemonSets, o, again)
	case *appsv1.ReplicaSet:
		c.ReplicaSets = put(c.ReplicaSets, o, again)
	case *autoscalingv2.HorizontalPodAutoscaler:
		c.HPAs = put(c.HPAs, o, again)
	case *policyv1.PodDisruptionBudget:
		c.PDBs = put(c.PDBs, o, again)
	}
	return nil
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
	if err := loadManifests(&c, []string{path}, stdin, ""); err != nil {
		return nil, err
	}
	if len(c.Nodes) == 0 {
		return nil, badInputf("--nodes-file %s: no Node objects in it", path)
	}
	return c.Nodes, nil
}
