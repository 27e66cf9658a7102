package collector

import corev1 "k8s.io/api/core/v1"

const (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol
)

// allSelection runs every collector with every series: what docs/metrics.md lists.
func allSelection() Selection {
	s := Selection{Enabled: map[string]bool{}, RulesPerPort: true}
	for _, e := range Catalog() {
		s.Enabled[e.Name] = true
	}
	return s
}
