package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
	"github.com/localtraffic/localtraffic-exporter/e2e/netns"
)

// ruleDumps are the reads the exporter's rule readers run (and the image ships): each must see the marker
// rule the test programs with full privileges.
var ruleDumps = []struct {
	name string
	args []string
	mark string
}{
	{"iptables-legacy-save", []string{"-t", "filter"}, "KUBE-DEPLOY-LEGACY"},
	{"iptables-nft-save", []string{"-t", "filter"}, "KUBE-DEPLOY-NFT"},
	{"iptables-nft", []string{"-t", "filter", "-S", "KUBE-DEPLOY-NFT"}, "-A KUBE-DEPLOY-NFT -j DROP"},
	{"nft", []string{"-j", "list", "table", "ip", "kube-proxy"}, `"kube-proxy"`},
}

// shippedContainerSecurity reads the container's securityContext straight from deploy/base/daemonset.yaml
// (kustomize does not touch it in the base).
func shippedContainerSecurity(t *testing.T) *corev1.SecurityContext {
	t.Helper()
	f, err := os.Open(filepath.Join(repoDir(t), "deploy", "base", "daemonset.yaml"))
	if err != nil {
		fatalln(t, err)
	}
	defer f.Close()
	var ds appsv1.DaemonSet
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&ds); err != nil {
		fatalf(t, "decode daemonset.yaml: %v", err)
	}
	sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		fatalf(t, "container securityContext %+v: want capabilities drop [ALL]", sc)
	}
	return sc
}

// dumpWith runs one rule dump in ns as UID 0 restricted to caps, with no_new_privs, as the container runs.
func dumpWith(ctx context.Context, ns string, caps []corev1.Capability, name string, args ...string) (string, error) {
	bounding := "-all"
	for _, c := range caps {
		bounding += ",+" + strings.ToLower(string(c))
	}
	full := append([]string{"--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=" + bounding, "--", name}, args...)
	return netns.Output(ctx, ns, "setpriv", full...)
}

// TestDeployCapabilitiesAreNeededAndEnough proves the DaemonSet's capability list is minimal and sufficient for
// the rule readers: in a network namespace holding legacy iptables, nft-backend iptables and nftables rules,
// every dump the image's readers run succeeds with exactly the shipped capabilities, and removing any single
// one of them makes at least one dump fail with a permission error.
func TestDeployCapabilitiesAreNeededAndEnough(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	for _, d := range append(ruleDumps, struct {
		name string
		args []string
		mark string
	}{"setpriv", nil, ""}) {
		if _, err := exec.LookPath(d.name); err != nil {
			fatalf(t, "%s not installed (run scripts/install-deps.sh packages, or e2e/run-e2e.sh which calls it): %v", d.name, err)
		}
	}
	caps := shippedContainerSecurity(t).Capabilities.Add
	if len(caps) == 0 {
		fatalln(t, "the DaemonSet adds no capability: no rule reader can work")
	}

	// A namespace of our own, named so the harness's Reap removes it if this run is killed.
	ns := fmt.Sprintf("%s%d-deploycaps", cluster.Prefix, os.Getpid())
	if err := netns.Add(ctx, ns); err != nil {
		fatalln(t, err)
	}
	t.Cleanup(func() {
		if err := netns.Delete(context.Background(), ns); err != nil {
			errorf(t, "delete netns: %v", err)
		}
	})
	for _, cmd := range [][]string{
		{"iptables-legacy", "-t", "filter", "-N", "KUBE-DEPLOY-LEGACY"},
		{"iptables-legacy", "-t", "filter", "-A", "KUBE-DEPLOY-LEGACY", "-j", "DROP"},
		{"iptables-nft", "-t", "filter", "-N", "KUBE-DEPLOY-NFT"},
		{"iptables-nft", "-t", "filter", "-A", "KUBE-DEPLOY-NFT", "-j", "DROP"},
		{"nft", "add", "table", "ip", "kube-proxy"},
		{"nft", "add", "chain", "ip", "kube-proxy", "deploy-test"},
	} {
		if _, err := netns.Output(ctx, ns, cmd[0], cmd[1:]...); err != nil {
			fatalf(t, "program test rules: %v", err)
		}
	}

	for _, d := range ruleDumps {
		out, err := dumpWith(ctx, ns, caps, d.name, d.args...)
		if err != nil {
			errorf(t, "with the shipped capabilities %v: %v", caps, err)
		} else if !strings.Contains(out, d.mark) {
			errorf(t, "with the shipped capabilities %v, %s does not show %s:\n%s", caps, d.name, d.mark, out)
		}
	}
	for i, removed := range caps {
		fewer := slices.Delete(slices.Clone(caps), i, i+1)
		var failed []string
		for _, d := range ruleDumps {
			if _, err := dumpWith(ctx, ns, fewer, d.name, d.args...); err != nil {
				failed = append(failed, d.name)
			}
		}
		if len(failed) == 0 {
			errorf(t, "capability %s is not needed: every rule dump works with %v", removed, fewer)
		} else {
			t.Logf("without %s: %v fail", removed, failed)
		}
	}
}
