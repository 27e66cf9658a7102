package arrivals

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"
)

// Protocol is a Service port's transport protocol. The values are IP protocol numbers.
type Protocol uint8

// The protocols a Service port can have.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

// String returns the name Kubernetes uses (corev1.Protocol).
func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// ParseProtocol reads a Kubernetes protocol name ("TCP", "UDP", "SCTP").
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "TCP":
		return TCP, nil
	case "UDP":
		return UDP, nil
	case "SCTP":
		return SCTP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// Dest is one destination whose arrivals are counted.
type Dest struct {
	Protocol Protocol
	// Addr is the destination address a client uses: a load balancer ingress IP or an externalIP. The
	// unspecified address of a family (0.0.0.0 or ::, see NodeDest) stands for this node's own addresses of
	// that family (Watch.NodeAddrs): a NodePort, or a health check node port.
	Addr netip.Addr
	Port uint16
}

// NodeDest is the destination "port on any of this node's addresses of one family": a NodePort or a health
// check node port.
func NodeDest(p Protocol, ipv6 bool, port uint16) Dest {
	a := netip.IPv4Unspecified()
	if ipv6 {
		a = netip.IPv6Unspecified()
	}
	return Dest{Protocol: p, Addr: a, Port: port}
}

// IsNode says whether d stands for the node's own addresses (NodeDest).
func (d Dest) IsNode() bool { return d.Addr.IsUnspecified() }

// IPv6 says whether d is an IPv6 destination.
func (d Dest) IPv6() bool { return d.Addr.Is6() }

func (d Dest) String() string {
	return fmt.Sprintf("%s %s", d.Protocol, netip.AddrPortFrom(d.Addr, d.Port))
}

