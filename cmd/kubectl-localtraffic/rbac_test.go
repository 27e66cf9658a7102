package main

import (
	"context"
	"os"
	"slices"
	"sort"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes/fake"
	sigsyaml "sigs.k8s.io/yaml"
)

// The ClusterRole localtraffic-audit grants exactly the calls live mode makes: every (group, resource, verb) the
// plugin issues against a fake apiserver, and nothing more.
func TestAuditClusterRoleIsExactlyWhatLiveModeUses(t *testing.T) {
	cs := fake.NewClientset(drillObjects(true)...)
	if _, err := loadLive(context.Background(), cs, ""); err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for _, a := range cs.Actions() {
		made[a.GetResource().Group+"/"+a.GetResource().Resource+":"+a.GetVerb()] = true
	}
	b, err := os.ReadFile("../../deploy/audit-rbac/clusterrole.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := sigsyaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatal(err)
	}
	if role.Name != "localtraffic-audit" {
		t.Errorf("ClusterRole is named %q", role.Name)
	}
	granted := map[string]bool{}
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					granted[g+"/"+res+":"+v] = true
				}
			}
		}
	}
	keys := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	if !slices.Equal(keys(made), keys(granted)) {
		t.Errorf("live mode makes\n  %v\nthe ClusterRole grants\n  %v", keys(made), keys(granted))
	}
}
