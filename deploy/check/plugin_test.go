package check

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestAuditRBAC: deploy/audit-rbac renders to the one ClusterRole localtraffic-audit, read-only (list only, no
// secrets, no wildcards). Which resources it lists is checked against the plugin's calls in
// cmd/kubectl-localtraffic/rbac_test.go.
func TestAuditRBAC(t *testing.T) {
	objs := render(t, "audit-rbac")
	if len(objs) != 1 {
		t.Fatalf("deploy/audit-rbac renders %d objects, want the ClusterRole alone", len(objs))
	}
	var role rbacv1.ClusterRole
	decode(t, find(t, objs, "ClusterRole", "localtraffic-audit"), &role)
	if role.AggregationRule != nil {
		t.Error("must not aggregate")
	}
	for _, r := range role.Rules {
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
