package check

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The Event writer's objects: its Lease's Role and binding, its Events' and /episodes' ClusterRole and binding.
var eventsObjects = []string{
	"Role " + namespace + "/" + appName + "-events", "RoleBinding " + namespace + "/" + appName + "-events",
	"ClusterRole /" + appName + "-events", "ClusterRoleBinding /" + appName + "-events",
}

// writerPieces is what a rendering has of the Event writer: its objects, the flag and the pod's name and
// namespace in the exporter's environment.
func writerPieces(t *testing.T, objs map[string]map[string]any) []string {
	t.Helper()
	var got []string
	for _, k := range eventsObjects {
		if _, ok := objs[k]; ok {
			got = append(got, k)
		}
	}
	ds := objs["DaemonSet "+namespace+"/"+appName]
	c := dig(ds, "spec", "template", "spec").(map[string]any)["containers"].([]any)[0].(map[string]any)
	for _, a := range c["args"].([]any) {
		if strings.HasPrefix(a.(string), "--events.") {
			got = append(got, a.(string))
		}
	}
	for _, e := range c["env"].([]any) {
		if n := e.(map[string]any)["name"].(string); n == "POD_NAME" || n == "POD_NAMESPACE" {
			got = append(got, "env "+n+"="+fmt.Sprint(dig(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath")))
		}
	}
	return got
}

// TestEventsOptIn: off (the chart's default, deploy/base) renders nothing of the Event writer; on
// (events.enabled, deploy/overlays/events) renders all of it, and the exporter's own ClusterRole the same as off.
func TestEventsOptIn(t *testing.T) {
	on := append(slices.Clone(eventsObjects), "--events.write", "env POD_NAME=metadata.name", "env POD_NAMESPACE=metadata.namespace")
	for _, c := range []struct {
		what string
		objs map[string]map[string]any
		want []string
	}{
		{"the chart's defaults", comparable(t, mustRenderChart(t, nil)), nil},
		{"deploy/base", comparable(t, render(t, "base")), nil},
		{"events.enabled", comparable(t, mustRenderChart(t, values(t, "events: {enabled: true}"))), on},
		{"deploy/overlays/events", comparable(t, render(t, "overlays/events")), on},
	} {
		if got := writerPieces(t, c.objs); !slices.Equal(got, c.want) {
			t.Errorf("%s renders of the Event writer %v, want %v", c.what, got, c.want)
		}
	}
	base := comparable(t, render(t, "base"))["ClusterRole /"+appName]
	if got := comparable(t, render(t, "overlays/events"))["ClusterRole /"+appName]; !reflect.DeepEqual(got, base) {
		t.Errorf("the events overlay changes the exporter's ClusterRole: %v", got)
	}
}

// TestEventsRBAC: the writer's Role grants its Lease only (create, and get and update by name) in its own
// namespace, its ClusterRole Events' create, the pods' list and ReplicaSets' get its notes read, and GET
// /episodes, both bound to the exporter's ServiceAccount; nothing else. The chart grants the same.
func TestEventsRBAC(t *testing.T) {
	objs := render(t, "overlays/events")
	var role rbacv1.Role
	decode(t, find(t, objs, "Role", appName+"-events"), &role)
	wantRole := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"localtraffic-exporter-events"}, Verbs: []string{"get", "update"}},
	}
	if role.Namespace != namespace || !reflect.DeepEqual(role.Rules, wantRole) {
		t.Errorf("Role %s grants %+v, want %+v", role.Namespace, role.Rules, wantRole)
	}
	var cr rbacv1.ClusterRole
	decode(t, find(t, objs, "ClusterRole", appName+"-events"), &cr)
	wantCR := []rbacv1.PolicyRule{
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get"}},
		{NonResourceURLs: []string{"/episodes"}, Verbs: []string{"get"}},
	}
	if !reflect.DeepEqual(cr.Rules, wantCR) {
		t.Errorf("ClusterRole grants %+v, want %+v", cr.Rules, wantCR)
	}
	var chartCR rbacv1.ClusterRole
	decode(t, find(t, mustRenderChart(t, values(t, "events: {enabled: true}")), "ClusterRole", appName+"-events"), &chartCR)
	if !reflect.DeepEqual(chartCR.Rules, wantCR) {
		t.Errorf("the chart's ClusterRole grants %+v, want %+v", chartCR.Rules, wantCR)
	}
	subj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: appName, Namespace: namespace}}
	var rb rbacv1.RoleBinding
	decode(t, find(t, objs, "RoleBinding", appName+"-events"), &rb)
	var crb rbacv1.ClusterRoleBinding
	decode(t, find(t, objs, "ClusterRoleBinding", appName+"-events"), &crb)
	if rb.RoleRef.Name != appName+"-events" || rb.RoleRef.Kind != "Role" || !slices.Equal(rb.Subjects, subj) ||
		crb.RoleRef.Name != appName+"-events" || crb.RoleRef.Kind != "ClusterRole" || !slices.Equal(crb.Subjects, subj) {
		t.Errorf("bindings %+v, %+v: want the writer's roles bound to the exporter's ServiceAccount", rb, crb)
	}
	// A renamed release names its Lease and peers' Service after itself; without kube-rbac-proxy peers are asked
	// over http.
	ds := comparable(t, mustRenderChart(t, values(t, "fullnameOverride: lt\nevents: {enabled: true}\nkubeRBACProxy: {enabled: false}")))["DaemonSet "+namespace+"/lt"]
	c := dig(ds, "spec", "template", "spec").(map[string]any)["containers"].([]any)[0].(map[string]any)
	var args []string
	for _, a := range c["args"].([]any) {
		if strings.HasPrefix(a.(string), "--events.") {
			args = append(args, a.(string))
		}
	}
	want := []string{"--events.write", "--events.lease-name=lt-events", "--events.peers-service=" + namespace + "/lt", "--events.peers-scheme=http"}
	if !slices.Equal(args, want) {
		t.Errorf("renamed, without kube-rbac-proxy: %v, want %v", args, want)
	}
	if _, err := renderChart(t, values(t, "events: {enabled: true}\nkubeRBACProxy: {enabled: false}\nwebConfig: {existingSecret: web}")); err == nil {
		t.Error("events.enabled with the web config's basic auth rendered: the leader would be refused")
	}
}
