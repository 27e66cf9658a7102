package nodeprobe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// configzGroup is the key kube-proxy registers its configuration under in /configz (component-base's
// configz: {"<group>": <the configuration object>}). v1.37.2 serves the versioned v1alpha1 object
// ("nodePortAddresses": null in iptables mode, ["primary"] in nftables mode; testdata/); encoding/json matches
// keys regardless of case, so releases that served the untagged internal type ("NodePortAddresses") read too.
const configzGroup = "kubeproxy.config.k8s.io"

// ReadNodePortAddresses reads kube-proxy's --nodeport-addresses from its /configz at url. It returns nil for
// an unset list or the special value "primary" (the Node's primary addresses: nftables mode's default), else
// the CIDRs.
func ReadNodePortAddresses(ctx context.Context, client *http.Client, url string) ([]string, error) {
	resp, err := get(ctx, client, url)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy %s: %w", url, err)
	}
	if resp.status != http.StatusOK {
		return nil, fmt.Errorf("kube-proxy %s: status %d", url, resp.status)
	}
	if resp.tooLarge {
		return nil, fmt.Errorf("kube-proxy %s: body larger than %d bytes", url, MaxBodyBytes)
	}
	var body map[string]struct {
		NodePortAddresses []string `json:"nodePortAddresses"`
	}
	if err := json.Unmarshal(resp.body, &body); err != nil {
		return nil, fmt.Errorf("kube-proxy %s: decoding: %w", url, err)
	}
	cfg, ok := body[configzGroup]
	if !ok {
		return nil, fmt.Errorf("kube-proxy %s: no %q object", url, configzGroup)
	}
	var cidrs []string
	for _, c := range cfg.NodePortAddresses {
		if c != "primary" && c != "" {
			cidrs = append(cidrs, c)
		}
	}
	return cidrs, nil
}
