package nodeprobe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// configzGroup is the key kube-proxy registers its configuration under in /configz (component-base's
// configz: {"<group>": <the configuration object>}). v1.37.2 serves the versioned v1alpha1 object
// ("nodePortAddresses": null in iptables mode, ["primary"] in nftables mode; testdata/); encoding/json matches
// keys regardless of case, so releases that served the untagged internal type ("NodePortAddresses") read too.
const configzGroup = "kubeproxy.config.k8s.io"

// DefaultHealthzBindAddress is kube-proxy's default --healthz-bind-address: every address, port 10256.
const DefaultHealthzBindAddress = "0.0.0.0:10256"

// KubeProxyConfig is what the exporter reads of kube-proxy's configuration.
type KubeProxyConfig struct {
	// NodePortAddresses is --nodeport-addresses as configured: CIDRs and the keywords "primary" (the node IP of
	// each family), "localhost" and "all" (kube-proxy 1.37); nil when unset (every address of each family).
	NodePortAddresses []string
	// BindAddress is --bind-address; a specific IP overrides kube-proxy's node IP of its family ("" or
	// 0.0.0.0: it does not).
	BindAddress string
	// HealthzBindAddress is kube-proxy's health server host:port (--healthz-bind-address); "" when disabled.
	HealthzBindAddress string
	// ExternalIPs is false when kube-proxy runs with the AllowServiceExternalIPs feature gate off
	// (pkg/proxy/serviceport.go): it then writes no rule for any spec.externalIPs address.
	ExternalIPs bool
	// DetectLocal is how kube-proxy tells pod traffic from external traffic; nil when its configuration was
	// not read (the exporter then cannot know it).
	DetectLocal *LocalDetector
}

// LocalMode is kube-proxy's --detect-local-mode.
type LocalMode string

// kube-proxy's local detector modes (pkg/proxy/apis/config: LocalMode).
const (
	LocalModeClusterCIDR         LocalMode = "ClusterCIDR"
	LocalModeNodeCIDR            LocalMode = "NodeCIDR"
	LocalModeBridgeInterface     LocalMode = "BridgeInterface"
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
)

// LocalDetector is kube-proxy's local traffic detector (cmd/kube-proxy/app/server_linux.go,
// getLocalDetectors): traffic it calls local ("pod traffic") to a Local Service's external destination is sent
// to every endpoint of the Service, never dropped for lack of a local one. Whatever the mode, kube-proxy also
// sends traffic whose source is one of the node's own addresses to every endpoint (`--src-type LOCAL`).
type LocalDetector struct {
	// Mode is --detect-local-mode; kube-proxy's default is ClusterCIDR. A mode it does not know gives no
	// detector.
	Mode LocalMode
	// ClusterCIDRs is --cluster-cidr (ClusterCIDR mode; kube-proxy uses the first CIDR of each family, and a
	// family without one has no detector).
	ClusterCIDRs []string
	// BridgeInterface is the bridge whose arrivals are pod traffic (BridgeInterface mode).
	BridgeInterface string
	// InterfaceNamePrefix starts the names of the interfaces whose arrivals are pod traffic
	// (InterfaceNamePrefix mode).
	InterfaceNamePrefix string
}

// FamilyCIDR is the CIDR of family ("IPv4" or "IPv6") kube-proxy's detector takes pod traffic from, as
// kube-proxy picks it: the first of that family among the ClusterCIDRs (ClusterCIDR mode) or among podCIDRs
// (the Node's spec.podCIDRs: NodeCIDR mode). "" when the family has no CIDR detector.
func (d LocalDetector) FamilyCIDR(family string, podCIDRs []string) string {
	var cidrs []string
	switch d.Mode {
	case LocalModeClusterCIDR:
		cidrs = d.ClusterCIDRs
	case LocalModeNodeCIDR:
		cidrs = podCIDRs
	default:
		return ""
	}
	for _, c := range cidrs {
		if ip, _, err := net.ParseCIDR(strings.TrimSpace(c)); err == nil && FamilyOf(ip) == family {
			return strings.TrimSpace(c)
		}
	}
	return ""
}

// DefaultKubeProxyConfig is kube-proxy's configuration when nothing says otherwise.
func DefaultKubeProxyConfig() KubeProxyConfig {
	return KubeProxyConfig{HealthzBindAddress: DefaultHealthzBindAddress, ExternalIPs: true}
}

