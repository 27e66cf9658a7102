package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// rbacKinds are the identity and permission objects the harness takes from deploy/base. Everything else there
// (the DaemonSet, the metrics Service) needs a kubelet, so the harness runs the exporter itself instead.
var rbacKinds = map[string]schema.GroupVersionResource{
	"Namespace":          {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// DeployBaseDir returns the repository's deploy/base directory.
func DeployBaseDir() (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(mod), "deploy", "base"), nil
}

// ReadManifests decodes every YAML document of the *.yaml and *.yml files in dir (sorted by name).
func ReadManifests(dir string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	sort.Strings(files)
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decode %s: %w", f, err)
			}
			if len(obj) == 0 {
				continue
			}
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
	return objs, nil
}

// applyExporterRBAC creates the exporter's namespace, ServiceAccount, ClusterRole and binding from the shipped
// manifests in deploy/base, so the real authorizer checks the shipped least-privilege rules. Until the deploy
// manifests exist it creates equivalent objects itself (and says so in the log).
func (c *Cluster) applyExporterRBAC(ctx context.Context) error {
	dir, err := DeployBaseDir()
	if err != nil {
		return err
	}
	objs, err := ReadManifests(dir)
	if err != nil {
		return err
	}
	var rbac []*unstructured.Unstructured
	hasRole := false
	for _, o := range objs {
		if _, ok := rbacKinds[o.GetKind()]; ok {
			rbac = append(rbac, o)
			hasRole = hasRole || o.GetKind() == "ClusterRole"
		}
	}
	if !hasRole {
		c.logf("deploy/base has no ClusterRole yet: using the harness's copy of the exporter RBAC")
		rbac = fallbackRBAC()
	} else {
		c.logf("applying %d RBAC objects from %s", len(rbac), dir)
	}
	// Namespaces first, so namespaced objects find theirs.
	sort.SliceStable(rbac, func(i, j int) bool {
		return rbac[i].GetKind() == "Namespace" && rbac[j].GetKind() != "Namespace"
	})
	if err := c.EnsureNamespace(ctx, ExporterNamespace); err != nil {
		return err
	}
	return c.Apply(ctx, rbac)
}

// Apply creates each object, or replaces it when it exists. Only the kinds the harness knows (Namespace,
// ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding) are accepted; use the clientset for others.
func (c *Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(c.AdminRESTConfig())
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	for _, o := range objs {
		gvr, ok := rbacKinds[o.GetKind()]
		if !ok {
			return fmt.Errorf("apply %s %s: kind not supported by the harness", o.GetKind(), o.GetName())
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		_, err := ri.Create(ctx, o, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			cur, err = ri.Get(ctx, o.GetName(), metav1.GetOptions{})
			if err == nil {
				o = o.DeepCopy()
				o.SetResourceVersion(cur.GetResourceVersion())
				_, err = ri.Update(ctx, o, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// fallbackRBAC mirrors what deploy/base grants: list/watch Services and EndpointSlices,
// get/list/watch Nodes, nothing more.
func fallbackRBAC() []*unstructured.Unstructured {
	obj := func(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }
	return []*unstructured.Unstructured{
		obj(map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount",
			"metadata": map[string]any{"name": ExporterServiceAccount, "namespace": ExporterNamespace},
		}),
		obj(map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
			"metadata": map[string]any{"name": "localtraffic-exporter"},
			"rules": []any{
				map[string]any{"apiGroups": []any{""}, "resources": []any{"services"}, "verbs": []any{"list", "watch"}},
				map[string]any{"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": []any{"list", "watch"}},
				map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"get", "list", "watch"}},
			},
		}),
		obj(map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": "localtraffic-exporter"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "localtraffic-exporter"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": ExporterServiceAccount, "namespace": ExporterNamespace}},
		}),
	}
}
