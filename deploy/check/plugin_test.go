package check

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestAuditRBAC: deploy/audit-rbac renders to the ClusterRole localtraffic-audit and the Role
// localtraffic-audit-announcers in kube-system (Cilium's L2 announcement Leases), both read-only (list only, no
// secrets, no wildcards) and unbound (the user binds them to the CI identity). Which resources they list is
// checked against the plugin's calls in cmd/kubectl-localtraffic/internal/clusterview/rbac_test.go.
func TestAuditRBAC(t *testing.T) {
	objs := render(t, "audit-rbac")
	if len(objs) != 2 {
		t.Fatalf("deploy/audit-rbac renders %d objects, want the ClusterRole and the Role", len(objs))
	}
	var role rbacv1.ClusterRole
	decode(t, find(t, objs, "ClusterRole", "localtraffic-audit"), &role)
	if role.AggregationRule != nil {
		t.Error("must not aggregate")
	}
	var leases rbacv1.Role
	decode(t, find(t, objs, "Role", "localtraffic-audit-announcers"), &leases)
	if leases.Namespace != "kube-system" {
		t.Errorf("Role in namespace %q, want kube-system (Cilium's default)", leases.Namespace)
	}
	for _, r := range append(role.Rules, leases.Rules...) {
		if !slices.Equal(r.Verbs, []string{"list"}) {
			t.Errorf("rule %+v: verbs %v, want list only", r, r.Verbs)
		}
		for _, res := range r.Resources {
			if res == "*" || res == "secrets" || strings.Contains(res, "/") {
				t.Errorf("rule grants %q", res)
			}
		}
		if slices.Contains(r.APIGroups, "*") {
			t.Errorf("wildcard API group in %+v", r)
		}
	}
}