// ReadKubeProxyConfig reads kube-proxy's configuration from its /configz at url.
func ReadKubeProxyConfig(ctx context.Context, client *http.Client, url string) (KubeProxyConfig, error) {
	resp, err := get(ctx, client, url)
	if err != nil {
		return KubeProxyConfig{}, fmt.Errorf("kube-proxy %s: %w", url, err)
	}
	if resp.status != http.StatusOK {
		return KubeProxyConfig{}, fmt.Errorf("kube-proxy %s: status %d", url, resp.status)
	}
	if resp.tooLarge {
		return KubeProxyConfig{}, fmt.Errorf("kube-proxy %s: body larger than %d bytes", url, MaxBodyBytes)
	}
	var body map[string]struct {
		NodePortAddresses  []string        `json:"nodePortAddresses"`
		BindAddress        string          `json:"bindAddress"`
		HealthzBindAddress *string         `json:"healthzBindAddress"`
		FeatureGates       map[string]bool `json:"featureGates"`
		DetectLocalMode    string          `json:"detectLocalMode"`
		// v1alpha1 serves --cluster-cidr as one comma-separated string; the internal type, which older
		// releases served untagged, as DetectLocal.ClusterCIDRs.
		ClusterCIDR string `json:"clusterCIDR"`
		DetectLocal struct {
			BridgeInterface     string   `json:"bridgeInterface"`
			InterfaceNamePrefix string   `json:"interfaceNamePrefix"`
			ClusterCIDRs        []string `json:"clusterCIDRs"`
		} `json:"detectLocal"`
	}
	if err := json.Unmarshal(resp.body, &body); err != nil {
		return KubeProxyConfig{}, fmt.Errorf("kube-proxy %s: decoding: %w", url, err)
	}
	raw, ok := body[configzGroup]
	if !ok {
		return KubeProxyConfig{}, fmt.Errorf("kube-proxy %s: no %q object", url, configzGroup)
	}
	cfg := DefaultKubeProxyConfig()
	for _, a := range raw.NodePortAddresses {
		if a != "" {
			cfg.NodePortAddresses = append(cfg.NodePortAddresses, a)
		}
	}
	cfg.BindAddress = raw.BindAddress
	if raw.HealthzBindAddress != nil {
		cfg.HealthzBindAddress = *raw.HealthzBindAddress
	}
	if on, set := raw.FeatureGates["AllowServiceExternalIPs"]; set {
		cfg.ExternalIPs = on
	}
	det := &LocalDetector{Mode: LocalMode(raw.DetectLocalMode), BridgeInterface: raw.DetectLocal.BridgeInterface,
		InterfaceNamePrefix: raw.DetectLocal.InterfaceNamePrefix}
	if det.Mode == "" {
		det.Mode = LocalModeClusterCIDR // KubeProxyConfiguration.detectLocalMode defaults to ClusterCIDR
	}
	for _, c := range append(strings.Split(raw.ClusterCIDR, ","), raw.DetectLocal.ClusterCIDRs...) {
		if c = strings.TrimSpace(c); c != "" {
			det.ClusterCIDRs = append(det.ClusterCIDRs, c)
		}
	}
	cfg.DetectLocal = det
	return cfg, nil
}

// KubeProxyNodeIPs are kube-proxy's node IPs, one per family, as it picks them (cmd/kube-proxy/app/server.go
// detectNodeIPs): the first address of each family among addrs (the Node's InternalIPs, then its ExternalIPs),
// the primary family's replaced by --bind-address when that is a specific IP.
func KubeProxyNodeIPs(addrs []string, bindAddress string) []string {
	var out []string
	seen := map[string]bool{}
	if ip := net.ParseIP(bindAddress); ip != nil && !ip.IsUnspecified() {
		out, seen[FamilyOf(ip)] = append(out, ip.String()), true
	}
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil || seen[FamilyOf(ip)] {
			continue
		}
		out, seen[FamilyOf(ip)] = append(out, ip.String()), true
	}
	return out
}

// ErrHealthServerDisabled means kube-proxy runs without its health server (an empty --healthz-bind-address):
// there is nothing to probe.
var ErrHealthServerDisabled = errors.New("kube-proxy's health server is disabled (healthzBindAddress empty)")

// KubeProxyHealthAddress is where to reach kube-proxy's health server: its healthzBindAddress when that names
// an address (k3s and RKE2 bind 127.0.0.1 or ::1: probing the node's InternalIP there is refused), else (0.0.0.0
// or ::, every address) the first of nodeIPs (kube-proxy's node IPs) configured on this host; with its port.
func KubeProxyHealthAddress(cfg KubeProxyConfig, lister AddrLister, nodeIPs []string) (string, error) {
	if cfg.HealthzBindAddress == "" {
		return "", ErrHealthServerDisabled
	}
	host, port, err := net.SplitHostPort(cfg.HealthzBindAddress)
	if err != nil {
		// An address without a port (kube-proxy appends its default itself).
		host, port = cfg.HealthzBindAddress, "10256"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("kube-proxy healthzBindAddress %q: bad port", cfg.HealthzBindAddress)
	}
	ip := net.ParseIP(host)
	if host != "" && ip == nil {
		return "", fmt.Errorf("kube-proxy healthzBindAddress %q: not an IP address", cfg.HealthzBindAddress)
	}
	if ip != nil && !ip.IsUnspecified() {
		return net.JoinHostPort(ip.String(), port), nil
	}
	local, err := PickLocalAddress(lister, nodeIPs)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(local, port), nil
}
