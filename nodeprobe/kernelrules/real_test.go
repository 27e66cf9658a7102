package kernelrules

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Fixtures dumped from a real kube-proxy v1.37.2 by e2e/cmd/dumprules (node-1 in
// nftables mode, node-2 in iptables mode), with the manifest of what the harness
// created. Regenerate as root:
//
//	cd e2e && go run ./cmd/dumprules -out ../nodeprobe/kernelrules/testdata
const realVersion = "v1.37.2"

var nfacctMatch = regexp.MustCompile(`-m nfacct --nfacct-name +\S+ `)

type realManifest struct {
	KubeProxy string `json:"kubeProxy"`
	Nodes     []struct {
		Name string `json:"name"`
		Mode string `json:"mode"`
	} `json:"nodes"`
	Services []struct {
		Namespace   string         `json:"namespace"`
		Name        string         `json:"name"`
		Port        string         `json:"port"`
		Protocol    string         `json:"protocol"`
		ServicePort int32          `json:"servicePort"`
		NodePort    int32          `json:"nodePort"`
		Policy      string         `json:"externalTrafficPolicy"`
		Affinity    bool           `json:"sessionAffinityClientIP"`
		LBIPs       []string       `json:"loadBalancerIPs"`
		ExternalIPs []string       `json:"externalIPs"`
		Endpoints   map[string]int `json:"endpoints"`
		Total       int            `json:"total"`
	} `json:"services"`
	Files map[string]string `json:"files"`
}

func readRealManifest(t *testing.T) *realManifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "real-"+realVersion+"-manifest.json"))
	if err != nil {
		t.Fatalf("real kube-proxy fixtures missing (%v); dump them with e2e/cmd/dumprules as root", err)
	}
	var m realManifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.KubeProxy != realVersion || len(m.Services) == 0 || len(m.Nodes) != 2 {
		t.Fatalf("manifest: kube-proxy %s, %d services, %d nodes", m.KubeProxy, len(m.Services), len(m.Nodes))
	}
	return &m
}

