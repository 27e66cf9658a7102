package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var gvrCRD = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// MetalLBCRDsDir is the directory of the pinned MetalLB status CRDs the repository carries (its SOURCE.md says
// which release).
func MetalLBCRDsDir() (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(mod, "crds", "metallb-v0.15.3"), nil
}

// InstallCRDs creates every CustomResourceDefinition in dir's manifests that the apiserver does not have yet,
// and waits until each is established (its resources served). Installing twice is harmless.
func (c *Cluster) InstallCRDs(ctx context.Context, dir string) error {
	objs, err := ReadManifests(dir)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.AdminRESTConfig())
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	ri := dyn.Resource(gvrCRD)
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", o.GetName(), err)
		}
		name := o.GetName()
		if err := Eventually(ctx, time.Minute, 100*time.Millisecond, func() error {
			cur, err := ri.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("CRD %s not established yet", name)
		}); err != nil {
			return err
		}
		c.logf("CRD %s installed from %s", name, dir)
	}
	return nil
}

// CiliumPolicyCRDsDir is the directory of the CiliumL2AnnouncementPolicy CRD the repository carries (its
// SOURCE.md says what it is).
func CiliumPolicyCRDsDir() (string, error) {
	mod, err := ModuleDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(mod, "crds", "cilium-l2announcementpolicy"), nil
}
