package kernelrules

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"slices"
	"time"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// Mode is kube-proxy's proxy mode as the reader sees it.
type Mode string

// Proxy modes. ModeAuto is only meaningful in Options.Mode.
const (
	ModeAuto     Mode = "auto"
	ModeIPTables Mode = "iptables"
	ModeNFTables Mode = "nftables"
	ModeIPVS     Mode = "ipvs"
)

// Backend is the iptables backend kube-proxy writes with, in iptables mode (Snapshot.Backend); it names the
// tools that read it (iptables-<backend>-save).
type Backend string

// The iptables backends.
const (
	BackendLegacy Backend = "legacy"
	BackendNFT    Backend = "nft"
)

// Families as they appear in Snapshot.Families.
const (
	FamilyIPv4 = dataplane.FamilyIPv4
	FamilyIPv6 = dataplane.FamilyIPv6
)

var (
	// ErrUnsupported means kube-proxy runs in a mode whose rules this package cannot
	// judge (IPVS, or a mode it does not know). The snapshot returned with it carries
	// the mode; callers must fall back to another signal, never read it as "no drop".
	ErrUnsupported = dataplane.ErrUnsupported
	// ErrNoRules means no kube-proxy rules were found where they were looked for
	// (kube-proxy not running, another mode, or another backend than detected).
	ErrNoRules = dataplane.ErrNoRules
	// ErrAmbiguous means both iptables and nftables kube-proxy rules exist and
	// nothing (no /proxyMode answer, no configured mode) says which is live.
	ErrAmbiguous = errors.New("both iptables and nftables kube-proxy rules present; set the mode or the /proxyMode URL")
)

// The values a Snapshot gives are the dataplane seam's (nodeprobe/dataplane), so that the node model reads
// kube-proxy's rules as it would any dataplane's; the names stay here for this package's readers and tests.
type (
	// ServicePort names one port of a Service as kube-proxy keys its rules.
	ServicePort = dataplane.ServicePort
	// PortState is what kube-proxy programmed on this node for one Service port in one IP family
	// (Snapshot.Family), or merged over the families read (Snapshot.Port). Here: Drop is an iptables ≥1.25
	// filter "has no local endpoints" DROP, ≤1.24 KUBE-MARK-DROP in KUBE-XLB/KUBE-SVL, or an nftables drop
	// verdict for a NodePort or an external/LB IP; LocalEndpoints are the distinct KUBE-SEP targets of
	// KUBE-SVL or KUBE-XLB, in nftables mode the distinct endpoints of the local-* chain; DropPackets is 0
	// in nftables mode (no counters); Snapshot.Port gives the maximum of LocalEndpoints over families.
	PortState = dataplane.PortState
	// DropRule is one rule that drops external traffic of a Service port for lack of local endpoints. A rule
	// for AllDestinations is kube-proxy ≤1.24's -j KUBE-MARK-DROP in KUBE-XLB-<h> (≤1.23) or KUBE-SVL-<h>
	// (1.24), reached from KUBE-NODEPORTS and from each address's rule.
	DropRule = dataplane.DropRule
)

// dropLess orders drop rules: the rule for all destinations, then the NodePort rule,
// then by address and port.
func dropLess(d, o DropRule) bool {
	if d.AllDestinations != o.AllDestinations {
		return d.AllDestinations
	}
	if (d.Address == "") != (o.Address == "") {
		return d.Address == ""
	}
	if d.Address != o.Address {
		return d.Address < o.Address
	}
	return d.Port < o.Port
}

// Snapshot is one read of kube-proxy's rules. It is immutable and shared between
// concurrent callers: do not modify it.
type Snapshot struct {
	Mode     Mode
	Backend  Backend  // BackendLegacy or BackendNFT in iptables mode, "" otherwise
	Families []string // families whose kube-proxy rules were found and read, IPv4 first
	ReadAt   time.Time
	Duration time.Duration
	// Watch is what the watcher's state was when this snapshot was read:
	// WatchNotified when change notifications covered the mode (tables kept
	// from earlier reads were vouched for by them), WatchPolled when the
	// change signal was read instead, WatchNone when the Runner has none
	// (every table was saved). See doc.go, "Change notifications". Empty in
	// snapshots NewSnapshot builds.
	Watch WatchState
	// Resyncs counts the full re-reads forced since the reader started
	// because notifications were lost or a verification (Options.FullVerify,
	// LegacyVerify) found a kept table differing from the kernel's.
	Resyncs uint64

	// fams holds each family's states, in the order of Families.
	fams []familyPorts
	// counted: some drop rule carries a packet counter (dataplane.Info.Counted).
	counted bool
}

type familyPorts struct {
	name  string
	ports map[portKey]*PortState
}

// portKey is kube-proxy's 16-character chain hash (KUBE-SVC-<hash>), used as the
// key in both modes so lookups do not depend on comments.
type portKey [16]byte

// lookup finds sp's state in one family's map, trying old releases' spelling too.
func lookup(ports map[portKey]*PortState, sp ServicePort) *PortState {
	if len(ports) == 0 {
		return nil
	}
	if st, ok := ports[spKey(sp, "")]; ok {
		return st
	}
	if sp.Port == "" {
		// Old kube-proxy releases spelled unnamed ports "ns/name:" (trailing
		// colon), which gives another hash.
		if st, ok := ports[spKey(sp, ":")]; ok {
			return st
		}
	}
	return nil
}

