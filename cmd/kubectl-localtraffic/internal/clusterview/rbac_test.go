package clusterview

import (
	"bytes"
	"context"
	"os"
	"slices"
	"sort"
	"testing"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	sigsyaml "sigs.k8s.io/yaml"
)

// The ClusterRole localtraffic-audit grants exactly the cluster-wide calls live mode makes, and the Role
// localtraffic-audit-announcers exactly the calls in Cilium's namespace (its L2 announcement Leases): every
// (namespace, group, resource, verb) the plugin issues against fake apiservers, typed and dynamic, and
// nothing more.
func TestAuditClusterRoleIsExactlyWhatLiveModeUses(t *testing.T) {
	cs := fake.NewClientset(clitest.DrillObjects(true)...)
	dyn := clitest.FakeAnnouncers()
	env := &cli.Env{ErrOut: &bytes.Buffer{},
		Client:  func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return cs, nil },
		Dynamic: func(*genericclioptions.ConfigFlags) (dynamic.Interface, error) { return dyn, nil }}
	flags := &cli.Flags{Kube: genericclioptions.NewConfigFlags(false), AllNamespaces: true}
	if _, _, err := ReadCluster(context.Background(), env, flags, Announcers{CiliumNamespace: "kube-system"}, LoadLive); err != nil {
		t.Fatal(err)
	}
	made := map[string]map[string]bool{} // namespace -> "group/resource:verb"
	for _, act := range append(cs.Actions(), dyn.Actions()...) {
		ns := ""
		if n, ok := act.(k8stesting.ListAction); ok {
			ns = n.GetNamespace()
		}
		if made[ns] == nil {
			made[ns] = map[string]bool{}
		}
		made[ns][act.GetResource().Group+"/"+act.GetResource().Resource+":"+act.GetVerb()] = true
	}
	grants := func(rules []rbacv1.PolicyRule) map[string]bool {
		out := map[string]bool{}
		for _, r := range rules {
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("unexpected rule %+v", r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out[g+"/"+res+":"+v] = true
					}
				}
			}
		}
		return out
	}
	var role rbacv1.ClusterRole
	readYAML(t, "../../../../deploy/audit-rbac/clusterrole.yaml", &role)
	if role.Name != "localtraffic-audit" {
		t.Errorf("ClusterRole is named %q", role.Name)
	}
	var nsRole rbacv1.Role
	readYAML(t, "../../../../deploy/audit-rbac/announcers-role.yaml", &nsRole)
	if nsRole.Name != "localtraffic-audit-announcers" || nsRole.Namespace != "kube-system" {
		t.Errorf("Role is %s/%s", nsRole.Namespace, nsRole.Name)
	}
	keys := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	if got, want := keys(made[""]), keys(grants(role.Rules)); !slices.Equal(got, want) {
		t.Errorf("live mode makes, cluster-wide\n  %v\nthe ClusterRole grants\n  %v", got, want)
	}
	if got, want := keys(made["kube-system"]), keys(grants(nsRole.Rules)); !slices.Equal(got, want) {
		t.Errorf("live mode makes, in kube-system\n  %v\nthe Role grants\n  %v", got, want)
	}
	for ns := range made {
		if ns != "" && ns != "kube-system" {
			t.Errorf("live mode reads in namespace %s, which no role covers", ns)
		}
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict(b, into); err != nil {
		t.Fatal(err)
	}
}
