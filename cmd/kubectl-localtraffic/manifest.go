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

	yaml "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/localtraffic/localtraffic-exporter/kubeview/placement"
)

// badInput is an error in what the user gave us (a file, its YAML, a flag): exit status 2.
type badInput struct{ err error }

func (b badInput) Error() string { return b.err.Error() }
func (b badInput) Unwrap() error { return b.err }

func badInputf(format string, a ...any) error { return badInput{fmt.Errorf(format, a...)} }

// stdinFile is the file name of objects read from standard input ("-f -").
const stdinFile = "stdin"

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
		c.Sources = map[string]placement.Source{}
	}
	for _, f := range files {
		var r io.Reader
		name := f
		if f == "-" {
			r, name = stdin, stdinFile
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
	docs := newDocumentReader(r)
	for doc := 1; ; doc++ {
		raw, line, err := docs.next()
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
		at := position{file: name, doc: doc, line: line + firstContentLine(raw)}
		if u.IsList() {
			at.items = listItemLines(raw, line)
		}
		if err := addObject(c, &u, at, defaultNamespace); err != nil {
			return err
		}
	}
}

// position is where a document was read: the file, the document's index and the line its object starts on,
// and for a List the line each item starts on.
type position struct {
	file  string
	doc   int
	line  int
	items []int
}

func (p position) item(i int) position {
	q := position{file: p.file, doc: p.doc, line: p.line}
	if i < len(p.items) {
		q.line = p.items[i]
	}
	return q
}

// documentReader splits a YAML stream into documents as kubectl does (k8s.io/apimachinery's YAMLReader: a
// line "---", optionally followed by blanks or a comment, separates them) and keeps count of lines, so that a
// finding can name the line its object starts on.
type documentReader struct {
	r    *bufio.Reader
	line int // lines read so far
	eof  bool
}

func newDocumentReader(r *bufio.Reader) *documentReader { return &documentReader{r: r} }

// next returns the next document and the line before its first one (its lines are numbered from there + 1).
func (d *documentReader) next() ([]byte, int, error) {
	if d.eof {
		return nil, 0, io.EOF
	}
	start := d.line
	var buf bytes.Buffer
	for {
		l, err := d.r.ReadBytes('\n')
		if len(l) > 0 {
			d.line++
			if isSeparator(l) {
				return buf.Bytes(), start, nil
			}
			buf.Write(l)
		}
		if errors.Is(err, io.EOF) {
			d.eof = true
			return buf.Bytes(), start, nil
		}
		if err != nil {
			return nil, 0, err
		}
	}
}

func isSeparator(l []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r\n"), []byte("---"))
	if !ok {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
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

// firstContentLine is the 1-based line of a document's first line that is neither blank nor a comment.
func firstContentLine(doc []byte) int {
	for i, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			return i + 1
		}
	}
	return 1
}

// listItemLines returns the line each item of a List document starts on (offset: the line before the
// document), or nil when the document cannot be read as YAML nodes (the objects then point at the List).
func listItemLines(doc []byte, offset int) []int {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil || len(root.Content) == 0 {
		return nil
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != "items" || m.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		var lines []int
		for _, item := range m.Content[i+1].Content {
			lines = append(lines, offset+item.Line)
		}
		return lines
	}
	return nil
}

func addObject(c *placement.Cluster, u *unstructured.Unstructured, at position, defaultNamespace string) error {
	name, doc := at.file, at.doc
	if u.IsList() {
		list, err := u.ToList()
		if err != nil {
			return badInputf("%s: document %d: %w", name, doc, err)
		}
		for i := range list.Items {
			if err := addObject(c, &list.Items[i], at.item(i), defaultNamespace); err != nil {
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
		c.Sources[key] = placement.Source{File: name, Line: at.line}
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
	c.Sources[key] = placement.Source{File: name, Line: at.line}
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
