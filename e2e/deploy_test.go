package e2e

// Tests of the shipped deploy/ manifests against the harness's real kube-apiserver: every kustomization
// passes `kubectl apply -k --dry-run=server`, the pod template is admitted only thanks to the namespace's
// Pod Security label, and the ServiceAccount's effective rights are exactly the ClusterRole's.

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

const (
	// prometheusOperatorModule holds the operator's CRDs (example/prometheus-operator-crd); fetched through the
	// Go module proxy like any other pinned dependency. The shipped ServiceMonitor's serviceDiscoveryRole needs
	// v0.86.0 or later; deploy/check's go.mod pins the operator's API types at the same version
	// (TestOperatorPinnedOnce). Renovate updates the two together (the line below names the module to it).
	// renovate: datasource=go depName=github.com/prometheus-operator/prometheus-operator
	prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.93.0"
)

// installPrometheusOperatorCRDs installs the PodMonitor, ServiceMonitor and PrometheusRule CRDs of a pinned operator release, so
// the apiserver validates those objects against the operator's real OpenAPI schema.
func installPrometheusOperatorCRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := testContext(t)
	crdDir := prometheusOperatorCRDDir(t)
	// Server-side apply: the CRDs are too big for client-side apply's last-applied annotation.
	if _, err := kubectl(ctx, c, nil, "apply", "--server-side", "--field-manager=e2e-deploy",
		"-f", filepath.Join(crdDir, "monitoring.coreos.com_podmonitors.yaml"),
		"-f", filepath.Join(crdDir, "monitoring.coreos.com_servicemonitors.yaml"),
		"-f", filepath.Join(crdDir, "monitoring.coreos.com_prometheusrules.yaml")); err != nil {
		fatalln(t, err)
	}
	if _, err := kubectl(ctx, c, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/podmonitors.monitoring.coreos.com", "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"); err != nil {
		fatalln(t, err)
	}
}

// prometheusOperatorCRDDir downloads the pinned operator module and returns its directory of CRDs.
func prometheusOperatorCRDDir(t *testing.T) string {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), "go", "mod", "download", "-json", prometheusOperatorModule)
	cmd.Dir = t.TempDir() // outside any module: download only, no go.mod touched
	out, err := cmd.Output()
	if err != nil {
		fatalf(t, "go mod download %s: %v", prometheusOperatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		fatalf(t, "go mod download %s: no directory in %s", prometheusOperatorModule, out)
	}
	return filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
}

// TestDeployManifestsServerDryRun runs the users' install command, `kubectl apply -k <dir>`, with
// --dry-run=server and strict field validation against the real apiserver for every kustomization in deploy/:
// schema, defaulting, admission (Pod Security included) and RBAC object validation all run; nothing is stored.
func TestDeployManifestsServerDryRun(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	installPrometheusOperatorCRDs(t, c)
	for _, dir := range []string{"base", "overlays/prometheus-operator", "examples/tls-basic-auth"} {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			out, err := kubectl(ctx, c, nil, "apply", "-k", filepath.Join(repoDir(t), "deploy", dir),
				"--dry-run=server", "--validate=strict")
			if err != nil {
				fatalln(t, err)
			}
			// One line per object, each "(server dry run)": nothing was skipped.
			objs := renderDeploy(t, c, dir)
			if n := strings.Count(out, "(server dry run)"); n != len(objs) {
				errorf(t, "dry run reported %d objects, kustomize renders %d:\n%s", n, len(objs), out)
			}
		})
	}

	// The check has teeth: the same DaemonSet with one misspelt securityContext field is refused.
	t.Run("misspelt_field_is_refused", func(t *testing.T) {
		ds := renderedDaemonSet(t, c, "base")
		obj, err := json.Marshal(ds)
		if err != nil {
			fatalln(t, err)
		}
		bad := bytes.Replace(obj, []byte(`"readOnlyRootFilesystem"`), []byte(`"readOnlyRootFileSystem"`), 1)
		if bytes.Equal(bad, obj) {
			fatalln(t, "rendered DaemonSet has no readOnlyRootFilesystem to misspell")
		}
		_, err = kubectl(ctx, c, bad, "apply", "-f", "-", "--dry-run=server", "--validate=strict")
		if err == nil || !strings.Contains(err.Error(), "readOnlyRootFileSystem") {
			errorf(t, "server dry run accepted an unknown field: %v", err)
		}
	})
}

// podFromTemplate is the Pod the DaemonSet controller would create from the shipped template.
func podFromTemplate(ds *appsv1.DaemonSet, namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: deployName + "-dryrun", Namespace: namespace, Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
}

