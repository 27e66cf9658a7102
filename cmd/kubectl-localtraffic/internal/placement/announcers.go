package placement

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// withAnnouncers adds the announcers' records of the Service to each of its per-node states, as the exporter
// adds them to its snapshot's (kubeview.AnnouncerSnapshot.AddTo): the records are the cluster's, the same on
// every node. It returns elsewhere with them.
func withAnnouncers(states map[string]kubeview.ServiceState, elsewhere kubeview.ServiceState, svc *corev1.Service,
	ann kubeview.AnnouncerSnapshot) kubeview.ServiceState {
	for node, ss := range states {
		ann.AddTo(&ss, svc)
		states[node] = ss
	}
	ann.AddTo(&elsewhere, svc)
	return elsewhere
}

// unannouncedSummary is the summary's part for the load balancer IPs nobody announces ("" when none).
func unannouncedSummary(ips []string) string {
	if len(ips) == 0 {
		return ""
	}
	return "; unannounced: no node announces " + strings.Join(ips, ", ") +
		" (its announcer's record names no live holder): every client of it is lost, however many nodes serve"
}
