package e2e

// The install lines of README.md and deploy/README.md on a cluster whose Pod Security admission enforces
// baseline by default (the controller cluster's apiserver runs with that AdmissionConfiguration, kube-system
// exempt, as many managed clusters): the shipped Namespace, labelled privileged, is created before the DaemonSet,
// so the DaemonSet controller's pods are admitted and `helm install --wait` and `kubectl rollout status` return.
// The order the README used to give (helm's --create-namespace, label afterwards) is the control: every pod the
// DaemonSet controller tries is refused by Pod Security, and `helm install --wait` times out.
//
// What --wait shows here: admission (real Pod Security, real DaemonSet controller, real scheduler) and the
// DaemonSet's status as helm's own ready checker reads it. Pods become Ready because the harness's node agents
// play the kubelet (package nodeagent: a network namespace and stand-in servers per pod, no images, no probes),
// so it does not show that the images pull or the containers start; e2e/deploy_pod_test.go runs the exporter
// as the pod would, and nothing here runs a container engine.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// helmConfig is helm's action configuration for namespace ns with the harness's admin kubeconfig (helm's
// --kubeconfig and -n).
func helmConfig(t *testing.T, c *cluster.Cluster, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig := c.AdminKubeconfig()
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", t.Logf); err != nil {
		fatalf(t, "helm configuration: %v", err)
	}
	return cfg
}

// helmInstallWait is `helm install <release> deploy/helm/localtraffic-exporter -n <ns> --wait --timeout
// <timeout>` (and --create-namespace when createNS) through helm's SDK.
func helmInstallWait(t *testing.T, c *cluster.Cluster, release, ns string, createNS bool, timeout time.Duration) error {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(repoDir(t), "deploy", "helm", "localtraffic-exporter"))
	if err != nil {
		fatalf(t, "load chart: %v", err)
	}
	install := action.NewInstall(helmConfig(t, c, ns))
	install.ReleaseName, install.Namespace, install.CreateNamespace = release, ns, createNS
	install.Wait, install.Timeout = true, timeout
	_, err = install.RunWithContext(testContext(t), chrt, map[string]any{})
	return err
}

// shippedNamespace is deploy/base/namespace.yaml under another name: localtraffic-system itself holds the harness's
// exporter identity.
func shippedNamespace(t *testing.T, name string) *corev1.Namespace {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoDir(t), "deploy", "base", "namespace.yaml"))
	if err != nil {
		fatalln(t, err)
	}
	var ns corev1.Namespace
	if err := yaml.UnmarshalStrict(b, &ns); err != nil {
		fatalf(t, "deploy/base/namespace.yaml: %v", err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		fatalf(t, "deploy/base/namespace.yaml enforces %q, want privileged", ns.Labels["pod-security.kubernetes.io/enforce"])
	}
	ns.Name = name
	return &ns
}

// uninstallHelm is `helm uninstall <release> -n <ns>`, then waits until the DaemonSet's pods are gone: they hold
// the nodes' host ports 9746 and 9747, which the next install's pods need. The namespace stays: no namespace
// controller runs in the harness to finish deleting one.
func uninstallHelm(t *testing.T, c *cluster.Cluster, release, ns string) {
	t.Cleanup(func() {
		if _, err := action.NewUninstall(helmConfig(t, c, ns)).Run(release); err != nil {
			errorf(t, "helm uninstall %s: %v", release, err)
		}
		cleanupDaemonSets(t, c, ns, nil)
	})
}

// daemonSetPodsReady waits until every node of the cluster has a Ready pod of the DaemonSet in ns.
func daemonSetPodsReady(t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	eventually(t, time.Minute, "a Ready pod on every node", func() error {
		pods, err := c.Admin().CoreV1().Pods(ns).List(testContext(t), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=exporter"})
		if err != nil {
			return err
		}
		ready := map[string]bool{}
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready[p.Spec.NodeName] = true
				}
			}
		}
		if len(ready) != len(c.Nodes()) {
			return fmt.Errorf("ready on %d of %d nodes", len(ready), len(c.Nodes()))
		}
		return nil
	})
}