// TestDeployPodSecurityLabelIsNeeded dry-runs the Pod the DaemonSet would create. In localtraffic-system
// (labelled enforce=privileged by the base) Pod Security admission accepts it; in a namespace enforcing
// baseline the same Pod is rejected for hostNetwork and its capabilities, which is why the label is shipped.
func TestDeployPodSecurityLabelIsNeeded(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	ds := renderedDaemonSet(t, c, "base")
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}

	// The harness applied deploy/base's Namespace; make sure its label is there as shipped.
	if _, err := kubectl(ctx, c, nil, "apply", "--server-side", "--force-conflicts", "--field-manager=e2e-deploy",
		"-f", filepath.Join(repoDir(t), "deploy", "base", "namespace.yaml")); err != nil {
		fatalln(t, err)
	}
	if _, err := c.Admin().CoreV1().Pods(deployNamespace).Create(ctx, podFromTemplate(ds, deployNamespace), dry); err != nil {
		fatalf(t, "the DaemonSet's pod is not admitted in %s: %v", deployNamespace, err)
	}

	const baseline = "e2e-deploy-baseline"
	_, err := c.Admin().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: baseline, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		_ = c.Admin().CoreV1().Namespaces().Delete(context.Background(), baseline, metav1.DeleteOptions{})
	})
	// There is no controller-manager to create the namespace's default ServiceAccount, and ServiceAccount
	// admission (which runs before Pod Security) would refuse the Pod for lack of one.
	_, err = c.Admin().CoreV1().ServiceAccounts(baseline).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: deployName}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		fatalln(t, err)
	}
	pod := podFromTemplate(ds, baseline)
	_, err = c.Admin().CoreV1().Pods(baseline).Create(ctx, pod, dry)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "hostNetwork") {
		errorf(t, "baseline namespace: want a Pod Security rejection naming hostNetwork, got %v", err)
	}
}

// serviceAccountClient returns a clientset authenticated with a fresh token of the shipped ServiceAccount (the
// TokenRequest API, as the kubelet projects it).
func serviceAccountClient(t *testing.T, c *cluster.Cluster) *kubernetes.Clientset {
	t.Helper()
	exp := int64(3600)
	tr, err := c.Admin().CoreV1().ServiceAccounts(deployNamespace).CreateToken(testContext(t), deployName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		fatalf(t, "token for %s/%s: %v", deployNamespace, deployName, err)
	}
	cfg := c.AdminRESTConfig()
	cfg.BearerToken, cfg.BearerTokenFile = tr.Status.Token, ""
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fatalln(t, err)
	}
	return cs
}

