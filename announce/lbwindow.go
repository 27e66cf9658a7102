package announce

import (
	"strconv"
	"strings"
	"time"
)

// CheckWindow is how long a Service's load balancer takes to drain a node once its health check fails, as the
// Service's cloud annotations configure it: the check's interval × its unhealthy threshold. The kubectl plugin
// predicts a drain's window with it, and the exporter exports it beside the drain it measured.
type CheckWindow struct {
	Interval  time.Duration
	Threshold int
	// Source names the annotations it was read from.
	Source string
}

// Seconds is interval × threshold.
func (w CheckWindow) Seconds() float64 { return w.Interval.Seconds() * float64(w.Threshold) }

// lbCheckWindowAnnotations are the cloud controllers' annotations for a health check's interval and unhealthy
// threshold (the interval in seconds, or a Go duration for Hetzner). Each is under a prefix the exporter's
// Service transform keeps (providerPrefixes).
var lbCheckWindowAnnotations = []struct{ interval, threshold string }{
	{"service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval", "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold"},
	{"service.beta.kubernetes.io/do-loadbalancer-healthcheck-check-interval-seconds", "service.beta.kubernetes.io/do-loadbalancer-healthcheck-unhealthy-threshold"},
	{"load-balancer.hetzner.cloud/health-check-interval", "load-balancer.hetzner.cloud/health-check-retries"},
}

// CheckWindowOf reads a Service's health check window from its annotations; ok is false when none of the known
// pairs says both. Defaults are not guessed: a controller's default changes with its version and load
// balancer type.
func CheckWindowOf(ann map[string]string) (CheckWindow, bool) {
	for _, a := range lbCheckWindowAnnotations {
		iv, ok1 := ann[a.interval]
		th, ok2 := ann[a.threshold]
		if !ok1 || !ok2 {
			continue
		}
		interval, err := time.ParseDuration(strings.TrimSpace(iv))
		if err != nil {
			secs, err := strconv.Atoi(strings.TrimSpace(iv))
			if err != nil || secs <= 0 {
				continue
			}
			interval = time.Duration(secs) * time.Second
		}
		n, err := strconv.Atoi(strings.TrimSpace(th))
		if err != nil || n <= 0 || interval <= 0 {
			continue
		}
		return CheckWindow{Interval: interval, Threshold: n, Source: a.interval + ", " + a.threshold}, true
	}
	return CheckWindow{}, false
}
