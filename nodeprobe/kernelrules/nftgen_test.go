package kernelrules

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// genNFT writes `nft -f` input in the shape kube-proxy's nftables proxier
// (pkg/proxy/nftables/proxier.go) programs, for one family, in the layout of
// releases before v1.37's DNAT optimisation: every Service chain jumps to
// endpoint-* chains.
func genNFT(ipv6 bool, svcs []genService) string { return genNFTLayout(ipv6, svcs, false) }

// genNFTLayout with dnat writes v1.37's layout (writeServiceToEndpointDNATs):
// without session affinity the service-/local- chains DNAT themselves — one
// endpoint "dnat to ip:port", several "dnat ip addr . port to numgen random mod N
// map { … }" — and no endpoint-* chains exist; with affinity, as before.
func genNFTLayout(ipv6 bool, svcs []genService, dnat bool) string {
	fam, addrType, podCIDR, noLocalhost, ipX := "ip", "ipv4_addr", "10.244.0.0/16", "ip daddr != 127.0.0.0/8", "ip"
	if ipv6 {
		fam, addrType, podCIDR, noLocalhost, ipX = "ip6", "ipv6_addr", "fd00:10:244::/56", "ip6 daddr != ::1", "ip6"
	}
	base := func(s genService) string {
		name := fmt.Sprintf("%s/%s/%s/%s", s.ns, s.name, s.proto, s.port)
		sum := sha256.Sum256([]byte(name))
		return base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
	}
	epChain := func(s genService, ep genEndpoint) string {
		name := fmt.Sprintf("%s/%s/%s/%s__%s/%d", s.ns, s.name, s.proto, s.port, strings.ReplaceAll(ep.ip, ":", "."), ep.port)
		sum := sha256.Sum256([]byte(name))
		// kube-proxy's hashAndTruncate: at most 240 bytes after the prefix.
		name = base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + name
		if len(name) > 240 {
			name = name[:237] + "..."
		}
		return "endpoint-" + name
	}
	var noEPNodePorts, noEPServices, serviceIPs, serviceNodePorts []string
	var chains strings.Builder
	for _, s := range svcs {
		// kube-proxy v1.37 truncates element comments to nftables' 128 bytes
		// (truncateNFTablesComment).
		pn := s.portName()
		if len(pn) > nftCommentMax {
			pn = pn[:nftCommentMax]
		}
		b := base(s)
		var local, all []genEndpoint
		for _, ep := range s.eps {
			all = append(all, ep)
			if ep.local {
				local = append(local, ep)
			}
		}
		hasEPs, hasLocal := len(all) > 0, len(local) > 0
		external := s.nodePort != 0 || len(s.lbIPs) > 0 || len(s.externalIPs) > 0
		extVerdict := ""
		switch {
		case !hasEPs:
			extVerdict = "goto reject-chain"
		case s.etpLocal && !hasLocal:
			extVerdict = "drop"
		}
		// cluster IP
		if !hasEPs {
			noEPServices = append(noEPServices, fmt.Sprintf("%s . %s . %d comment %q : goto reject-chain", s.clusterIP, s.proto, s.svcPort, pn))
		} else if s.itpLocal && !hasLocal {
			noEPServices = append(noEPServices, fmt.Sprintf("%s . %s . %d comment %q : drop", s.clusterIP, s.proto, s.svcPort, pn))
		} else {
			target := "service-" + b
			if s.itpLocal {
				target = "local-" + b
			}
			serviceIPs = append(serviceIPs, fmt.Sprintf("%s . %s . %d : goto %s", s.clusterIP, s.proto, s.svcPort, target))
		}
		for _, ip := range append(append([]string{}, s.externalIPs...), s.lbIPs...) {
			if hasEPs {
				serviceIPs = append(serviceIPs, fmt.Sprintf("%s . %s . %d : goto external-%s", ip, s.proto, s.svcPort, b))
			}
			if extVerdict != "" {
				noEPServices = append(noEPServices, fmt.Sprintf("%s . %s . %d comment %q : %s", ip, s.proto, s.svcPort, pn, extVerdict))
			}
		}
		if s.nodePort != 0 {
			if hasEPs {
				serviceNodePorts = append(serviceNodePorts, fmt.Sprintf("%s . %d : goto external-%s", s.proto, s.nodePort, b))
			}
			if extVerdict != "" {
				noEPNodePorts = append(noEPNodePorts, fmt.Sprintf("%s . %d comment %q : %s", s.proto, s.nodePort, pn, extVerdict))
			}
		}
		if !hasEPs {
			continue
		}
		direct := dnat && !s.affinity
		balance := func(chain string, eps []genEndpoint) {
			fmt.Fprintf(&chains, "\tchain %s {\n", chain)
			if direct {
				if len(eps) == 1 {
					fmt.Fprintf(&chains, "\t\tmeta l4proto %s dnat to %s\n\t}\n", s.proto, epAddr(eps[0]))
					return
				}
				var el []string
				for i, ep := range eps {
					el = append(el, fmt.Sprintf("%d : %s . %d", i, ep.ip, ep.port))
				}
				fmt.Fprintf(&chains, "\t\tmeta l4proto %s dnat %s addr . port to numgen random mod %d map { %s }\n\t}\n", s.proto, ipX, len(eps), strings.Join(el, ", "))
				return
			}
			if s.affinity {
				for _, ep := range eps {
					c := epChain(s, ep)
					fmt.Fprintf(&chains, "\t\t%s saddr @affinity-%s goto %s\n", ipX, strings.TrimPrefix(c, "endpoint-"), c)
				}
			}
			var el []string
			for i, ep := range eps {
				el = append(el, fmt.Sprintf("%d : goto %s", i, epChain(s, ep)))
			}
			fmt.Fprintf(&chains, "\t\tnumgen random mod %d vmap { %s }\n\t}\n", len(eps), strings.Join(el, ", "))
		}
		balance("service-"+b, all)
		if hasLocal && (s.etpLocal || s.itpLocal) {
			balance("local-"+b, local)
		}
		if external {
			fmt.Fprintf(&chains, "\tchain external-%s {\n", b)
			if s.etpLocal {
				fmt.Fprintf(&chains, "\t\t%s saddr %s goto service-%s comment \"short-circuit pod traffic\"\n", ipX, podCIDR, b)
				fmt.Fprintf(&chains, "\t\tfib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\"\n")
				fmt.Fprintf(&chains, "\t\tfib saddr type local goto service-%s comment \"short-circuit local traffic\"\n", b)
				if hasLocal {
					fmt.Fprintf(&chains, "\t\tgoto local-%s\n", b)
				}
			} else {
				fmt.Fprintf(&chains, "\t\tjump mark-for-masquerade\n\t\tgoto service-%s\n", b)
			}
			fmt.Fprintf(&chains, "\t}\n")
		}
		for _, ep := range all {
			if direct {
				break
			}
			c := epChain(s, ep)
			if s.affinity {
				fmt.Fprintf(&chains, "\tset affinity-%s {\n\t\ttype %s\n\t\tflags dynamic,timeout\n\t\ttimeout 3h\n\t}\n", strings.TrimPrefix(c, "endpoint-"), addrType)
			}
			fmt.Fprintf(&chains, "\tchain %s {\n\t\t%s saddr %s jump mark-for-masquerade\n", c, ipX, ep.ip)
			if s.affinity {
				fmt.Fprintf(&chains, "\t\tupdate @affinity-%s { %s saddr }\n", strings.TrimPrefix(c, "endpoint-"), ipX)
			}
			fmt.Fprintf(&chains, "\t\tmeta l4proto %s dnat to %s\n\t}\n", s.proto, epAddr(ep))
		}
	}
	elements := func(el []string) string {
		if len(el) == 0 {
			return ""
		}
		return "\t\telements = { " + strings.Join(el, ",\n\t\t\t     ") + " }\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table %s kube-proxy {\n\tcomment \"rules for kube-proxy\"\n", fam)
	fmt.Fprintf(&b, "\tmap no-endpoint-nodeports {\n\t\ttype inet_proto . inet_service : verdict\n\t\tcomment \"vmap to drop or reject packets to service nodeports with no endpoints\"\n%s\t}\n", elements(noEPNodePorts))
	fmt.Fprintf(&b, "\tmap no-endpoint-services {\n\t\ttype %s . inet_proto . inet_service : verdict\n\t\tcomment \"vmap to drop or reject packets to services with no endpoints\"\n%s\t}\n", addrType, elements(noEPServices))
	fmt.Fprintf(&b, "\tmap service-ips {\n\t\ttype %s . inet_proto . inet_service : verdict\n\t\tcomment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\"\n%s\t}\n", addrType, elements(serviceIPs))
	fmt.Fprintf(&b, "\tmap service-nodeports {\n\t\ttype inet_proto . inet_service : verdict\n\t\tcomment \"NodePort traffic\"\n%s\t}\n", elements(serviceNodePorts))
	fmt.Fprintf(&b, "\tmap firewall-ips {\n\t\ttype %s . inet_proto . inet_service : verdict\n\t\tcomment \"destinations that are subject to LoadBalancerSourceRanges\"\n\t}\n", addrType)
	for _, c := range []string{"filter-prerouting", "filter-input", "filter-forward", "filter-output"} {
		hook := strings.TrimPrefix(c, "filter-")
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority -110; policy accept;\n", c, hook)
		if c != "filter-prerouting" {
			fmt.Fprintf(&b, "\t\tct state new jump endpoints-check\n")
		}
		if c == "filter-prerouting" || c == "filter-output" {
			fmt.Fprintf(&b, "\t\tct state new jump firewall-check\n")
		}
		fmt.Fprintf(&b, "\t}\n")
	}
	fmt.Fprintf(&b, "\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority -100; policy accept;\n\t\tjump services\n\t}\n")
	fmt.Fprintf(&b, "\tchain nat-output {\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}\n")
	fmt.Fprintf(&b, "\tchain nat-postrouting {\n\t\ttype nat hook postrouting priority 100; policy accept;\n\t\tjump masquerading\n\t}\n")
	fmt.Fprintf(&b, "\tchain endpoints-check {\n\t\t%s daddr . meta l4proto . th dport vmap @no-endpoint-services\n\t\tfib daddr type local %s meta l4proto . th dport vmap @no-endpoint-nodeports\n\t}\n", ipX, noLocalhost)
	fmt.Fprintf(&b, "\tchain firewall-check {\n\t\t%s daddr . meta l4proto . th dport vmap @firewall-ips\n\t}\n", ipX)
	fmt.Fprintf(&b, "\tchain reject-chain {\n\t\tcomment \"helper for @no-endpoint-services / @no-endpoint-nodeports\"\n\t\treject\n\t}\n")
	fmt.Fprintf(&b, "\tchain mark-for-masquerade {\n\t\tmeta mark set meta mark | 0x00004000\n\t}\n")
	fmt.Fprintf(&b, "\tchain masquerading {\n\t\tmeta mark & 0x00004000 == 0x00000000 return\n\t\tmeta mark set meta mark ^ 0x00004000\n\t\tmasquerade fully-random\n\t}\n")
	fmt.Fprintf(&b, "\tchain services {\n\t\t%s daddr . meta l4proto . th dport vmap @service-ips\n\t\tfib daddr type local %s meta l4proto . th dport vmap @service-nodeports\n\t}\n", ipX, noLocalhost)
	b.WriteString(chains.String())
	b.WriteString("}\n")
	return b.String()
}

