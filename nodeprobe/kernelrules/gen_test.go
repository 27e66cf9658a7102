package kernelrules

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strings"
)

// This file generates kube-proxy-shaped iptables rulesets in kube-proxy's own
// argument order (the order of pkg/proxy/iptables/proxier.go and its test
// fixtures). Loaded with iptables-restore and dumped with iptables-save they give
// the save order; both orders are committed under testdata/.

type layout string

const (
	layout125 layout = "v1.25" // current: filter DROP, EXT -> SVL only with local endpoints
	layout124 layout = "v1.24" // EXT always -> SVL; empty SVL holds KUBE-MARK-DROP
	layout123 layout = "v1.23" // KUBE-XLB with KUBE-MARK-DROP
)

type genEndpoint struct {
	ip    string
	port  int
	local bool
}

type genService struct {
	ns, name, port string // port name, "" when unnamed
	proto          string // lower case
	clusterIP      string
	svcPort        int
	nodePort       int
	hcNodePort     int
	lbIPs          []string
	externalIPs    []string
	etpLocal       bool
	itpLocal       bool
	affinity       bool
	eps            []genEndpoint
	dropPkts       uint64 // counter put on each drop rule (restore -c)
	// sourceRanges is loadBalancerSourceRanges (layout125): LB IP traffic goes
	// through KUBE-FW-<h>, and filter KUBE-PROXY-FIREWALL drops what it did not
	// DNAT, with counter fwPkts.
	sourceRanges []string
	fwPkts       uint64
	// noComments writes the KUBE-SVL jumps without their "-> ip:port" comments,
	// as kube-proxy does in large-cluster mode (more than 1,000 endpoints).
	noComments bool
}

func (s genService) portName() string {
	n := s.ns + "/" + s.name
	if s.port != "" {
		n += ":" + s.port
	}
	return n
}

func (s genService) servicePort() ServicePort {
	return ServicePort{Namespace: s.ns, Name: s.name, Port: s.port, Protocol: strings.ToUpper(s.proto)}
}

func genHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

func (s genService) chain(prefix string) string { return prefix + genHash(s.portName()+s.proto) }

func (s genService) sepChain(ep genEndpoint) string {
	return "KUBE-SEP-" + genHash(s.portName()+s.proto+epAddr(ep))
}

func epAddr(ep genEndpoint) string {
	return netip.AddrPortFrom(netip.MustParseAddr(ep.ip), uint16(ep.port)).String()
}

