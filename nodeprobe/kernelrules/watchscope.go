package kernelrules

import "bytes"

// watchScope says which nf_tables objects the parse of the mode and backend
// read last depends on: a transaction that changes none of them cannot change
// a Snapshot. It is judged on the bytes of each notification, without
// allocating.
type watchScope struct {
	known   bool // false before the first read: every transaction is relevant
	mode    Mode
	backend Backend
}

// scopeOf is the scope of a mode and backend.
func scopeOf(mode Mode, backend Backend) watchScope {
	return watchScope{known: mode != "", mode: mode, backend: backend}
}

// iptablesNFT: iptables mode written through nf_tables (iptables-nft).
func (s watchScope) iptablesNFT() bool { return s.mode == ModeIPTables && s.backend == BackendNFT }

// nftables: kube-proxy's nftables mode.
func (s watchScope) nftables() bool { return s.mode == ModeNFTables }

// covered: notifications can vouch for this scope's tables (a legacy table,
// and IPVS mode, is read without nf_tables).
func (s watchScope) covered() bool { return s.iptablesNFT() || s.nftables() }

var (
	tableNAT       = []byte("nat")
	tableFilter    = []byte("filter")
	tableKubeProxy = []byte("kube-proxy")
)

// Counter chains whose rules' counters a read dumps over netlink: a
// transaction that touches one (rewrites it, even unchanged) moves its rules'
// order, which is why the dump's rules are matched to the kept parse by content.
const (
	counterExt = 0 // filter KUBE-EXTERNAL-SERVICES
	counterFW  = 1 // filter KUBE-PROXY-FIREWALL
)

// isHashChain: name is <prefix><16-character Service-port hash>.
func isHashChain(name []byte, prefixes ...[]byte) bool {
	for _, p := range prefixes {
		if len(name) == len(p)+16 && bytes.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ruleContent says whether the content of a rule in table/chain is something
// the parse reads, and which counter chain (counterExt, counterFW; -1 none) it
// is in.
//
// iptables mode reads nat's KUBE-SVL, KUBE-XLB and KUBE-EXT chains (local
// endpoints, ≤1.24 drops) and filter's KUBE-EXTERNAL-SERVICES, KUBE-SERVICES
// and KUBE-PROXY-FIREWALL (drops, rejects, firewall drops). nat KUBE-SERVICES
// and KUBE-NODEPORTS count too, though the parse reads only their existence:
// every chain kube-proxy creates is jumped to from one of these chains, so a
// new Service chain (Programmed) comes with a content change here, and
// creating a chain need not be told from re-declaring it. Endpoint chains
// (KUBE-SEP) and KUBE-SVC's balancing rules, which a remote endpoint's churn
// rewrites, are not read.
//
// nftables mode reads the local-* chains (local endpoints) and the
// external-* chains, which jump to them and are referred to by every
// external dispatch entry.
func (s watchScope) ruleContent(table, chain []byte) (relevant bool, counter int) {
	counter = -1
	switch {
	case s.iptablesNFT() && bytes.Equal(table, tableNAT):
		relevant = isHashChain(chain, prefixSVL, prefixXLB, prefixEXT) ||
			bytes.Equal(chain, chainServices) || bytes.Equal(chain, []byte("KUBE-NODEPORTS"))
	case s.iptablesNFT() && bytes.Equal(table, tableFilter):
		switch {
		case bytes.Equal(chain, chainExternalServices):
			relevant, counter = true, counterExt
		case bytes.Equal(chain, chainProxyFirewall):
			relevant, counter = true, counterFW
		case bytes.Equal(chain, chainServices):
			relevant = true
		}
	case s.nftables() && bytes.Equal(table, tableKubeProxy):
		relevant = bytes.HasPrefix(chain, []byte("local-")) || bytes.HasPrefix(chain, []byte("external-"))
	}
	return relevant, counter
}

// chainEvent says whether creating (or, with deleted, deleting) the chain is
// a change the parse sees. Deleting a Service chain is (Programmed);
// creating one is seen through the rule that jumps to it (ruleContent), since
// kube-proxy's nftables partial sync and other writers "add" existing chains
// again, which the kernel notifies like a creation. The few fixed chains whose
// existence the parse reads (nat KUBE-SERVICES: kube-proxy programs the
// family; IPVS mode's chains) count both ways.
func (s watchScope) chainEvent(table, chain []byte, deleted bool) bool {
	switch {
	case s.iptablesNFT() && bytes.Equal(table, tableNAT):
		if bytes.Equal(chain, chainServices) || bytes.Equal(chain, []byte("KUBE-LOAD-BALANCER")) || bytes.Equal(chain, []byte("KUBE-NODE-PORT")) {
			return true
		}
		return deleted && isHashChain(chain, prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixXLB)
	case s.iptablesNFT() && bytes.Equal(table, tableFilter):
		return deleted && (bytes.Equal(chain, chainExternalServices) || bytes.Equal(chain, chainProxyFirewall) || bytes.Equal(chain, chainServices))
	case s.nftables() && bytes.Equal(table, tableKubeProxy):
		if !deleted {
			return false
		}
		for _, p := range nftChainPrefixes {
			if bytes.HasPrefix(chain, p) {
				return true
			}
		}
	}
	return false
}

// nftChainPrefixes name the chains of a Service port in nftables mode.
var nftChainPrefixes = [][]byte{[]byte("service-"), []byte("external-"), []byte("local-"), []byte("firewall-")}

// nftMaps are the maps of kube-proxy's nftables table whose elements the
// parse reads, or that name the chains whose existence it reads.
var nftMaps = [][]byte{
	[]byte("no-endpoint-nodeports"), []byte("no-endpoint-services"),
	[]byte("service-ips"), []byte("service-nodeports"), []byte("firewall-ips"),
}

// setContent says whether the elements of table/set are read.
func (s watchScope) setContent(table, set []byte) bool {
	if !s.nftables() || !bytes.Equal(table, tableKubeProxy) {
		return false
	}
	for _, m := range nftMaps {
		if bytes.Equal(set, m) {
			return true
		}
	}
	return false
}

// tableEvent says whether creating or deleting the table is a change (the
// parse reads whether kube-proxy's table exists; iptables' tables hold its
// chains).
func (s watchScope) tableEvent(table []byte) bool {
	switch {
	case s.iptablesNFT():
		return bytes.Equal(table, tableNAT) || bytes.Equal(table, tableFilter)
	case s.nftables():
		return bytes.Equal(table, tableKubeProxy)
	}
	return false
}

// anonTable says whether anonymous sets in the table are followed: a rule of a
// relevant chain may refer to one (nftables mode's numgen maps of endpoints).
func (s watchScope) anonTable(table []byte) bool {
	switch {
	case s.iptablesNFT():
		return bytes.Equal(table, tableNAT) || bytes.Equal(table, tableFilter)
	case s.nftables():
		return bytes.Equal(table, tableKubeProxy)
	}
	return false
}