// TestDeployRBACIsExactlyTheClusterRole asks the real authorizer (SubjectAccessReview) about the shipped
// ServiceAccount for a matrix of resources and verbs: allowed must be exactly the ClusterRole's seven grants and
// kube-rbac-proxy's two (the sidecar shares the pod's ServiceAccount: TokenReviews and SubjectAccessReviews).
// Then it makes real calls with the ServiceAccount's token: the granted reads succeed, and what the role lacks
// (writes, secrets, pods, even `get` on Services) comes back 403 Forbidden.
func TestDeployRBACIsExactlyTheClusterRole(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	user := "system:serviceaccount:" + deployNamespace + ":" + deployName
	granted := map[string]bool{
		"/nodes:get": true, "/nodes:list": true, "/nodes:watch": true,
		"/services:list": true, "/services:watch": true,
		"discovery.k8s.io/endpointslices:list": true, "discovery.k8s.io/endpointslices:watch": true,
		"authentication.k8s.io/tokenreviews:create": true, "authorization.k8s.io/subjectaccessreviews:create": true,
		"metallb.io/servicel2statuses:list": true, "metallb.io/servicel2statuses:watch": true,
		"metallb.io/servicebgpstatuses:list": true, "metallb.io/servicebgpstatuses:watch": true,
		"cilium.io/ciliuml2announcementpolicies:list": true, "cilium.io/ciliuml2announcementpolicies:watch": true,
	}
	// Cilium's L2 announcement Leases: list and watch in kube-system only (deploy/base/announcers-rbac.yaml).
	grantedIn := map[string]string{"coordination.k8s.io/leases:list": "kube-system", "coordination.k8s.io/leases:watch": "kube-system"}
	resources := []struct{ group, resource, subresource string }{
		{"", "services", ""}, {"", "services", "status"}, {"discovery.k8s.io", "endpointslices", ""},
		{"", "nodes", ""}, {"", "nodes", "status"}, {"", "nodes", "proxy"}, {"", "pods", ""}, {"", "pods", "exec"},
		{"", "secrets", ""}, {"", "configmaps", ""}, {"", "endpoints", ""}, {"", "namespaces", ""},
		{"", "serviceaccounts", "token"}, {"", "events", ""}, {"coordination.k8s.io", "leases", ""},
		{"apps", "daemonsets", ""}, {"rbac.authorization.k8s.io", "clusterroles", ""},
		{"authentication.k8s.io", "tokenreviews", ""}, {"authorization.k8s.io", "subjectaccessreviews", ""},
		{"authorization.k8s.io", "localsubjectaccessreviews", ""},
		{"metallb.io", "servicel2statuses", ""}, {"metallb.io", "servicebgpstatuses", ""},
		{"cilium.io", "ciliuml2announcementpolicies", ""},
	}
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "impersonate", "escalate", "bind"}
	var allowed []string
	for _, r := range resources {
		for _, v := range verbs {
			for _, ns := range []string{"", "kube-system", deployNamespace} {
				sar, err := c.Admin().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
					Spec: authorizationv1.SubjectAccessReviewSpec{
						User:   user,
						Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"},
						ResourceAttributes: &authorizationv1.ResourceAttributes{
							Namespace: ns, Verb: v, Group: r.group, Resource: r.resource, Subresource: r.subresource,
						},
					},
				}, metav1.CreateOptions{})
				if err != nil {
					fatalf(t, "SubjectAccessReview: %v", err)
				}
				key := r.group + "/" + r.resource + ":" + v
				if r.subresource != "" {
					key = r.group + "/" + r.resource + "/" + r.subresource + ":" + v
				}
				want := granted[key] || (grantedIn[key] != "" && grantedIn[key] == ns)
				if sar.Status.Allowed != want {
					errorf(t, "%s %s in namespace %q: allowed=%v, want %v (%s)", v, key, ns, sar.Status.Allowed, want, sar.Status.Reason)
				}
				if sar.Status.Allowed && !slices.Contains(allowed, key) {
					allowed = append(allowed, key)
				}
			}
		}
	}
	if len(allowed) != len(granted)+len(grantedIn) {
		errorf(t, "authorizer allows %v, want exactly the %d grants of the ClusterRole and the %d of the announcers' Role",
			allowed, len(granted), len(grantedIn))
	}

	sa := serviceAccountClient(t, c)
	// What the exporter does must work with this token (else the 403s below would prove nothing).
	if _, err := sa.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		errorf(t, "list services as the ServiceAccount: %v", err)
	}
	if _, err := sa.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		errorf(t, "list endpointslices as the ServiceAccount: %v", err)
	}
	if _, err := sa.CoreV1().Nodes().Get(ctx, c.Nodes()[0].Name, metav1.GetOptions{}); err != nil {
		errorf(t, "get node as the ServiceAccount: %v", err)
	}
	w, err := sa.CoreV1().Services("").Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr(int64(1))})
	if err != nil {
		errorf(t, "watch services as the ServiceAccount: %v", err)
	} else {
		w.Stop()
	}

	// A Service and an EndpointSlice to try writes on, created by the admin.
	const ns = "e2e-deploy-rbac"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() { _ = c.Admin().CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	svc, err := c.Admin().CoreV1().Services(ns).Create(ctx, cluster.NewService(ns, "target", corev1.ServiceTypeClusterIP), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		fatalln(t, err)
	}
	if err != nil {
		svc, _ = c.Admin().CoreV1().Services(ns).Get(ctx, "target", metav1.GetOptions{})
	}
	refused := map[string]func() error{
		"get service (only list/watch granted)": func() error {
			_, err := sa.CoreV1().Services(ns).Get(ctx, "target", metav1.GetOptions{})
			return err
		},
		"update service": func() error {
			s := svc.DeepCopy()
			s.Labels = map[string]string{"touched": "by-exporter"}
			_, err := sa.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		},
		"delete service": func() error {
			return sa.CoreV1().Services(ns).Delete(ctx, "target", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
		"create endpointslice": func() error {
			_, err := sa.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: "forged", Labels: map[string]string{discoveryv1.LabelServiceName: "target"}},
				AddressType: discoveryv1.AddressTypeIPv4,
			}, metav1.CreateOptions{})
			return err
		},
		"list secrets": func() error {
			_, err := sa.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list pods": func() error {
			_, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		},
		"patch node": func() error {
			_, err := sa.CoreV1().Nodes().Patch(ctx, c.Nodes()[0].Name, "application/merge-patch+json",
				[]byte(`{"metadata":{"labels":{"touched":"by-exporter"}}}`), metav1.PatchOptions{})
			return err
		},
	}
	for what, call := range refused {
		if err := call(); !apierrors.IsForbidden(err) {
			errorf(t, "%s as the ServiceAccount: want 403 Forbidden from the authorizer, got %v", what, err)
		}
	}
}
