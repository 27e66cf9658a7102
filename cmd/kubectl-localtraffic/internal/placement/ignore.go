package placement

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// ApplyIgnoreSelector marks as ignored the Services of st whose labels sel selects, as the exporter's
// --services.ignore-selector marks them (kubeview.IgnoredReason: a Service's own annotation still gives the
// reason first). The API does not show the exporter's flags: the user gives status the same selector
// (status --ignore-selector), and the two then fail and page on the same Services. services are the Services
// st was built from; nil or an empty sel changes nothing.
func ApplyIgnoreSelector(st []ServiceStatus, services []*corev1.Service, sel labels.Selector) {
	ignored := ignoredBySelector(services, sel)
	for i := range st {
		if reason, ok := ignored[st[i].Namespace+"/"+st[i].Name]; ok && !st[i].Ignored {
			st[i].Ignored, st[i].IgnoredReason = true, reason
		}
	}
}

// ignoredBySelector returns, by "namespace/name", the reason kubeview.IgnoredReason gives each of services that
// sel ignores (nil when sel selects nothing).
func ignoredBySelector(services []*corev1.Service, sel labels.Selector) map[string]string {
	if sel == nil || sel.Empty() {
		return nil
	}
	out := map[string]string{}
	for _, svc := range services {
		if reason, ok := kubeview.IgnoredReason(svc, sel); ok {
			out[svc.Namespace+"/"+svc.Name] = reason
		}
	}
	return out
}
