package placement

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/announce"
)

// kubectl localtraffic status decides a load balancer IP an announcer records on the Service (kube-vip,
// OpenELB, PureLB): the node it names has no replica, so it is a blackhole there, not "drained" by its 503 (the
// announcer reads no health check). The other nodes without a replica stay drained; for the layer 2 announcers
// the node with the replica is out of rotation for the VIP, which is announced elsewhere. MetalLB's and
// Cilium's records are objects of their own, read with announce.List (the status verb's announcers_test.go).
func TestStatusAnnouncedVIP(t *testing.T) {
	withIngress := func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	}
	for _, c := range []struct{ name, key, value string }{
		{"kube-vip", announce.AnnotationKubeVIPHost, "node-2"},
		{"openelb", announce.AnnotationOpenELBLayer2, "node-2"},
		{"purelb", announce.AnnotationPureLBIPv4, "node-2,eth0,192.0.2.10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := nodePortService("checkout", loadBalancer, withIngress, annotated(c.key, c.value))
			s := Status(live(workers(3), svc, deployment("checkout", 1), "node-1"))[0]
			if got := s.Blackholes(); !slices.Equal(got, []string{"node-2"}) {
				t.Errorf("blackholes %v, want node-2 (the announced node without a replica); %q", got, s.Summary)
			}
			if !s.Failing() {
				t.Error("status does not fail")
			}
		})
	}
}
