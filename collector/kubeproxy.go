package collector

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe"
	"github.com/localtraffic/localtraffic-exporter/scrape"
)

var (
	kubeProxyUp = stable(detailed(newMetric("kube_proxy_up", prometheus.GaugeValue,
		"1 when kube-proxy's health server answered 200 with its body on the endpoint.",
		"endpoint"),
		"1 when kube-proxy's health server answered 200 with its body on the endpoint (healthz: fit to receive load-balanced traffic; livez: alive)."))
	kubeProxyResult = detailed(newMetric("kube_proxy_result", prometheus.GaugeValue,
		"The outcome of probing kube-proxy's health server, one-hot over the result label.",
		"endpoint", "result"),
		"The outcome of probing kube-proxy's health server, one-hot over ok, unavailable, empty, invalid, timeout, refused, error.")
	kubeProxyEligible = stable(detailed(newMetric("kube_proxy_node_eligible", prometheus.GaugeValue,
		"1 when the node is eligible for load-balanced traffic, by kube-proxy's /healthz or else the Node."),
		"1 when the node is eligible for load-balanced traffic: /healthz's nodeEligible (kube-proxy 1.28+), else derived from the Node (not deleting, no ToBeDeletedByClusterAutoscaler taint)."))
	kubeProxyHealthy = stable(newMetric("kube_proxy_healthy", prometheus.GaugeValue,
		"1 when kube-proxy reports its rules synced in time: /livez's healthy field (1.33+), else its status code is 200."))
	kubeProxyLastSync = stable(detailed(newMetric("kube_proxy_last_sync_timestamp_seconds", prometheus.GaugeValue,
		"The lastUpdated time kube-proxy's /livez reported."),
		"lastUpdated as /livez reported it. kube-proxy reports the current time while healthy and its real last sync only while unhealthy."))
	kubeProxyDuration = newMetric("kube_proxy_probe_duration_seconds", prometheus.GaugeValue,
		"How long probing kube-proxy's health server took.", "endpoint")
	kubeProxyConfigState = detailed(newMetric("kube_proxy_config_state", prometheus.GaugeValue,
		"Where the exporter's view of kube-proxy's configuration comes from, one-hot over the state label.",
		"state"),
		"Where the exporter's view of kube-proxy's configuration (nodePortAddresses, health server address, externalIPs, local traffic detector) comes from, one-hot over read (its /configz answered), last_known (unreadable now: the last read holds), defaults (never read: kube-proxy's defaults are assumed, its local detector unknown) and not_read.")
)

// unixSeconds is defined for every year, unlike UnixNano.
func unixSeconds(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }

// KubeProxy exports kube-proxy's own health as its health server (default :10256) reports it.
type KubeProxy struct{}

// NewKubeProxy returns the kube-proxy collector.
func NewKubeProxy() *KubeProxy { return &KubeProxy{} }

func (*KubeProxy) Name() string { return "kube_proxy" }

func (*KubeProxy) Metrics() []*Metric {
	return []*Metric{kubeProxyUp, kubeProxyResult, kubeProxyEligible, kubeProxyHealthy, kubeProxyLastSync, kubeProxyDuration, kubeProxyConfigState}
}

func (*KubeProxy) Inputs() []scrape.Input {
	return []scrape.Input{scrape.InputNode, scrape.InputKubeProxy}
}

func (*KubeProxy) Update(st *scrape.State, out *Sink) error {
	if st.Dataplane.ReplacesKubeProxy() {
		// No kube-proxy here: nothing to report, and nothing that would fire its alerts.
		return nil
	}
	if st.KubeProxyConfigState != "" {
		for _, s := range scrape.ConfigStates {
			out.send(kubeProxyConfigState, boolFloat(s == st.KubeProxyConfigState), string(s))
		}
	}
	if st.NodeErr != nil {
		return st.NodeErr
	}
	if errors.Is(st.KubeProxy.Err, nodeprobe.ErrHealthServerDisabled) || errors.Is(st.KubeProxy.Err, scrape.ErrNotYetRead) {
		// kube-proxy runs without a health server: nothing to report, and not a failure of the exporter.
		return fmt.Errorf("%w: %w", ErrNoData, st.KubeProxy.Err)
	}
	if st.KubeProxy.Err != nil {
		return st.KubeProxy.Err
	}
	node, healthz, livez := st.Node, st.KubeProxy.Healthz, st.KubeProxy.Livez
	for _, a := range []nodeprobe.KubeProxyHealth{healthz, livez} {
		out.send(kubeProxyUp, boolFloat(a.Up()), string(a.Endpoint))
		for _, r := range nodeprobe.Results {
			out.send(kubeProxyResult, boolFloat(a.Result == r), string(a.Endpoint), string(r))
		}
		out.send(kubeProxyDuration, a.Duration.Seconds(), string(a.Endpoint))
	}

	eligible := node.Found && !node.Draining()
	if healthz.NodeEligible != nil {
		eligible = *healthz.NodeEligible
	}
	out.send(kubeProxyEligible, boolFloat(eligible))

	// /livez leaves node eligibility out, so it speaks of kube-proxy's syncing alone.
	if livez.Result == nodeprobe.ResultOK || livez.Result == nodeprobe.ResultUnavailable {
		healthy := livez.Up()
		if livez.Healthy != nil {
			healthy = *livez.Healthy
		}
		out.send(kubeProxyHealthy, boolFloat(healthy))
		// A kube-proxy that never synced reports the zero time: no sync to report, so no series.
		if !livez.LastUpdated.IsZero() {
			out.send(kubeProxyLastSync, unixSeconds(livez.LastUpdated))
		}
	} else {
		// kube-proxy did not answer usably: it is not known to be syncing.
		out.send(kubeProxyHealthy, 0)
	}
	return nil
}