// realSnapshot parses one node's dumped IPv4 (and IPv6, when dumped) rules.
func realSnapshot(t *testing.T, m *realManifest, mode string) *Snapshot {
	t.Helper()
	snap := &Snapshot{}
	for _, f := range []struct{ fam, file string }{{FamilyIPv4, "ipv4"}, {FamilyIPv6, "ipv6"}} {
		var name string
		switch mode {
		case "nftables":
			name = "real-" + realVersion + "-nft-" + f.file + ".json"
			snap.Mode = ModeNFTables
		case "iptables":
			name = "real-" + realVersion + "-iptables-" + f.file + ".save"
			snap.Mode = ModeIPTables
		}
		if _, listed := m.Files[name]; !listed {
			if f.fam == FamilyIPv4 {
				t.Fatalf("manifest lists no %s", name)
			}
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var ports map[portKey]*PortState
		if mode == "nftables" {
			res, err := parseNFTJSON(data)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			ports = res.ports
		} else {
			res := newIPTablesResult()
			if err := parseIPTablesSave(data, res); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !res.kubeServices {
				t.Fatalf("%s: no KUBE-SERVICES", name)
			}
			ports = res.ports
		}
		snap.addFamily(f.fam, ports)
	}
	return snap
}

// TestRealKubeProxy: what a real kube-proxy v1.37.2 programmed reads back as the
// harness created it, per node: local endpoints counted in every layout (plain
// DNAT, numgen map, affinity endpoint chains; KUBE-SVL in iptables), one drop rule
// per destination (NodePort, LB IP, externalIP), rejects without endpoints.
func TestRealKubeProxy(t *testing.T) {
	m := readRealManifest(t)
	for _, node := range m.Nodes {
		t.Run(node.Name+"/"+node.Mode, func(t *testing.T) {
			snap := realSnapshot(t, m, node.Mode)
			counted := node.Mode == "iptables"
			for _, s := range m.Services {
				sp := ServicePort{Namespace: s.Namespace, Name: s.Name, Port: s.Port, Protocol: s.Protocol}
				got := snap.Family(sp, FamilyIPv4)
				local := s.Endpoints[node.Name]
				want := PortState{Programmed: true}
				switch {
				case s.Total == 0:
					want.Reject = true
				case s.Policy == "Local" && local == 0:
					want.Drop = true
					want.Drops = []DropRule{{Port: s.NodePort, Counted: counted}}
					for _, a := range append(slices.Clone(s.LBIPs), s.ExternalIPs...) {
						want.Drops = append(want.Drops, DropRule{Address: a, Port: s.ServicePort, Counted: counted})
					}
					sortDrops(want.Drops)
				case s.Policy == "Local":
					want.LocalEndpoints = local
					want.Endpoints = realLocalEndpoints(t, node.Mode, sp)
				}
				// Counters are whatever traffic hit the rules while dumping (none
				// was sent): compare them as read, check they add up.
				var sum uint64
				for i := range got.Drops {
					if i < len(want.Drops) {
						want.Drops[i].Packets = got.Drops[i].Packets
					}
					sum += got.Drops[i].Packets
				}
				want.DropPackets = sum
				if !equalState(got, want) {
					t.Errorf("%s (policy %s, affinity %v, %d of %d endpoints here):\n got %+v\nwant %+v", sp, s.Policy, s.Affinity, local, s.Total, got, want)
				}
				if snap.HasFamily(FamilyIPv6) {
					if st := snap.Family(sp, FamilyIPv6); !equalState(st, PortState{}) {
						t.Errorf("%s: IPv6 state for an IPv4-only Service: %+v", sp, st)
					}
				}
			}
		})
	}
}

// The nftables node's dump read through the Reader, as on a node.
func TestRealKubeProxyRead(t *testing.T) {
	m := readRealManifest(t)
	f := newFakeRunner()
	for _, fam := range []struct{ nft, file string }{{"ip", "ipv4"}, {"ip6", "ipv6"}} {
		key := "nft -j list table " + fam.nft + " kube-proxy"
		name := "real-" + realVersion + "-nft-" + fam.file + ".json"
		if _, ok := m.Files[name]; !ok {
			f.fail[key] = &CommandError{Cmd: key, Err: errors.New("exit status 1"), Stderr: "Error: No such file or directory"}
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		f.out[key] = string(data)
	}
	r := NewReader(Options{Mode: ModeNFTables, Runner: f, LookPath: anyPath})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := realSnapshot(t, m, "nftables")
	if !slices.Equal(snap.Families, want.Families) {
		t.Errorf("families %v, want %v", snap.Families, want.Families)
	}
	for _, s := range m.Services {
		sp := ServicePort{Namespace: s.Namespace, Name: s.Name, Port: s.Port, Protocol: s.Protocol}
		if got, w := snap.Family(sp, FamilyIPv4), want.Family(sp, FamilyIPv4); !equalState(got, w) {
			t.Errorf("%s: %+v, want %+v", sp, got, w)
		}
	}
}

// The real dumps restored into a namespace (iptables-save with both backends,
// nft text) read back through the Reader as their parse says, and stay
// byte-identical.
func TestIntegrationRealKubeProxy(t *testing.T) {
	requireRoot(t)
	m := readRealManifest(t)
	load := func(t *testing.T, name string) []byte {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		// kube-proxy's "-m nfacct --nfacct-name X" matches need nfacct objects
		// it creates over netlink; a fresh namespace has none, and they do not
		// bear on what the reader reads.
		return nfacctMatch.ReplaceAll(data, nil)
	}
	check := func(t *testing.T, ns string, want *Snapshot) {
		t.Helper()
		before := nsState(t, ns)
		snap := readNS(t, ns)
		if snap.Mode != want.Mode || !slices.Equal(snap.Families, want.Families) {
			t.Errorf("mode %s families %v, want %s %v", snap.Mode, snap.Families, want.Mode, want.Families)
		}
		for _, s := range m.Services {
			sp := ServicePort{Namespace: s.Namespace, Name: s.Name, Port: s.Port, Protocol: s.Protocol}
			for _, fam := range want.Families {
				if got, w := snap.Family(sp, fam), want.Family(sp, fam); !equalState(got, w) {
					t.Errorf("%s %s: %+v, want %+v", fam, sp, got, w)
				}
			}
		}
		compareState(t, before, nsState(t, ns))
	}
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		t.Run("iptables/"+string(backend), func(t *testing.T) {
			ns := newNetns(t)
			nsRun(t, ns, load(t, "real-"+realVersion+"-iptables-ipv4.save"), xtablesCmd(false, backend, "restore"), "-c")
			if _, ok := m.Files["real-"+realVersion+"-iptables-ipv6.save"]; ok {
				nsRun(t, ns, load(t, "real-"+realVersion+"-iptables-ipv6.save"), xtablesCmd(true, backend, "restore"), "-c")
			}
			// No traffic was counted while dumping: every counter is 0, also
			// where ip6tables-nft-restore 1.8.9 ignores -c.
			check(t, ns, realSnapshot(t, m, "iptables"))
		})
	}
	t.Run("nftables", func(t *testing.T) {
		ns := newNetns(t)
		for _, f := range []string{"ipv4", "ipv6"} {
			name := "real-" + realVersion + "-nft-" + f + ".nft"
			if _, ok := m.Files[name]; ok {
				nsRun(t, ns, load(t, name), "nft", "-f", "-")
			}
		}
		check(t, ns, realSnapshot(t, m, "nftables"))
	})
}

// realLocalEndpoints finds, in the text of the real IPv4 dump, the DNAT targets
// of sp's local endpoints the way a person reading the rules would: iptables'
// KUBE-SVL jumps to KUBE-SEP chains and their "--to-destination"; nftables' local-*
// chain's "dnat to", numgen map entries, and the "dnat to" of each endpoint-*
// chain it jumps to. It also checks that kube-proxy named each endpoint's chain
// as sepKey and nftEndpointKey say, the identity used where the rules spell no
// address.
func realLocalEndpoints(t *testing.T, mode string, sp ServicePort) []Endpoint {
	t.Helper()
	file := "real-" + realVersion + "-iptables-ipv4.save"
	if mode == "nftables" {
		file = "real-" + realVersion + "-nft-ipv4.nft"
	}
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	targets := map[netip.AddrPort]string{} // DNAT target -> the endpoint chain it is in ("" for none)
	if mode == "iptables" {
		svl := "KUBE-SVL-" + iptablesChainHash(sp)
		jump := regexp.MustCompile(`-A ` + svl + ` .*-j (KUBE-SEP-[A-Z0-9]{16})`)
		for _, m := range jump.FindAllStringSubmatch(text, -1) {
			dnat := regexp.MustCompile(`-A ` + m[1] + ` .*--to-destination (\S+)`).FindStringSubmatch(text)
			if dnat == nil {
				t.Fatalf("%s: %s has no DNAT", sp, m[1])
			}
			targets[netip.MustParseAddrPort(dnat[1])] = m[1]
		}
	} else {
		block := func(name string) string {
			i := strings.Index(text, "chain "+name+" {")
			if i < 0 {
				t.Fatalf("%s: no chain %s", sp, name)
			}
			b := text[i:]
			return b[:strings.Index(b, "\n\t}")]
		}
		chain := regexp.MustCompile(`chain (local-[A-Z0-9]{8}-` + regexp.QuoteMeta(sp.Namespace+"/"+sp.Name+"/tcp/"+sp.Port) + `) \{`).FindStringSubmatch(text)
		if chain == nil {
			t.Fatalf("%s: no local chain", sp)
		}
		local := block(chain[1])
		for _, m := range regexp.MustCompile(`dnat to (\S+)`).FindAllStringSubmatch(local, -1) {
			targets[netip.MustParseAddrPort(m[1])] = ""
		}
		for _, m := range regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+) \. (\d+)`).FindAllStringSubmatch(local, -1) {
			targets[netip.MustParseAddrPort(m[1]+":"+m[2])] = ""
		}
		for _, m := range regexp.MustCompile(`goto (endpoint-\S+)`).FindAllStringSubmatch(local, -1) {
			name := strings.TrimSuffix(m[1], ",")
			dnat := regexp.MustCompile(`dnat to (\S+)`).FindStringSubmatch(block(name))
			if dnat == nil {
				t.Fatalf("%s: %s has no DNAT", sp, name)
			}
			targets[netip.MustParseAddrPort(dnat[1])] = name
		}
	}
	var out []Endpoint
	for ap, chain := range targets {
		out = append(out, Endpoint{Addr: ap})
		switch {
		case strings.HasPrefix(chain, "KUBE-SEP-"):
			if k := sepKey(sp, "", ap); chain != "KUBE-SEP-"+string(k[:]) {
				t.Errorf("%s %s: kube-proxy's chain %s, sepKey says KUBE-SEP-%s", sp, ap, chain, k[:])
			}
		case chain != "":
			if k := nftEndpointKey(sp, ap); !strings.HasPrefix(chain, "endpoint-"+string(k[:8])+"-") {
				t.Errorf("%s %s: kube-proxy's chain %s, nftEndpointKey says endpoint-%s", sp, ap, chain, k[:8])
			}
		}
	}
	slices.SortFunc(out, compareEndpoints)
	return out
}
