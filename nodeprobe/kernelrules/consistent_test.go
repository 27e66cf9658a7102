package kernelrules

import (
	"context"
	"strings"
	"testing"
	"time"
)

// syncingRunner is a fake node on which kube-proxy syncs at the worst moment:
// the first time filter is saved after arm, the IPv4 tables are replaced by
// after's and the generation moves, as if one iptables-nft-restore committed
// between the reader's nat (kept) and its filter (or, with filterFirst, as a
// legacy restore does it: filter first, nat later).
type syncingRunner struct {
	*signalRunner
	armed bool
	// filterFirst: the new filter is there at once, the new nat and its
	// signal 300 ms later (a legacy restore commits filter, then nat).
	filterFirst bool
	afterNAT    string
	afterFilt   string
	natKey      string
	filterKey   string
	filterRuns  int
}

func (s *syncingRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	key := strings.Join(append([]string{name}, args...), " ")
	if key == s.filterKey {
		s.mu.Lock()
		s.filterRuns++
		if s.armed {
			s.armed = false
			if !s.filterFirst {
				s.out[s.natKey], s.out[s.filterKey] = s.afterNAT, s.afterFilt
				s.gen++
			} else {
				// filter now; nat's commit (and its signal) 300 ms later.
				s.out[s.filterKey] = s.afterFilt
				time.AfterFunc(300*time.Millisecond, func() {
					s.mu.Lock()
					defer s.mu.Unlock()
					s.out[s.natKey] = s.afterNAT
					s.gen++
				})
			}
		}
		s.mu.Unlock()
	}
	return s.signalRunner.Run(ctx, name, args...)
}

func splitSave(t *testing.T, save string) (nat, filter string) {
	t.Helper()
	i := strings.Index(save, "*nat")
	if i < 0 {
		t.Fatal("no *nat in the generated save")
	}
	return save[i:], save[:i]
}

// TestReadConsistentAcrossSync: a read that keeps nat (same generation) while
// kube-proxy replaces both tables before filter is saved must not return the
// old nat's local endpoints beside the new filter's drop: the moved generation
// makes the reader read the family again, and the snapshot is the new one.
func TestReadConsistentAcrossSync(t *testing.T) {
	for _, filterFirst := range []bool{false, true} {
		name := "generation moved"
		if filterFirst {
			name = "signal held, tables disagree"
		}
		t.Run(name, func(t *testing.T) { testReadAcrossSync(t, filterFirst) })
	}
}

func testReadAcrossSync(t *testing.T, filterFirst bool) {
	before := scenario(false)
	after := scenario(false)
	web := after[1]
	if !web.etpLocal {
		t.Fatal("scenario changed: web is not externalTrafficPolicy Local")
	}
	eps := make([]genEndpoint, len(web.eps))
	for i, ep := range web.eps {
		ep.local = false
		eps[i] = ep
	}
	web.eps = eps
	after[1] = web

	f := &syncingRunner{signalRunner: &signalRunner{fakeRunner: iptablesNode(t, BackendNFT)}, filterFirst: filterFirst}
	f.natKey, f.filterKey = "iptables-nft-save -c -t nat", "iptables-nft-save -c -t filter"
	f.out[f.natKey], f.out[f.filterKey] = splitSave(t, genRules(layout125, false, before))
	f.afterNAT, f.afterFilt = splitSave(t, genRules(layout125, false, after))
	r := NewReader(Options{Mode: ModeIPTables, Runner: f, LookPath: anyPath, CacheTTL: -1})
	ctx := context.Background()
	snap, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.Family(web.servicePort(), FamilyIPv4)
	if st.LocalEndpoints == 0 || st.Drop {
		t.Fatalf("before the sync: web %+v, want local endpoints and no drop", st)
	}
	f.mu.Lock()
	f.armed = true
	f.mu.Unlock()
	snap, err = r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st = snap.Family(web.servicePort(), FamilyIPv4)
	if st.LocalEndpoints != 0 || !st.Drop {
		t.Errorf("read across a sync: web %+v, want 0 local endpoints and the drop (both tables of the new sync)", st)
	}
	if n := f.count(f.natKey); n != 2 {
		t.Errorf("nat saved %d times, want 2 (the first read, then again after the sync was seen)", n)
	}
	// The next read: nothing moved, nat kept again.
	if _, err := r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.count(f.natKey); n != 2 {
		t.Errorf("nothing changed since: nat saved %d times, want 2", n)
	}
}
