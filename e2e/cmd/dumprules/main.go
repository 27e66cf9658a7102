// Command dumprules captures what a real kube-proxy programs, as fixtures for the rule reader's tests
// (nodeprobe/kernelrules/testdata/real-*). It brings up a cluster of two nodes — node-1 with kube-proxy in nftables
// mode, node-2 in iptables mode —, creates Local NodePort and LoadBalancer Services with 0, 1 and 2 local
// endpoints per node (one with sessionAffinity ClientIP, one without endpoints, one with Cluster policy),
// waits until both kube-proxies programmed them, and writes:
//
//	real-<version>-nft-ipv4.json    nft -j list table ip kube-proxy on node-1 (ipv6 too when the table exists)
//	real-<version>-nft-ipv4.nft     the same as text, for people
//	real-<version>-iptables-ipv4.save  iptables-save -c on node-2 (ip6tables too when it has KUBE-SERVICES)
//	real-<version>-manifest.json    what was created: Services, node ports, addresses, endpoints per node
//
// Run as root from the e2e module: go run ./cmd/dumprules -out ../nodeprobe/kernelrules/testdata
package main

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/localtraffic/localtraffic-exporter/e2e/cluster"
)

// Version is the kube-proxy release the harness pins (e2e/tools); it names the files.
const Version = "v1.37.2"

const (
	namespace   = "dump"
	backendPort = cluster.BackendPort
	nftNode     = "node-1"
	iptNode     = "node-2"
)

// spec is one Service the tool creates.
type spec struct {
	Name        string
	Type        corev1.ServiceType
	Policy      corev1.ServiceExternalTrafficPolicy
	Affinity    bool
	LBIPs       []string
	ExternalIPs []string
	// Pods lists the node of each backend pod.
	Pods []string
}

func specs() []spec {
	lb, np := corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort
	local, clusterPolicy := corev1.ServiceExternalTrafficPolicyLocal, corev1.ServiceExternalTrafficPolicyCluster
	return []spec{
		// node-1 none (drop), node-2 one.
		{Name: "zero", Type: np, Policy: local, Pods: []string{iptNode}},
		// node-1 one (plain dnat), node-2 none (drop).
		{Name: "one", Type: np, Policy: local, Pods: []string{nftNode}},
		// node-1 two (numgen map), node-2 none: drops on the NodePort, the LB IP and the externalIP.
		{Name: "two", Type: lb, Policy: local, LBIPs: []string{"192.0.2.31"}, ExternalIPs: []string{"192.0.2.131"}, Pods: []string{nftNode, nftNode}},
		// Session affinity: node-1 two (endpoint chains), node-2 one.
		{Name: "sticky", Type: lb, Policy: local, Affinity: true, LBIPs: []string{"192.0.2.32"}, Pods: []string{nftNode, nftNode, iptNode}},
		// node-1 none: drops on the NodePort, the LB IP and the externalIP; node-2 one.
		{Name: "lbzero", Type: lb, Policy: local, LBIPs: []string{"192.0.2.33"}, ExternalIPs: []string{"192.0.2.133"}, Pods: []string{iptNode}},
		// No endpoints anywhere: reject on both.
		{Name: "gone", Type: np, Policy: local},
		// Cluster policy: no local-policy chain, no drop.
		{Name: "spread", Type: np, Policy: clusterPolicy, Pods: []string{nftNode, iptNode}},
	}
}

// Manifest says what the fixtures were taken from; the reader's tests compare against it.
type Manifest struct {
	KubeProxy string              `json:"kubeProxy"`
	Nodes     []ManifestNode      `json:"nodes"`
	Services  []ManifestService   `json:"services"`
	Files     map[string]string   `json:"files"` // file -> what it is
	Taken     time.Time           `json:"taken"`
	Pods      map[string][]string `json:"pods"` // node -> pod IPs
}

type ManifestNode struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
}

type ManifestService struct {
	Namespace   string   `json:"namespace"`
	Name        string   `json:"name"`
	Port        string   `json:"port"`
	Protocol    string   `json:"protocol"`
	ServicePort int32    `json:"servicePort"`
	NodePort    int32    `json:"nodePort"`
	Type        string   `json:"type"`
	Policy      string   `json:"externalTrafficPolicy"`
	Affinity    bool     `json:"sessionAffinityClientIP"`
	LBIPs       []string `json:"loadBalancerIPs,omitempty"`
	ExternalIPs []string `json:"externalIPs,omitempty"`
	// Endpoints is the number of ready endpoints per node ("node-1": 2); Total over all nodes.
	Endpoints map[string]int `json:"endpoints"`
	Total     int            `json:"total"`
}

