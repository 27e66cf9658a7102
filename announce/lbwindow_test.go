package announce

import (
	"testing"
	"time"
)

func TestCheckWindowOf(t *testing.T) {
	for _, c := range []struct {
		name string
		ann  map[string]string
		want time.Duration
		ok   bool
	}{
		{"aws seconds", map[string]string{"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval": "10",
			"service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold": "3"}, 30 * time.Second, true},
		{"hetzner duration", map[string]string{"load-balancer.hetzner.cloud/health-check-interval": "5s",
			"load-balancer.hetzner.cloud/health-check-retries": " 4 "}, 20 * time.Second, true},
		{"digitalocean", map[string]string{"service.beta.kubernetes.io/do-loadbalancer-healthcheck-check-interval-seconds": "3",
			"service.beta.kubernetes.io/do-loadbalancer-healthcheck-unhealthy-threshold": "2"}, 6 * time.Second, true},
		{"interval alone", map[string]string{"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval": "10"}, 0, false},
		{"threshold not a number", map[string]string{"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval": "10",
			"service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold": "three"}, 0, false},
		{"zero interval", map[string]string{"load-balancer.hetzner.cloud/health-check-interval": "0s",
			"load-balancer.hetzner.cloud/health-check-retries": "3"}, 0, false},
		{"none", nil, 0, false},
	} {
		w, ok := CheckWindowOf(c.ann)
		if ok != c.ok || time.Duration(w.Seconds()*float64(time.Second)) != c.want {
			t.Errorf("%s: %+v %v, want %s %v", c.name, w, ok, c.want, c.ok)
		}
	}
}
