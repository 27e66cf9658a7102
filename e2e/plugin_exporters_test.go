package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// TestPluginFromExporters: `status --from-exporters` against deploy/base as installed — on every node the shipped
// pod (the exporter on 127.0.0.1, kube-rbac-proxy on the node's address, both with their manifest's args), the
// DaemonSet object and its pods in the API — run by a user holding only the read-only localtraffic-audit
// ClusterRole plus, in the exporter's namespace, get/list on daemonsets, list on pods and get and create on
// pods/portforward. The real apiserver authorizes each port-forward and connects to the node's kubelet port,
// where the kubelet's own port-forward code (the harness's kubelet stand-in) dials the pod's loopback. The
// OBSERVED cell is filled on every node: no_blackhole where the replica runs, a blackhole reason where the
// NodePort drops. A user without pods/portforward gets one stderr line naming it.
func TestPluginFromExporters(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t)
	ds := renderedDaemonSet(t, c, "base")
	nodes := c.Nodes()

	svc := serviceSpec(t, c, "e2e-plugin-observed", "web", corev1.ServiceTypeNodePort, nil)
	setEndpoints(t, c, svc, ready(startPods(t, c, svc, nodes[0].Name)...))

	// The DaemonSet as installed (no controller runs it here) and, per node, the shipped pod and its Pod object.
	if err := c.EnsureNamespace(ctx, ds.Namespace); err != nil {
		fatalln(t, err)
	}
	if _, err := c.Admin().AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := c.Admin().AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errorf(t, "delete DaemonSet: %v", err)
		}
	})
	stopKubelets, err := c.ServeKubeletLogs(ctx)
	if err != nil {
		fatalln(t, err)
	}
	t.Cleanup(stopKubelets)
	for _, n := range nodes {
		runPodAsShipped(t, c, ds, n, nil)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: shippedPodName(ds, n), Namespace: ds.Namespace,
			Labels: ds.Spec.Template.Labels}, Spec: *ds.Spec.Template.Spec.DeepCopy()}
		if err := c.CreateMirrorPod(ctx, pod, n, fmt.Sprintf("exporter-%s-pod", n.Name)); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() { _ = c.DeleteMirrorPod(ctx, pod.Namespace, pod.Name) })
	}

	p := newPlugin(t, ctx, c)
	p.kubeconfig = pluginUserKubeconfig(t, c, ds.Namespace, "operator", true)
	var last pluginResult
	eventually(t, 90*time.Second, "an OBSERVED cell on every node", func() error {
		last = p.run(t, ctx, "", "status", "-n", svc.Namespace, svc.Name, "--from-exporters", "-o", "json")
		var st observedStatus
		if err := json.Unmarshal([]byte(last.out), &st); err != nil || len(st.Items) != 1 {
			return fmt.Errorf("exit %d, %v: %s%s", last.code, err, last.out, last.errOut)
		}
		for _, n := range st.Items[0].NodeStatuses {
			switch {
			case n.Observed == "":
				return fmt.Errorf("%s: no observation (stderr %q)", n.Node, last.errOut)
			case n.Node == nodes[0].Name && n.Observed != "no_blackhole":
				return fmt.Errorf("%s, where the replica runs: observed %q, want no_blackhole", n.Node, n.Observed)
			case n.Node != nodes[0].Name && n.Observed == "no_blackhole":
				return fmt.Errorf("%s drops the NodePort: observed no_blackhole", n.Node)
			}
		}
		return nil
	})
	if last.code != 1 || last.errOut != "" {
		errorf(t, "exit %d, stderr %q: want 1 (nodes blackhole) and nothing on stderr", last.code, last.errOut)
	}
	p.run(t, ctx, "", "status", "-n", svc.Namespace, svc.Name, "--from-exporters") // the text form, for the log

	p.kubeconfig = pluginUserKubeconfig(t, c, ds.Namespace, "viewer", false)
	r := p.run(t, ctx, "", "status", "-n", svc.Namespace, svc.Name, "--from-exporters")
	want := "you may not get and create pods/portforward in namespace " + ds.Namespace
	if r.code != 1 || !strings.Contains(r.errOut, want) || strings.Count(r.errOut, "\n") != 1 {
		errorf(t, "without pods/portforward: exit %d, stderr %q; want 1 (the blackholes the API shows) and one line saying %q", r.code, r.errOut, want)
	}
}

// observedStatus is the part of `status SERVICE -o json` with the exporters' view (--from-exporters,
// --prometheus) the tests read: each node's observation.
type observedStatus struct {
	Items []struct {
		NodeStatuses []struct {
			Node     string `json:"node"`
			Observed string `json:"observed"`
		} `json:"nodeStatuses"`
	} `json:"items"`
}

// pluginUserKubeconfig is a kubeconfig usable from the host namespace for a ServiceAccount e2e-plugin/<name> bound
// to deploy/audit-rbac's ClusterRole and its Role for Cilium's leases in kube-system (as deploy/audit-rbac says to
// bind them) and, in the exporter's namespace, allowed to find the exporter's pods and, with portForward, to
// port-forward to them.
func pluginUserKubeconfig(t *testing.T, c *cluster.Cluster, exporterNS, name string, portForward bool) string {
	t.Helper()
	ctx := testContext(t)
	if err := c.Apply(ctx, renderDeploy(t, c, "audit-rbac")); err != nil {
		fatalln(t, err)
	}
	token := serviceAccountToken(t, c, "e2e-plugin", name)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "e2e-plugin", Name: name}}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	}
	if portForward {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"get", "create"}})
	}
	rbac := c.Admin().RbacV1()
	objName := "e2e-plugin-" + name
	for _, err := range []error{
		ignoreExists(rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: objName},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "localtraffic-audit"}, Subjects: subject}, metav1.CreateOptions{})),
		ignoreExists(rbac.RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: objName},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "localtraffic-audit-announcers"}, Subjects: subject}, metav1.CreateOptions{})),
		ignoreExists(rbac.Roles(exporterNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: objName}, Rules: rules}, metav1.CreateOptions{})),
		ignoreExists(rbac.RoleBindings(exporterNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: objName},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: objName}, Subjects: subject}, metav1.CreateOptions{})),
	} {
		if err != nil {
			fatalln(t, err)
		}
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(ctx, objName, metav1.DeleteOptions{})
		_ = rbac.RoleBindings("kube-system").Delete(ctx, objName, metav1.DeleteOptions{})
		_ = rbac.Roles(exporterNS).Delete(ctx, objName, metav1.DeleteOptions{})
		_ = rbac.RoleBindings(exporterNS).Delete(ctx, objName, metav1.DeleteOptions{})
	})
	cfg, err := clientcmd.LoadFromFile(c.AdminKubeconfig())
	if err != nil {
		fatalln(t, err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil {
		fatalf(t, "admin kubeconfig has no current context")
	}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{kctx.AuthInfo: {Token: token}}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		fatalln(t, err)
	}
	return path
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