func main() {
	out := flag.String("out", "", "directory to write the fixtures into (e.g. ../nodeprobe/kernelrules/testdata)")
	verbose := flag.Bool("v", false, "log the harness's steps")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "dumprules: usage: dumprules -out DIR [-v] [-timeout D]")
		os.Exit(2)
	}
	if err := run(*out, *verbose, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "dumprules:", err)
		os.Exit(1)
	}
}

func run(out string, verbose bool, timeout time.Duration) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root for network namespaces")
	}
	if st, err := os.Stat(out); err != nil || !st.IsDir() {
		return fmt.Errorf("-out %s: not a directory", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cfg := cluster.Config{Nodes: []cluster.NodeConfig{
		{Name: nftNode, ProxyMode: cluster.NFTables},
		{Name: iptNode, ProxyMode: cluster.IPTables},
	}}
	if verbose {
		cfg.Log = os.Stderr
	}
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()

	m, err := create(ctx, c)
	if err != nil {
		return err
	}
	files, err := dump(ctx, c, m, out)
	if err != nil {
		return err
	}
	m.Files = files
	m.Taken = time.Now().UTC().Truncate(time.Second)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	name := filepath.Join(out, "real-"+Version+"-manifest.json")
	if err := os.WriteFile(name, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", name)
	return nil
}

// create makes the Services, their pods and EndpointSlices, and returns what it made.
func create(ctx context.Context, c *cluster.Cluster) (*Manifest, error) {
	if err := c.EnsureNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	m := &Manifest{KubeProxy: Version, Pods: map[string][]string{}}
	for _, n := range c.Nodes() {
		m.Nodes = append(m.Nodes, ManifestNode{Name: n.Name, Mode: string(n.ProxyMode)})
	}
	svcs := c.Admin().CoreV1().Services(namespace)
	for _, s := range specs() {
		opts := []cluster.ServiceOption{cluster.WithPolicy(s.Policy), cluster.WithExternalIPs(s.ExternalIPs...)}
		if s.Affinity {
			opts = append(opts, cluster.WithClientIPAffinity())
		}
		created, err := svcs.Create(ctx, cluster.NewService(namespace, s.Name, s.Type, opts...), metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create service %s: %w", s.Name, err)
		}
		if len(s.LBIPs) > 0 {
			var ingress []corev1.LoadBalancerIngress
			for _, ip := range s.LBIPs {
				ingress = append(ingress, corev1.LoadBalancerIngress{IP: ip})
			}
			if err := c.SetLoadBalancerIngress(ctx, namespace, s.Name, ingress...); err != nil {
				return nil, err
			}
		}
		var eps []cluster.Endpoint
		counts := map[string]int{}
		for i, node := range s.Pods {
			p, err := c.StartPod(ctx, cluster.PodConfig{Namespace: namespace, Name: fmt.Sprintf("%s-%d", s.Name, i), Node: node, Ports: []int{backendPort}})
			if err != nil {
				return nil, err
			}
			eps = append(eps, cluster.Endpoint{Pod: p})
			counts[node]++
			m.Pods[node] = append(m.Pods[node], p.IP)
		}
		for _, n := range c.Nodes() {
			counts[n.Name] += 0 // every node listed, 0 included
		}
		if err := c.SetEndpoints(ctx, namespace, s.Name, eps); err != nil {
			return nil, err
		}
		m.Services = append(m.Services, ManifestService{
			Namespace: namespace, Name: s.Name, Port: "http", Protocol: "TCP",
			ServicePort: 80, NodePort: created.Spec.Ports[0].NodePort,
			Type: string(s.Type), Policy: string(s.Policy), Affinity: s.Affinity,
			LBIPs: s.LBIPs, ExternalIPs: s.ExternalIPs, Endpoints: counts, Total: len(s.Pods),
		})
	}
	return m, nil
}

// chainHash is kube-proxy's per-Service-port hash (the rule reader's hashKey), for the markers.
func chainHash(portName, proto string) string {
	sum := sha256.Sum256([]byte(portName + proto))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// markers are substrings that show a node's kube-proxy programmed every Service as created.
func markers(m *Manifest, node string, mode cluster.ProxyMode) []string {
	var want []string
	for _, s := range m.Services {
		pn := s.Namespace + "/" + s.Name + ":" + s.Port
		local := s.Endpoints[node]
		isLocal := s.Policy == string(corev1.ServiceExternalTrafficPolicyLocal)
		switch mode {
		case cluster.NFTables:
			chain := "-" + s.Namespace + "/" + s.Name + "/tcp/" + s.Port + " {"
			switch {
			case s.Total == 0:
				want = append(want, `comment "`+pn+`" : goto reject-chain`)
			case isLocal && local == 0:
				want = append(want, `comment "`+pn+`" : drop`)
			case isLocal:
				want = append(want, "chain local-*"+chain)
			default:
				want = append(want, "chain service-*"+chain)
			}
		case cluster.IPTables:
			h := chainHash(pn, "tcp")
			switch {
			case s.Total == 0:
				want = append(want, pn+` has no endpoints"`)
			case isLocal && local == 0:
				want = append(want, pn+` has no local endpoints"`)
			case isLocal:
				want = append(want, "-A KUBE-SVL-"+h+" ")
			default:
				want = append(want, "-A KUBE-SVC-"+h+" ")
			}
		}
	}
	// Every endpoint address of the node must be in its rules.
	return append(want, m.Pods[node]...)
}

// settled waits until list's output has every marker and is the same twice in a row, 2 s apart.
func settled(ctx context.Context, what string, list func() (string, error), want []string) error {
	var last, missing string
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		out, err := list()
		out = withoutComments(out)
		if err == nil {
			missing = ""
			for _, w := range want {
				if !contains(out, w) {
					missing = w
					break
				}
			}
			if missing == "" && out == last {
				return nil
			}
			last = out
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	if missing != "" {
		return fmt.Errorf("%s: rules never showed %q", what, missing)
	}
	return fmt.Errorf("%s: rules kept changing", what)
}

// withoutComments drops iptables-save's "# Generated/Completed on <time>" lines, which differ on every call.
func withoutComments(s string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(line, "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// contains reports whether out has w; a "*" in w stands for kube-proxy's 8-character chain hash.
func contains(out, w string) bool {
	before, after, ok := strings.Cut(w, "*")
	if !ok {
		return strings.Contains(out, w)
	}
	for rest := out; ; {
		i := strings.Index(rest, before)
		if i < 0 {
			return false
		}
		rest = rest[i+len(before):]
		if len(rest) >= 8 && strings.HasPrefix(rest[8:], after) {
			return true
		}
	}
}

// dump waits for both kube-proxies and writes their rules; it returns file -> description.
func dump(ctx context.Context, c *cluster.Cluster, m *Manifest, out string) (map[string]string, error) {
	files := map[string]string{}
	write := func(name, desc, data string) error {
		if err := os.WriteFile(filepath.Join(out, name), []byte(data), 0o644); err != nil {
			return err
		}
		files[name] = desc
		fmt.Println("wrote", filepath.Join(out, name))
		return nil
	}

	n1 := c.Node(nftNode)
	if err := settled(ctx, nftNode, func() (string, error) {
		return n1.Exec(ctx, "nft", "list", "table", "ip", "kube-proxy")
	}, markers(m, nftNode, cluster.NFTables)); err != nil {
		return nil, err
	}
	for _, f := range []struct{ nft, name string }{{"ip", "ipv4"}, {"ip6", "ipv6"}} {
		js, err := n1.Exec(ctx, "nft", "-j", "list", "table", f.nft, "kube-proxy")
		if err != nil {
			if f.nft == "ip6" {
				continue // no IPv6 table on this node
			}
			return nil, fmt.Errorf("%s: nft -j list table %s kube-proxy: %w", nftNode, f.nft, err)
		}
		text, err := n1.Exec(ctx, "nft", "list", "table", f.nft, "kube-proxy")
		if err != nil {
			return nil, err
		}
		base := "real-" + Version + "-nft-" + f.name
		if err := write(base+".json", fmt.Sprintf("%s (kube-proxy %s, nftables mode): nft -j list table %s kube-proxy", nftNode, Version, f.nft), js); err != nil {
			return nil, err
		}
		if err := write(base+".nft", fmt.Sprintf("%s: nft list table %s kube-proxy (the same, as text)", nftNode, f.nft), text); err != nil {
			return nil, err
		}
	}

	n2 := c.Node(iptNode)
	if err := settled(ctx, iptNode, func() (string, error) {
		return n2.Exec(ctx, "iptables-save") // without counters: they change with every packet
	}, markers(m, iptNode, cluster.IPTables)); err != nil {
		return nil, err
	}
	for _, f := range []struct{ bin, name string }{{"iptables-save", "ipv4"}, {"ip6tables-save", "ipv6"}} {
		save, err := n2.Exec(ctx, f.bin, "-c")
		if err != nil {
			if f.name == "ipv6" {
				continue
			}
			return nil, fmt.Errorf("%s: %s -c: %w", iptNode, f.bin, err)
		}
		if f.name == "ipv6" && !strings.Contains(save, ":KUBE-SERVICES") {
			continue
		}
		name := "real-" + Version + "-iptables-" + f.name + ".save"
		if err := write(name, fmt.Sprintf("%s (kube-proxy %s, iptables mode): %s -c", iptNode, Version, f.bin), save); err != nil {
			return nil, err
		}
	}
	return files, nil
}