// genRules returns restore input for *filter and *nat in kube-proxy's order.
// ipv6 selects address-family specific bits (pod CIDR, firewall rule).
func genRules(l layout, ipv6 bool, svcs []genService) string {
	podCIDR := "10.244.0.0/16"
	if ipv6 {
		podCIDR = "fd00:10:244::/56"
	}
	quote := func(s string) string {
		if strings.ContainsAny(s, " \"") {
			return `"` + s + `"`
		}
		return s
	}
	var f, fc, n, nc strings.Builder
	counters := func(pk uint64) string {
		if pk == 0 {
			return ""
		}
		return fmt.Sprintf("[%d:%d] ", pk, pk*60)
	}
	w := func(b *strings.Builder, format string, a ...any) { fmt.Fprintf(b, format+"\n", a...) }

	w(&fc, "*filter")
	w(&fc, ":INPUT ACCEPT [0:0]")
	w(&fc, ":FORWARD ACCEPT [0:0]")
	w(&fc, ":OUTPUT ACCEPT [0:0]")
	for _, c := range []string{"KUBE-EXTERNAL-SERVICES", "KUBE-FIREWALL", "KUBE-FORWARD", "KUBE-KUBELET-CANARY", "KUBE-NODEPORTS", "KUBE-PROXY-CANARY", "KUBE-PROXY-FIREWALL", "KUBE-SERVICES"} {
		w(&fc, ":%s - [0:0]", c)
	}
	w(&f, "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL")
	w(&f, "-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS")
	w(&f, "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES")
	w(&f, "-A INPUT -j KUBE-FIREWALL")
	w(&f, "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL")
	w(&f, "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD")
	w(&f, "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
	w(&f, "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES")
	w(&f, "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL")
	w(&f, "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
	w(&f, "-A OUTPUT -j KUBE-FIREWALL")
	if l == layout125 {
		if !ipv6 {
			w(&f, "-A KUBE-FIREWALL -m comment --comment \"block incoming localnet connections\" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")
		}
	} else {
		w(&f, "-A KUBE-FIREWALL -m comment --comment \"kubernetes firewall for dropping marked packets\" -m mark --mark 0x8000/0x8000 -j DROP")
	}
	w(&f, "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP")
	w(&f, "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT")
	w(&f, "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")

	w(&nc, "*nat")
	w(&nc, ":PREROUTING ACCEPT [0:0]")
	w(&nc, ":INPUT ACCEPT [0:0]")
	w(&nc, ":OUTPUT ACCEPT [0:0]")
	w(&nc, ":POSTROUTING ACCEPT [0:0]")
	base := []string{"KUBE-KUBELET-CANARY", "KUBE-MARK-MASQ", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-PROXY-CANARY", "KUBE-SERVICES"}
	if l != layout125 {
		base = append(base, "KUBE-MARK-DROP")
	}
	for _, c := range base {
		w(&nc, ":%s - [0:0]", c)
	}
	w(&n, "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
	w(&n, "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
	w(&n, "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING")
	w(&n, "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000")
	if l != layout125 {
		w(&n, "-A KUBE-MARK-DROP -j MARK --or-mark 0x8000")
	}
	w(&n, "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN")
	w(&n, "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000")
	w(&n, "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully")

	for _, s := range svcs {
		pn := s.portName()
		p := s.proto
		var local, all []genEndpoint
		for _, ep := range s.eps {
			all = append(all, ep)
			if ep.local {
				local = append(local, ep)
			}
		}
		hasEPs := len(all) > 0
		hasLocal := len(local) > 0
		svc, svl, ext, fw, xlb := s.chain("KUBE-SVC-"), s.chain("KUBE-SVL-"), s.chain("KUBE-EXT-"), s.chain("KUBE-FW-"), s.chain("KUBE-XLB-")
		external := s.nodePort != 0 || len(s.lbIPs) > 0 || len(s.externalIPs) > 0

		if !hasEPs {
			// No endpoints anywhere: filter REJECTs only, no nat chains.
			c := quote(pn + " has no endpoints")
			w(&f, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j REJECT", c, p, p, s.clusterIP, s.svcPort)
			for _, ip := range append(append([]string{}, s.externalIPs...), s.lbIPs...) {
				w(&f, "-A KUBE-EXTERNAL-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j REJECT", c, p, p, ip, s.svcPort)
			}
			if s.nodePort != 0 {
				w(&f, "-A KUBE-EXTERNAL-SERVICES -m comment --comment %s -m addrtype --dst-type LOCAL -m %s -p %s --dport %d -j REJECT", c, p, p, s.nodePort)
			}
			continue
		}
		if s.hcNodePort != 0 {
			w(&f, "-A KUBE-NODEPORTS -m comment --comment %s -m tcp -p tcp --dport %d -j ACCEPT", quote(pn+" health check node port"), s.hcNodePort)
		}

		switch l {
		case layout125:
			w(&nc, ":%s - [0:0]", svc)
			if hasLocal && (s.etpLocal || s.itpLocal) {
				w(&nc, ":%s - [0:0]", svl)
			}
			if external {
				w(&nc, ":%s - [0:0]", ext)
			}
			lbTarget := ext
			if len(s.sourceRanges) > 0 && len(s.lbIPs) > 0 {
				lbTarget = fw
				w(&nc, ":%s - [0:0]", fw)
				for _, cidr := range s.sourceRanges {
					w(&n, "-A %s -m comment --comment %s -s %s -j %s", fw, quote(pn+" loadbalancer IP"), cidr, ext)
				}
				w(&n, "-A %s -m comment --comment %s", fw, quote("other traffic to "+pn+" will be dropped by KUBE-PROXY-FIREWALL"))
				for _, ip := range s.lbIPs {
					w(&f, "%s-A KUBE-PROXY-FIREWALL -m comment --comment %s -m %s -p %s -d %s --dport %d -j DROP", counters(s.fwPkts), quote(pn+" traffic not accepted by "+fw), p, p, ip, s.svcPort)
				}
			}
			// cluster IP
			if s.itpLocal && !hasLocal {
				w(&f, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j DROP", quote(pn+" has no local endpoints"), p, p, s.clusterIP, s.svcPort)
			} else {
				target := svc
				if s.itpLocal {
					target = svl
				}
				w(&n, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j %s", quote(pn+" cluster IP"), p, p, s.clusterIP, s.svcPort, target)
			}
			for _, ip := range s.externalIPs {
				w(&n, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j %s", quote(pn+" external IP"), p, p, ip, s.svcPort, ext)
				if s.etpLocal && !hasLocal {
					w(&f, "%s-A KUBE-EXTERNAL-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j DROP", counters(s.dropPkts), quote(pn+" has no local endpoints"), p, p, ip, s.svcPort)
				}
			}
			for _, ip := range s.lbIPs {
				w(&n, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j %s", quote(pn+" loadbalancer IP"), p, p, ip, s.svcPort, lbTarget)
			}
			if s.etpLocal && !hasLocal {
				for _, ip := range s.lbIPs {
					w(&f, "%s-A KUBE-EXTERNAL-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j DROP", counters(s.dropPkts), quote(pn+" has no local endpoints"), p, p, ip, s.svcPort)
				}
			}
			if s.nodePort != 0 {
				w(&n, "-A KUBE-NODEPORTS -m comment --comment %s -m %s -p %s --dport %d -j %s", quote(pn), p, p, s.nodePort, ext)
				if s.etpLocal && !hasLocal {
					w(&f, "%s-A KUBE-EXTERNAL-SERVICES -m comment --comment %s -m addrtype --dst-type LOCAL -m %s -p %s --dport %d -j DROP", counters(s.dropPkts), quote(pn+" has no local endpoints"), p, p, s.nodePort)
				}
			}
			w(&n, "-A KUBE-SVC-%s -m comment --comment %s -m %s -p %s -d %s --dport %d ! -s %s -j KUBE-MARK-MASQ", svc[9:], quote(pn+" cluster IP"), p, p, s.clusterIP, s.svcPort, podCIDR)
			if external {
				if s.etpLocal {
					w(&n, "-A %s -m comment --comment %s -s %s -j %s", ext, quote("pod traffic for "+pn+" external destinations"), podCIDR, svc)
					w(&n, "-A %s -m comment --comment %s -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ", ext, quote("masquerade LOCAL traffic for "+pn+" external destinations"))
					w(&n, "-A %s -m comment --comment %s -m addrtype --src-type LOCAL -j %s", ext, quote("route LOCAL traffic for "+pn+" external destinations"), svc)
					if hasLocal {
						w(&n, "-A %s -j %s", ext, svl)
					}
				} else {
					w(&n, "-A %s -m comment --comment %s -j KUBE-MARK-MASQ", ext, quote("masquerade traffic for "+pn+" external destinations"))
					w(&n, "-A %s -j %s", ext, svc)
				}
			}
			genBalance(w, &n, s, svc, all)
			if hasLocal && (s.etpLocal || s.itpLocal) {
				genBalance(w, &n, s, svl, local)
			}
		case layout124:
			w(&nc, ":%s - [0:0]", svc)
			if s.etpLocal {
				w(&nc, ":%s - [0:0]", svl)
			}
			if external {
				w(&nc, ":%s - [0:0]", ext)
			}
			w(&n, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j %s", quote(pn+" cluster IP"), p, p, s.clusterIP, s.svcPort, svc)
			for _, ip := range s.lbIPs {
				w(&n, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j %s", quote(pn+" loadbalancer IP"), p, p, ip, s.svcPort, ext)
			}
			if s.nodePort != 0 {
				w(&n, "-A KUBE-NODEPORTS -m comment --comment %s -m %s -p %s --dport %d -j %s", quote(pn), p, p, s.nodePort, ext)
			}
			w(&n, "-A %s -m comment --comment %s -m %s -p %s -d %s --dport %d ! -s %s -j KUBE-MARK-MASQ", svc, quote(pn+" cluster IP"), p, p, s.clusterIP, s.svcPort, podCIDR)
			if external {
				if s.etpLocal {
					w(&n, "-A %s -m comment --comment %s -s %s -j %s", ext, quote("pod traffic for "+pn+" external destinations"), podCIDR, svc)
					w(&n, "-A %s -m comment --comment %s -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ", ext, quote("masquerade LOCAL traffic for "+pn+" external destinations"))
					w(&n, "-A %s -m comment --comment %s -m addrtype --src-type LOCAL -j %s", ext, quote("route LOCAL traffic for "+pn+" external destinations"), svc)
					w(&n, "-A %s -j %s", ext, svl)
				} else {
					w(&n, "-A %s -m comment --comment %s -j KUBE-MARK-MASQ", ext, quote("masquerade traffic for "+pn+" external destinations"))
					w(&n, "-A %s -j %s", ext, svc)
				}
			}
			genBalance(w, &n, s, svc, all)
			if s.etpLocal {
				if hasLocal {
					genBalance(w, &n, s, svl, local)
				} else {
					w(&n, "%s-A %s -m comment --comment %s -j KUBE-MARK-DROP", counters(s.dropPkts), svl, quote(pn+" has no local endpoints"))
				}
			}
		case layout123:
			w(&nc, ":%s - [0:0]", svc)
			if s.etpLocal {
				w(&nc, ":%s - [0:0]", xlb)
			}
			if len(s.lbIPs) > 0 {
				w(&nc, ":%s - [0:0]", fw)
			}
			w(&n, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j %s", quote(pn+" cluster IP"), p, p, s.clusterIP, s.svcPort, svc)
			target := svc
			if s.etpLocal {
				target = xlb
			}
			for _, ip := range s.lbIPs {
				w(&n, "-A KUBE-SERVICES -m comment --comment %s -m %s -p %s -d %s --dport %d -j %s", quote(pn+" loadbalancer IP"), p, p, ip, s.svcPort, fw)
				w(&n, "-A %s -m comment --comment %s -j %s", fw, quote(pn+" loadbalancer IP"), target)
				// End of a firewall chain: not a "no local endpoints" drop.
				w(&n, "-A %s -m comment --comment %s -j KUBE-MARK-DROP", fw, quote(pn+" loadbalancer IP"))
			}
			if s.nodePort != 0 {
				w(&n, "-A KUBE-NODEPORTS -m comment --comment %s -m %s -p %s --dport %d -j %s", quote(pn), p, p, s.nodePort, target)
			}
			w(&n, "-A %s -m comment --comment %s -m %s -p %s -d %s --dport %d ! -s %s -j KUBE-MARK-MASQ", svc, quote(pn+" cluster IP"), p, p, s.clusterIP, s.svcPort, podCIDR)
			genBalance(w, &n, s, svc, all)
			if s.etpLocal {
				w(&n, "-A %s -m comment --comment %s -s %s -j %s", xlb, quote("Redirect pods trying to reach external loadbalancer VIP to clusterIP"), podCIDR, svc)
				w(&n, "-A %s -m comment --comment %s -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ", xlb, quote("masquerade LOCAL traffic for "+pn+" LB IP"))
				w(&n, "-A %s -m comment --comment %s -m addrtype --src-type LOCAL -j %s", xlb, quote("route LOCAL traffic for "+pn+" LB IP to service chain"), svc)
				if hasLocal {
					genBalance(w, &n, s, xlb, local)
				} else {
					w(&n, "%s-A %s -m comment --comment %s -j KUBE-MARK-DROP", counters(s.dropPkts), xlb, quote(pn+" has no local endpoints"))
				}
			}
		}
		for _, ep := range all {
			sep := s.sepChain(ep)
			w(&nc, ":%s - [0:0]", sep)
			w(&n, "-A %s -m comment --comment %s -s %s -j KUBE-MARK-MASQ", sep, quote(pn), ep.ip)
			if s.affinity {
				w(&n, "-A %s -m comment --comment %s -m recent --name %s --set -m %s -p %s -j DNAT --to-destination %s", sep, quote(pn), sep, p, p, epAddr(ep))
			} else {
				w(&n, "-A %s -m comment --comment %s -m %s -p %s -j DNAT --to-destination %s", sep, quote(pn), p, p, epAddr(ep))
			}
		}
	}
	w(&n, "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS")
	return fc.String() + f.String() + "COMMIT\n" + nc.String() + n.String() + "COMMIT\n"
}

type writeFn func(b *strings.Builder, format string, a ...any)

func genBalance(w writeFn, b *strings.Builder, s genService, chain string, eps []genEndpoint) {
	pn := s.portName()
	comment := func(ep genEndpoint) string {
		if s.noComments {
			return ""
		}
		return ` -m comment --comment "` + pn + " -> " + epAddr(ep) + `"`
	}
	if s.affinity {
		for _, ep := range eps {
			sep := s.sepChain(ep)
			w(b, "-A %s%s -m recent --name %s --rcheck --seconds 10800 --reap -j %s", chain, comment(ep), sep, sep)
		}
	}
	for i, ep := range eps {
		if i < len(eps)-1 {
			w(b, "-A %s%s -m statistic --mode random --probability %0.10f -j %s", chain, comment(ep), 1.0/float64(len(eps)-i), s.sepChain(ep))
		} else {
			w(b, "-A %s%s -j %s", chain, comment(ep), s.sepChain(ep))
		}
	}
}