func nftInputFixture(ipv6 bool) string {
	return filepath.Join("testdata", "nft-"+famName(ipv6)+".nft")
}

func nftJSONFixture(ipv6 bool) string {
	return filepath.Join("testdata", "nft-"+famName(ipv6)+".json")
}

// nftWant: the same as the iptables ≥1.25 layout, without counters.
func nftWant(ipv6 bool) map[ServicePort]PortState {
	return scenarioWantCounted(layout125, ipv6, 0, false)
}

func TestNFTFixturesUpToDate(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		gen := genNFT(v6, scenario(v6))
		if *update {
			if err := os.WriteFile(nftInputFixture(v6), []byte(gen), 0o644); err != nil {
				t.Fatal(err)
			}
			ns := newNetns(t)
			nsRun(t, ns, []byte(gen), "nft", "-f", "-")
			fam := "ip"
			if v6 {
				fam = "ip6"
			}
			out := nsRun(t, ns, nil, "nft", "-j", "list", "table", fam, "kube-proxy")
			if err := os.WriteFile(nftJSONFixture(v6), out, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(nftInputFixture(v6))
		if err != nil {
			t.Fatal(err)
		}
		if string(have) != gen {
			t.Errorf("%s differs from the generator; run go test -run TestNFTFixturesUpToDate -update as root", nftInputFixture(v6))
		}
	}
}

func TestParseNFTFixtures(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		data, err := os.ReadFile(nftJSONFixture(v6))
		if err != nil {
			t.Fatal(err)
		}
		res, err := parseNFTJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		fam := FamilyIPv4
		if v6 {
			fam = FamilyIPv6
		}
		snap := &Snapshot{}
		snap.addFamily(fam, res.ports)
		checkFamily(t, snap, fam, nftWant(v6))
	}
}