// Family returns what kube-proxy programmed for sp in one IP family (FamilyIPv4
// or FamilyIPv6). The zero PortState means no rule for sp in that family (or the
// family was not read: see HasFamily).
func (s *Snapshot) Family(sp ServicePort, family string) PortState {
	if s == nil {
		return PortState{}
	}
	for _, f := range s.fams {
		if f.name == family {
			if st := lookup(f.ports, sp); st != nil {
				return view(st)
			}
			return PortState{}
		}
	}
	return PortState{}
}

// HasFamily reports whether that family's kube-proxy rules were found and read.
func (s *Snapshot) HasFamily(family string) bool {
	if s == nil {
		return false
	}
	for _, f := range s.fams {
		if f.name == family {
			return true
		}
	}
	return false
}

// Port returns the state programmed for sp merged over the families read:
// Programmed, Drop and Reject when any family says so, LocalEndpoints the maximum,
// Endpoints every family's, DropPackets the sum, Drops every family's rules (IPv4's first within each rank of
// the order). The zero PortState means no rule exists in any family. New code
// should use Family: a merged view hides a family that drops behind one that does not.
func (s *Snapshot) Port(sp ServicePort) PortState {
	if s == nil {
		return PortState{}
	}
	var out PortState
	n := 0
	for _, f := range s.fams {
		st := lookup(f.ports, sp)
		if st == nil {
			continue
		}
		n++
		if n == 1 {
			out = view(st)
			continue
		}
		out.Programmed = out.Programmed || st.Programmed
		out.Drop = out.Drop || st.Drop
		out.Reject = out.Reject || st.Reject
		out.LocalEndpoints = max(out.LocalEndpoints, st.LocalEndpoints)
		out.DropPackets += st.DropPackets
		if len(st.Endpoints) > 0 {
			out.Endpoints = append(slices.Clip(out.Endpoints), st.Endpoints...)
		}
		if len(st.Drops) > 0 {
			drops := make([]DropRule, 0, len(out.Drops)+len(st.Drops))
			drops = append(append(drops, out.Drops...), st.Drops...)
			sortDrops(drops)
			out.Drops = drops
		}
	}
	return out
}

// view returns a copy of the state whose Drops and Endpoints cannot be appended to in place.
func view(st *PortState) PortState {
	v := *st
	v.Drops = slices.Clip(v.Drops)
	v.Endpoints = slices.Clip(v.Endpoints)
	return v
}

// Len is the number of Service ports with any state in the snapshot, counted once
// over families.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	switch len(s.fams) {
	case 0:
		return 0
	case 1:
		return len(s.fams[0].ports)
	}
	seen := map[portKey]bool{}
	for _, f := range s.fams {
		for k := range f.ports {
			seen[k] = true
		}
	}
	return len(seen)
}

// addFamily appends one family's parsed states to a snapshot being built,
// sorting each state's Drops.
func (s *Snapshot) addFamily(name string, ports map[portKey]*PortState) {
	for _, st := range ports {
		sortDrops(st.Drops)
	}
	s.addSorted(name, ports)
}

// addSorted appends one family's states, their Drops sorted already, and
// notes whether a drop rule carries a counter.
func (s *Snapshot) addSorted(name string, ports map[portKey]*PortState) {
	s.Families = append(s.Families, name)
	s.fams = append(s.fams, familyPorts{name: name, ports: ports})
	for _, st := range ports {
		if s.counted {
			break
		}
		for _, d := range st.Drops {
			s.counted = s.counted || d.Counted
		}
	}
}

// addDrop records one drop rule, keeping Drop and DropPackets in step with Drops.
func addDrop(st *PortState, d DropRule) {
	st.Programmed = true
	st.Drop = true
	st.DropPackets += d.Packets
	st.Drops = append(st.Drops, d)
}

func sortDrops(d []DropRule) {
	slices.SortStableFunc(d, func(a, b DropRule) int {
		switch {
		case dropLess(a, b):
			return -1
		case dropLess(b, a):
			return 1
		}
		return 0
	})
}

func hashKey(portName, lowerProto string) portKey {
	// A stack buffer for the usual name lengths: lookups run per Service port
	// and family on every scrape.
	var buf [192]byte
	b := append(append(buf[:0], portName...), lowerProto...)
	return keyOf(b)
}

func keyOf(b []byte) portKey {
	sum := sha256.Sum256(b)
	// 16 base32 characters encode 10 bytes exactly.
	var k portKey
	base32.StdEncoding.Encode(k[:], sum[:10])
	return k
}

// spKey is hashKey(sp.String()+suffix, lower(sp.Protocol)) without allocating.
func spKey(sp ServicePort, suffix string) portKey {
	var buf [192]byte
	return keyOf(appendLower(appendPortName(buf[:0], sp, suffix), sp.Protocol))
}

// appendPortName appends kube-proxy's "ns/name[:port]" spelling of sp, then suffix.
func appendPortName(b []byte, sp ServicePort, suffix string) []byte {
	b = append(b, sp.Namespace...)
	b = append(b, '/')
	b = append(b, sp.Name...)
	if sp.Port != "" {
		b = append(append(b, ':'), sp.Port...)
	}
	return append(b, suffix...)
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