// podSecurityRefusals returns the DaemonSet controller's FailedCreate events in ns that name Pod Security.
func podSecurityRefusals(ctx context.Context, c *cluster.Cluster, ns string) ([]string, error) {
	evs, err := c.Admin().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreate"})
	if err != nil {
		return nil, err
	}
	var msgs []string
	for _, e := range evs.Items {
		if strings.Contains(e.Message, `violates PodSecurity "baseline:latest"`) {
			msgs = append(msgs, e.Message)
		}
	}
	return msgs, nil
}

func TestDeployInstallsWhereBaselineIsEnforced(t *testing.T) {
	c := controllerCluster(t)
	ctx := testContext(t)

	// README: kubectl apply -f deploy/base/namespace.yaml, then helm install -n <it> --wait.
	t.Run("helm_install_wait_into_the_shipped_namespace", func(t *testing.T) {
		const ns = "lt-psa-helm"
		if _, err := c.Admin().CoreV1().Namespaces().Create(ctx, shippedNamespace(t, ns), metav1.CreateOptions{}); err != nil {
			fatalln(t, err)
		}
		uninstallHelm(t, c, "lt-psa", ns)
		start := time.Now()
		if err := helmInstallWait(t, c, "lt-psa", ns, false, 3*time.Minute); err != nil {
			refused, _ := podSecurityRefusals(ctx, c, ns)
			fatalf(t, "helm install --wait: %v (Pod Security refusals: %q)", err, refused)
		}
		t.Logf("helm install --wait returned after %s", time.Since(start).Round(time.Second))
		daemonSetPodsReady(t, c, ns)
	})

	// The control: the namespace helm's --create-namespace makes carries no label, baseline applies, every pod
	// is refused and --wait times out.
	t.Run("helm_create_namespace_is_refused", func(t *testing.T) {
		const ns = "lt-psa-helm-unlabelled"
		uninstallHelm(t, c, "lt-psa-unlabelled", ns)
		err := helmInstallWait(t, c, "lt-psa-unlabelled", ns, true, 20*time.Second)
		if err == nil {
			fatalln(t, "helm install --wait succeeded in an unlabelled namespace: does the apiserver enforce baseline?")
		}
		t.Logf("helm install --wait: %v", err)
		eventually(t, 30*time.Second, "FailedCreate events naming Pod Security", func() error {
			msgs, err := podSecurityRefusals(ctx, c, ns)
			if err != nil {
				return err
			}
			if len(msgs) == 0 || !strings.Contains(msgs[0], "hostNetwork") {
				return fmt.Errorf("no FailedCreate event naming baseline and hostNetwork: %q", msgs)
			}
			t.Logf("the DaemonSet controller: %s", msgs[0])
			return nil
		})
	})

	// `kubectl apply -k deploy/base`: its Namespace comes first in kustomize's output and carries the label.
	// An overlay renames the objects (localtraffic-system and the ClusterRoles hold the harness's own exporter).
	t.Run("kubectl_apply_k", func(t *testing.T) {
		const ns = "lt-psa-kustomize"
		dir := t.TempDir()
		base, err := filepath.Rel(dir, filepath.Join(repoDir(t), "deploy", "base"))
		if err != nil {
			fatalln(t, err)
		}
		overlay := fmt.Sprintf("resources: [%s]\nnamespace: %s\nnamePrefix: psa-\n", base, ns)
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
			fatalln(t, err)
		}
		t.Cleanup(func() {
			cleanupDaemonSets(t, c, ns, nil)
			if _, err := kubectl(context.Background(), c, nil, "delete", "-k", dir, "--wait=false", "--ignore-not-found"); err != nil {
				errorf(t, "kubectl delete -k: %v", err)
			}
		})
		out, err := kubectl(ctx, c, nil, "apply", "-k", dir)
		if err != nil {
			fatalln(t, err)
		}
		if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "namespace/"+ns+" ") {
			errorf(t, "kubectl apply -k did not create the namespace first:\n%s", out)
		}
		if out, err := kubectl(ctx, c, nil, "rollout", "status", "-n", ns, "daemonset/psa-localtraffic-exporter", "--timeout=3m"); err != nil {
			refused, _ := podSecurityRefusals(ctx, c, ns)
			fatalf(t, "kubectl rollout status: %v\n%s\nPod Security refusals: %q", err, out, refused)
		}
		daemonSetPodsReady(t, c, ns)
	})
}
