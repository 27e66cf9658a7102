package rules

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"strings"
	"time"
)

// Mode is kube-proxy's proxy mode as the reader sees it.
type Mode string

// Proxy modes. ModeAuto is only meaningful in Options.Mode.
const (
	ModeAuto     Mode = "auto"
	ModeIPTables Mode = "iptables"
	ModeNFTables Mode = "nftables"
	ModeIPVS     Mode = "ipvs"
	ModeUnknown  Mode = "unknown"
)

// Backend names for iptables mode (Snapshot.Backend).
const (
	BackendLegacy = "legacy"
	BackendNFT    = "nft"
)

// Families as they appear in Snapshot.Families.
const (
	FamilyIPv4 = "IPv4"
	FamilyIPv6 = "IPv6"
)

var (
	// ErrUnsupported means kube-proxy runs in a mode whose rules this package cannot
	// judge (IPVS, or a mode it does not know). The snapshot returned with it carries
	// the mode; callers must fall back to another signal, never read it as "no drop".
	ErrUnsupported = errors.New("kube-proxy mode not supported by the rule reader")
	// ErrNoRules means no kube-proxy rules were found where they were looked for
	// (kube-proxy not running, another mode, or another backend than detected).
	ErrNoRules = errors.New("no kube-proxy rules found")
	// ErrAmbiguous means both iptables and nftables kube-proxy rules exist and
	// nothing (no /proxyMode answer, no configured mode) says which is live.
	ErrAmbiguous = errors.New("both iptables and nftables kube-proxy rules present; set the mode or the /proxyMode URL")
)

// ServicePort names one port of a Service as kube-proxy keys its rules.
type ServicePort struct {
	Namespace string
	Name      string
	Port      string // the port's name; "" when unnamed
	Protocol  string // "TCP", "UDP" or "SCTP" as in the Kubernetes API (case does not matter)
}

// String gives kube-proxy's spelling "ns/name" or "ns/name:port" (without protocol).
func (sp ServicePort) String() string {
	s := sp.Namespace + "/" + sp.Name
	if sp.Port != "" {
		s += ":" + sp.Port
	}
	return s
}

// PortState is what kube-proxy programmed on this node for one Service port,
// merged over the IP families read.
type PortState struct {
	// Programmed: any kube-proxy chain or rule for this Service port exists.
	Programmed bool
	// Drop: external traffic is dropped for lack of local endpoints (iptables ≥1.25
	// filter "has no local endpoints" DROP; ≤1.24 KUBE-MARK-DROP in KUBE-XLB/KUBE-SVL;
	// nftables a drop verdict for a NodePort or an external/LB IP). True when any family drops.
	Drop bool
	// Reject: "has no endpoints" — no endpoints anywhere (an outage, not a per-node blackhole).
	Reject bool
	// LocalEndpoints: local endpoints programmed (distinct KUBE-SEP targets of KUBE-SVL
	// or KUBE-XLB; distinct endpoint-* targets of the nft local-* chain). Maximum over families.
	LocalEndpoints int
	// DropPackets: packet counters of this port's drop rules summed over families.
	// Raw: kube-proxy rewrites the rules on every sync, which resets the counters.
	// Always 0 in nftables mode (kube-proxy puts no counters on its verdict map elements).
	DropPackets uint64
}

// Snapshot is one read of kube-proxy's rules. It is immutable and shared between
// concurrent callers: do not modify it.
type Snapshot struct {
	Mode     Mode
	Backend  string   // BackendLegacy or BackendNFT in iptables mode, "" otherwise
	Families []string // families whose kube-proxy rules were found and read
	ReadAt   time.Time
	Duration time.Duration

	ports map[portKey]*PortState
}

// portKey is kube-proxy's 16-character chain hash (KUBE-SVC-<hash>), used as the
// key in both modes so lookups do not depend on comments.
type portKey [16]byte

// Port returns the state programmed for sp. The zero PortState means no rule exists.
func (s *Snapshot) Port(sp ServicePort) PortState {
	if s == nil || s.ports == nil {
		return PortState{}
	}
	proto := strings.ToLower(sp.Protocol)
	if st, ok := s.ports[hashKey(sp.String(), proto)]; ok {
		return *st
	}
	if sp.Port == "" {
		// Old kube-proxy releases spelled unnamed ports "ns/name:" (trailing
		// colon), which gives another hash.
		if st, ok := s.ports[hashKey(sp.String()+":", proto)]; ok {
			return *st
		}
	}
	return PortState{}
}

// Len is the number of Service ports with any state in the snapshot.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	return len(s.ports)
}

// IPTablesChainHash is the hash kube-proxy puts in KUBE-SVC/SVL/EXT/FW/XLB-<hash>
// chain names: the first 16 characters of base32(sha256("ns/name[:port]" + protocol)),
// protocol in lower case.
func IPTablesChainHash(sp ServicePort) string {
	k := hashKey(sp.String(), strings.ToLower(sp.Protocol))
	return string(k[:])
}

func hashKey(portName, lowerProto string) portKey {
	h := sha256.New()
	h.Write([]byte(portName))
	h.Write([]byte(lowerProto))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	// 16 base32 characters encode 10 bytes exactly.
	var k portKey
	base32.StdEncoding.Encode(k[:], sum[:10])
	return k
}

// stateFor returns the entry for k in m, creating it.
func stateFor(m map[portKey]*PortState, k portKey) *PortState {
	st := m[k]
	if st == nil {
		st = &PortState{}
		m[k] = st
	}
	return st
}

// mergeFamily folds one family's states into the snapshot's.
func mergeFamily(dst, src map[portKey]*PortState) {
	for k, s := range src {
		d := stateFor(dst, k)
		d.Programmed = d.Programmed || s.Programmed
		d.Drop = d.Drop || s.Drop
		d.Reject = d.Reject || s.Reject
		d.LocalEndpoints = max(d.LocalEndpoints, s.LocalEndpoints)
		d.DropPackets += s.DropPackets
	}
}