func compareDest(a, b Dest) int {
	if a.Protocol != b.Protocol {
		return int(a.Protocol) - int(b.Protocol)
	}
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// Watch is what to count. The exporter builds it from the API view on every scrape and hands it to
// Meter.Watch, which rebuilds the kernel filter only when it changed.
type Watch struct {
	// NodeAddrs are this node's addresses on which NodePorts and health check node ports are counted: the
	// addresses kube-proxy serves NodePorts on (inside its nodePortAddresses, else every node address). A
	// family without one counts no arrival at a NodeDest of that family.
	NodeAddrs []netip.Addr
	// Dests are the Service destinations: NodeDest per family for a NodePort, the ingress IP and port of a
	// load balancer, an externalIP and port. TCP counts SYNs without ACK, SCTP counts INIT chunks (a new
	// association), UDP counts every datagram (UDP has no "new").
	Dests []Dest
	// HealthChecks are health check node ports, TCP only: a probe is a SYN, its source is remembered. Usually
	// NodeDest per family.
	HealthChecks []Dest
	// Internal are source prefixes whose packets are not external arrivals: the cluster's pod CIDRs, whose
	// traffic kube-proxy short-circuits to every endpoint. They are counted in FamilyStats.Internal only.
	Internal []netip.Prefix
	// InternalLinks are the interfaces whose arrivals are not external, whatever their source: kube-proxy's
	// BridgeInterface and InterfaceNamePrefix local detectors. Counted in FamilyStats.Internal only.
	InternalLinks []LinkMatch
	// Owners says whose each destination and health check node port is: the UID of the Service it belongs
	// to (the UIDs of several, joined, where Services share one). What the meter learns at a destination (its
	// counts, its sources, their clocks and roles, its flows) is of its owner's traffic: a destination whose
	// owner differs from the previous Watch's starts afresh, as if it had just been added, and a run an
	// earlier meter counted (Meter.Restore) is applied only to a destination of the same owner. A NodePort
	// freed by a deleted Service and given to a new one would otherwise hand the new Service the old one's
	// checkers and clients. A destination without an owner here (or before) keeps what it learnt.
	Owners map[Dest]string
}

// ErrInvalidWatch wraps every reason Meter.Watch rejects a Watch.
var ErrInvalidWatch = errors.New("invalid watch")

// normalize validates w and returns it in canonical form: IPv4-mapped addresses unmapped, zones dropped,
// prefixes masked, every list sorted and without duplicates, so two Watches that mean the same compare equal.
func (w Watch) normalize() (Watch, error) {
	var out Watch
	for _, a := range w.NodeAddrs {
		a = a.Unmap().WithZone("")
		if !a.IsValid() || a.IsUnspecified() {
			return Watch{}, fmt.Errorf("%w: node address %v", ErrInvalidWatch, a)
		}
		out.NodeAddrs = append(out.NodeAddrs, a)
	}
	slices.SortFunc(out.NodeAddrs, netip.Addr.Compare)
	out.NodeAddrs = slices.Compact(out.NodeAddrs)

	dest := func(d Dest, what string) (Dest, error) {
		d.Addr = d.Addr.Unmap().WithZone("")
		switch {
		case d.Protocol != TCP && d.Protocol != UDP && d.Protocol != SCTP:
			return d, fmt.Errorf("%w: %s %v: unknown protocol", ErrInvalidWatch, what, d)
		case !d.Addr.IsValid():
			return d, fmt.Errorf("%w: %s %v: no address (use NodeDest for a NodePort)", ErrInvalidWatch, what, d)
		case d.Port == 0:
			return d, fmt.Errorf("%w: %s %v: port 0", ErrInvalidWatch, what, d)
		}
		return d, nil
	}
	for _, d := range w.Dests {
		d, err := dest(d, "destination")
		if err != nil {
			return Watch{}, err
		}
		out.Dests = append(out.Dests, d)
	}
	for _, d := range w.HealthChecks {
		d, err := dest(d, "health check")
		if err != nil {
			return Watch{}, err
		}
		if d.Protocol != TCP {
			return Watch{}, fmt.Errorf("%w: health check %v: health check node ports are TCP", ErrInvalidWatch, d)
		}
		out.HealthChecks = append(out.HealthChecks, d)
	}
	slices.SortFunc(out.Dests, compareDest)
	out.Dests = slices.Compact(out.Dests)
	slices.SortFunc(out.HealthChecks, compareDest)
	out.HealthChecks = slices.Compact(out.HealthChecks)
	for _, h := range out.HealthChecks {
		if _, dup := slices.BinarySearchFunc(out.Dests, h, compareDest); dup {
			return Watch{}, fmt.Errorf("%w: %v is both a destination and a health check", ErrInvalidWatch, h)
		}
	}
	for _, p := range w.Internal {
		if !p.IsValid() {
			return Watch{}, fmt.Errorf("%w: internal prefix %v", ErrInvalidWatch, p)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out.Internal = append(out.Internal, p.Masked())
	}
	slices.SortFunc(out.Internal, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out.Internal = slices.Compact(out.Internal)
	for _, l := range w.InternalLinks {
		if err := l.validate(); err != nil {
			return Watch{}, err
		}
		out.InternalLinks = append(out.InternalLinks, l)
	}
	slices.SortFunc(out.InternalLinks, compareLinkMatch)
	out.InternalLinks = slices.Compact(out.InternalLinks)
	for d, o := range w.Owners {
		d.Addr = d.Addr.Unmap().WithZone("")
		if o == "" {
			continue
		}
		if out.Owners == nil {
			out.Owners = make(map[Dest]string, len(w.Owners))
		}
		out.Owners[d] = o
	}
	return out, nil
}

func (w Watch) clone() Watch {
	return Watch{NodeAddrs: slices.Clone(w.NodeAddrs), Dests: slices.Clone(w.Dests),
		HealthChecks: slices.Clone(w.HealthChecks), Internal: slices.Clone(w.Internal), InternalLinks: slices.Clone(w.InternalLinks),
		Owners: maps.Clone(w.Owners)}
}

func (w Watch) equal(o Watch) bool {
	return slices.Equal(w.NodeAddrs, o.NodeAddrs) && slices.Equal(w.Dests, o.Dests) &&
		slices.Equal(w.HealthChecks, o.HealthChecks) && slices.Equal(w.Internal, o.Internal) &&
		slices.Equal(w.InternalLinks, o.InternalLinks) && maps.Equal(w.Owners, o.Owners)
}

// sameOwner: what was learnt at a destination owned by was is still its owner's under now. An owner not
// known on either side (a caller that names none, a state file written before owners were kept) is taken
// for the same.
func sameOwner(was, now string) bool { return was == "" || now == "" || was == now }

// Status says whether the meter observes anything. Anything but StatusOK means the counts say nothing: export
// the state, never "no arrivals".
type Status int

// The meter's states.
const (
	// StatusOK: the sockets are open and counting.
	StatusOK Status = iota
	// StatusPermissionDenied: socket(AF_PACKET) was refused, the process lacks CAP_NET_RAW in the network
	// namespace. Nothing is observed.
	StatusPermissionDenied
	// StatusFailed: opening or reading the sockets failed otherwise (Snapshot.Err). Nothing is observed.
	StatusFailed
	// StatusClosed: Close was called.
	StatusClosed
)

// String returns a label value: "ok", "permission_denied", "failed", "closed".
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusPermissionDenied:
		return "permission_denied"
	case StatusFailed:
		return "failed"
	case StatusClosed:
		return "closed"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// FilterLevel is how much of the Watch the kernel filter checks itself. The finest level that fits the
// kernel's limits (4,096 instructions, net.core.optmem_max) is used; coarser ones pass more packets to user
// space, where the same checks are made again, so counts are the same at every level, only the cost differs.
type FilterLevel int

// The filter levels, finest first.
const (
	// FilterNone: nothing of this family is watched; the socket is not bound and costs nothing.
	FilterNone FilterLevel = iota
	// FilterExact: protocol, TCP flags / SCTP chunk, destination port and address are checked in the kernel.
	FilterExact
	// FilterPorts: the destination address is left to user space.
	FilterPorts
	// FilterProtocol: every TCP SYN, SCTP INIT and UDP datagram of a watched protocol reaches user space.
	FilterProtocol
)

// String returns a label value: "none", "exact", "ports", "protocol".
func (l FilterLevel) String() string {
	switch l {
	case FilterNone:
		return "none"
	case FilterExact:
		return "exact"
	case FilterPorts:
		return "ports"
	case FilterProtocol:
		return "protocol"
	}
	return fmt.Sprintf("FilterLevel(%d)", int(l))
}

// Snapshot is what the meter has counted since it started (Since), copied: the caller owns it.
type Snapshot struct {
	Status Status
	// Err says why, when Status is not StatusOK.
	Err error
	// Since is when the meter started counting; Taken is when this copy was made.
	Since, Taken time.Time
	// Families has one entry per IP family, IPv4 first.
	Families []FamilyStats
	// Dests, Idle and HealthChecks follow the current Watch, each sorted by protocol, address, port. Dests are
	// the destinations that counted something (an arrival, or a run restored from an earlier meter), Idle the
	// others, which have nothing but the time they were first watched: at 10,000 Services most destinations
	// never see an arrival, and a whole DestCount for each was the meter's largest part of the exporter's heap.
	// Dest looks in both.
	Dests        []DestCount
	Idle         []IdleDest
	HealthChecks []HealthCheckCount
}

// IdleDest is a watched destination that has counted nothing: its DestCount is zero but for WatchedSince.
type IdleDest struct {
	Dest
	WatchedSince time.Time
}

// FamilyStats is the meter's own accounting for one IP family. Counters only grow.
type FamilyStats struct {
	Family string // "IPv4" or "IPv6" (corev1.IPFamily)
	Filter FilterLevel
	// Received counts packets the kernel filter passed, Dropped those of them the kernel could not store
	// because the ring was full (PACKET_STATISTICS tp_drops): arrivals that were not counted. A growing
	// Dropped means the meter is overloaded and every count of this family is a lower bound.
	Received, Dropped uint64
	// Shed counts packets the meter gave back to the kernel uncounted to stay within Config.MaxPacketRate:
	// like Dropped, arrivals that were not counted.
	Shed uint64
	// Sampling is how many source addresses the kernel filter's sample stands for each one it holds, whose
	// packets it passes in full: 1, or a power of two while a flood lasts (sample.go). Sampled estimates the
	// matched packets it left out so far (each counted one standing for Sampling): like Shed, arrivals that
	// were not counted.
	Sampling uint32
	Sampled  uint64
	// Internal counts packets to a watched destination from a Watch.Internal source or received on a
	// Watch.InternalLinks interface, not counted as arrivals.
	Internal uint64
	// Unmatched counts packets that passed the filter but matched no destination: a coarse filter level, or
	// packets in flight across a Watch change.
	Unmatched uint64
}

// DestCount is one destination's arrivals.
type DestCount struct {
	Dest
	// Attempts counts new connection attempts (TCP SYN, SCTP INIT) or UDP datagrams from external sources
	// since the destination was first watched (WatchedSince).
	Attempts uint64
	// FirstSeen and LastSeen are the kernel's receive times of the first and the latest attempt; zero when
	// none arrived.
	FirstSeen, LastSeen time.Time
	// ActiveSince is the first attempt after the latest gap of at least Config.QuietPeriod without one: how
	// long attempts have kept arriving. Zero when none arrived.
	ActiveSince  time.Time
	WatchedSince time.Time
	// Checkers are the sources that arrive at this NodePort at a steady cadence (sources.go: five new
	// attempts like a clock), by address; nil when none does, and at other destinations.
	Checkers []CheckerSource
	// SetAside: some arrivals came from Checkers or from sources still proving their cadence, and Clients
	// counts the others. False (the zero value): every arrival is a client's, and Clients equals the whole.
	SetAside bool
	Clients  ClientCount
	// Repeated is the part of Attempts whose source came again within a few seconds (sources.go): a client
	// whose dropped SYN the kernel retransmits, or that tries again; never a port scan's single SYN or a
	// datagram from a source not seen again. Clients.Repeated is its part of the clients'. With
	// Config.CheckerSources negative nothing tells a repeat, and both equal the whole.
	Repeated RepeatCount
	// Retransmits is the part of Attempts the meter recognised as the retransmission of an attempt it had
	// counted: a TCP SYN or SCTP INIT from the source address and port of one of that source's latest eight,
	// among the sources it follows (Config.CheckerSources of them; none with it negative). Attempts less
	// Retransmits are the distinct connection attempts, an upper bound where more sources arrive at once than
	// it follows, or one source opens more than eight connections within a retransmission's delay.
	Retransmits uint64
	// Restored is how many of Attempts an earlier meter counted (Meter.Restore): 0 unless the destination's run
	// was carried over an exporter restart.
	Restored uint64
	// LastAttempt is the latest arrival that was no recognised retransmission (zero before any): where a drop
	// loses attempts, their retransmissions arrive a second later, and the loss ended at the attempt.
	LastAttempt time.Time
	// LastNewFlow (UDP) is the latest datagram that started a flow: a source address and port not seen at this
	// destination within Config.QuietPeriod (flows.go). Zero for other protocols and before any datagram.
	LastNewFlow time.Time
	// Owner is whose traffic these counts are (Watch.Owners): the state file keeps it beside the run, so a
	// restarted meter does not hand it to another Service that got the destination meanwhile.
	Owner string
}

// HealthCheckCount is one health check node port's probes.
type HealthCheckCount struct {
	Dest
	// Probes counts SYNs from external sources since WatchedSince.
	Probes                    uint64
	FirstSeen, LastSeen       time.Time
	ActiveSince, WatchedSince time.Time
	// Sources are the most recently seen prober addresses, at most Config.MaxSources, latest first.
	Sources []SourceCount
	// SourcesEvicted counts sources forgotten to keep Sources bounded: more probers than MaxSources.
	SourcesEvicted uint64
	// Checkers are the probers that proved a cadence (sources.go's rule, as at a NodePort), by the order they
	// were first seen, of the first few probers followed; nil while none has, and with
	// Config.CheckerSources negative.
	Checkers []CheckerSource
}

// SourceCount is one prober.
type SourceCount struct {
	Addr     netip.Addr
	Probes   uint64
	LastSeen time.Time
}

// Dest returns the count of d (normalised as Watch does), if d is watched.
func (s Snapshot) Dest(d Dest) (DestCount, bool) {
	d.Addr = d.Addr.Unmap().WithZone("")
	if i, ok := slices.BinarySearchFunc(s.Dests, d, func(c DestCount, d Dest) int { return compareDest(c.Dest, d) }); ok {
		return s.Dests[i], true
	}
	if i, ok := slices.BinarySearchFunc(s.Idle, d, func(c IdleDest, d Dest) int { return compareDest(c.Dest, d) }); ok {
		return DestCount{Dest: s.Idle[i].Dest, WatchedSince: s.Idle[i].WatchedSince}, true
	}
	return DestCount{}, false
}

// HealthCheck returns the probes of health check d, if it is watched.
func (s Snapshot) HealthCheck(d Dest) (HealthCheckCount, bool) {
	d.Addr = d.Addr.Unmap().WithZone("")
	i, ok := slices.BinarySearchFunc(s.HealthChecks, d, func(c HealthCheckCount, d Dest) int { return compareDest(c.Dest, d) })
	if !ok {
		return HealthCheckCount{}, false
	}
	return s.HealthChecks[i], true
}

// Config tunes a Meter. The zero value is the default.
type Config struct {
	// BlockSize and Blocks size each family's TPACKET_V3 ring: Blocks × BlockSize bytes of kernel memory mapped
	// into the process (and resident) once the family is first watched. A matched IPv4 SYN takes about 160
	// bytes, so the default 8 × 128 KiB holds about 6,500 packets: 65 ms of a 100,000 SYN/s flood before the
	// kernel drops (and counts) what does not fit.
	BlockSize, Blocks int
	// BlockTimeout is how long the kernel keeps a partly filled block before handing it over: the most a
	// Snapshot lags the wire. Default 200 ms.
	BlockTimeout time.Duration
	// MaxPacketRate bounds the packets per second the meter counts, per family, so a flood cannot take more
	// than a share of a core: a ring block that would exceed it is given back uncounted (FamilyStats.Shed).
	// Default DefaultMaxPacketRate: about a tenth of a core at the reader's cost per packet measured in
	// docs/performance.md (about 1 µs). Evidence of arrivals needs far fewer.
	MaxPacketRate int
	// QuietPeriod is the gap without arrivals that ends a run of arrivals (DestCount.ActiveSince). Default 2 min.
	QuietPeriod time.Duration
	// MaxSources bounds the probers remembered per health check. Default 16.
	MaxSources int
	// CheckerSources bounds the sources remembered per destination to tell repeated arrivals from a port scan's
	// and, at NodePorts, to recognise health checkers (sources.go), at most 64. Default 16; negative: none is
	// remembered, every arrival is a client's and counts as repeated.
	CheckerSources int
	Logger         *slog.Logger
	// noBands: recognise checkers on their clocks alone, not by a band of gaps (a checker with a spread), as
	// the meter did before. Tests compare against it: past its candidate window, a client must count whenever
	// it does without bands.
	noBands bool
}

func (c Config) withDefaults() Config {
	if c.BlockSize <= 0 {
		c.BlockSize = 128 << 10
	}
	if c.Blocks <= 0 {
		c.Blocks = 8
	}
	if c.BlockTimeout <= 0 {
		c.BlockTimeout = 200 * time.Millisecond
	}
	if c.MaxPacketRate <= 0 {
		c.MaxPacketRate = DefaultMaxPacketRate
	}
	if c.QuietPeriod <= 0 {
		c.QuietPeriod = DefaultQuietPeriod
	}
	if c.MaxSources <= 0 {
		c.MaxSources = 16
	}
	switch {
	case c.CheckerSources == 0:
		c.CheckerSources = 16
	case c.CheckerSources > maxCheckerSources:
		c.CheckerSources = maxCheckerSources
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
