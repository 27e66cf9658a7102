package kernelrules

import (
	"slices"
	"strings"
	"time"
)

// NewSnapshot builds a Snapshot from known port states. A Snapshot keeps its states unexported (they are
// indexed by kube-proxy's chain hash), so this is the only way a Reader implemented outside this package
// returns one: a reader of another rule source, or the fakes the exporter's scrape tests read. All states
// belong to the first of families (FamilyIPv4 when families is empty); the other families are read but
// hold no rule. States are taken as given (Drop and DropPackets are not derived from Drops).
func NewSnapshot(mode Mode, backend Backend, families []string, readAt time.Time, ports map[ServicePort]PortState) *Snapshot {
	first := FamilyIPv4
	if len(families) > 0 {
		first = families[0]
	}
	byFamily := map[string]map[ServicePort]PortState{first: ports}
	for _, f := range families {
		if _, ok := byFamily[f]; !ok {
			byFamily[f] = nil
		}
	}
	s := NewFamilySnapshot(mode, backend, readAt, byFamily)
	if len(families) > 0 {
		// Keep the caller's order.
		s.Families = slices.Clone(families)
		order := map[string]int{}
		for i, f := range families {
			order[f] = i
		}
		slices.SortStableFunc(s.fams, func(a, b familyPorts) int { return order[a.name] - order[b.name] })
	}
	return s
}

// NewFamilySnapshot builds a Snapshot from known per-family port states (keys FamilyIPv4, FamilyIPv6; a
// family present with a nil map was read and holds no rule). States are taken as given, with Drops
// and Endpoints copied and sorted as a read would sort them.
func NewFamilySnapshot(mode Mode, backend Backend, readAt time.Time, families map[string]map[ServicePort]PortState) *Snapshot {
	s := &Snapshot{Mode: mode, Backend: backend, ReadAt: readAt}
	names := make([]string, 0, len(families))
	for f := range families {
		names = append(names, f)
	}
	// IPv4 before IPv6, as a read lists them; anything else after, by name.
	slices.SortFunc(names, func(a, b string) int {
		rank := func(f string) int {
			switch f {
			case FamilyIPv4:
				return 0
			case FamilyIPv6:
				return 1
			}
			return 2
		}
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	for _, f := range names {
		m := map[portKey]*PortState{}
		for sp, st := range families[f] {
			st := st
			st.Drops = slices.Clone(st.Drops)
			sortDrops(st.Drops)
			st.Endpoints = slices.Clone(st.Endpoints)
			slices.SortFunc(st.Endpoints, compareEndpoints)
			m[hashKey(sp.String(), strings.ToLower(sp.Protocol))] = &st
		}
		s.addSorted(f, m)
	}
	return s
}
