package rules

import (
	"strings"
	"time"
)

// NewSnapshot builds a Snapshot from known port states: for callers that test against a Reader without
// running one (the exporter's own scrape tests), and for other readers of the same rules.
func NewSnapshot(mode Mode, backend string, families []string, readAt time.Time, ports map[ServicePort]PortState) *Snapshot {
	s := &Snapshot{Mode: mode, Backend: backend, Families: families, ReadAt: readAt, ports: map[portKey]*PortState{}}
	for sp, st := range ports {
		st := st
		s.ports[hashKey(sp.String(), strings.ToLower(sp.Protocol))] = &st
	}
	return s
}
