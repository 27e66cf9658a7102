package collector

import corev1 "k8s.io/api/core/v1"

const (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol
)
