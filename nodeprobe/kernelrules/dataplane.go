package kernelrules

import (
	"context"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// Info implements dataplane.Rules: a snapshot of IPVS mode is that dataplane's, any other kube-proxy's.
func (s *Snapshot) Info() dataplane.Info {
	kind := dataplane.KindKubeProxy
	if s.Mode == ModeIPVS {
		kind = dataplane.KindIPVS
	}
	return dataplane.Info{Kind: kind, Mode: string(s.Mode), Backend: string(s.Backend), Families: s.Families,
		ReadAt: s.ReadAt, Duration: s.Duration, Watch: s.Watch, Resyncs: s.Resyncs, Counted: s.counted}
}

// Dataplane is kube-proxy's rules (iptables, either backend, or nftables; IPVS said with ErrUnsupported) as
// the node model reads any dataplane: Read gives a dataplane.Rules, Watch tells of changes. Behind it the
// selector (select.go) picks, per read, the reader of the mode kube-proxy runs in — iptables legacy, iptables
// nft or nftables, each its own reader value — from what the node shows (ModeAuto) or the mode set.
type Dataplane struct{ r *selector }

// NewDataplane returns the Dataplane reading with opts (see NewReader). It does no I/O until the first Read.
func NewDataplane(opts Options) *Dataplane {
	return &Dataplane{r: NewReader(opts).(*selector)}
}

// Read reads the rules (Reader.Read); the Rules are nil when no snapshot was read.
func (d *Dataplane) Read(ctx context.Context) (dataplane.Rules, error) {
	snap, err := d.r.Read(ctx)
	if snap == nil {
		// Not a nil *Snapshot in a non-nil interface: callers test the Rules against nil.
		return nil, err
	}
	return snap, err
}

// Watch runs until ctx ends, calling changed whenever a Read may give something the last did not (see the
// reader's Watch).
func (d *Dataplane) Watch(ctx context.Context, changed func(content bool)) { d.r.Watch(ctx, changed) }

// A Snapshot is what the seam calls one read of a dataplane.
var _ dataplane.Rules = (*Snapshot)(nil)
