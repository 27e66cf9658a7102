package kernelrules

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// peakHeap runs fn while sampling the heap's object bytes (live and not yet
// swept) every 50 µs, and returns the most seen above the level before fn.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	const name = "/memory/classes/heap/objects:bytes"
	read := func(s []metrics.Sample) uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	base := read([]metrics.Sample{{Name: name}})
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() {
		s := []metrics.Sample{{Name: name}}
		var most uint64
		for {
			most = max(most, read(s))
			select {
			case <-stop:
				peak <- max(most, read(s))
				return
			default:
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	fn()
	close(stop)
	return max(<-peak, base) - base
}

// onlyRun hides every optional interface of a Runner (Streamer, FileReader, ChangeSignals).
type onlyRun struct{ r Runner }

func (o onlyRun) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return o.r.Run(ctx, name, args...)
}

// BenchmarkMemory loads the 10,000-Service ruleset (nat about 95,000 rules)
// into a legacy namespace (root) and measures, per operation, the peak heap
// (peak-MiB: sampled, above the heap before it; B/op: -benchmem's total
// allocated) of: one nat read (nat-read: the streamed save and its parse — what
// a full read, a changed nat and the LegacyVerify re-read cost), the same
// with the whole output buffered first as before (nat-read-buffered), and the
// old LegacyVerify digest that copied the whole table out of the kernel
// (whole-table-digest, kept here only as the figure to beat); and in nftables
// mode one listing of the same Services' table, streamed (nft-list) and
// buffered first (nft-list-buffered), and what it leaves kept (nft-kept: the
// states, and the model a read in part updates).
func BenchmarkMemory(b *testing.B) {
	requireRoot(b)
	ns := newNetns(b)
	nsRun(b, ns, []byte(bigIPTables()), xtablesCmd(false, BackendLegacy, "restore"), "-c")
	nsRun(b, ns, []byte(kubeletMangle), xtablesCmd(false, BackendLegacy, "restore"), "--noflush")
	runner := NetnsRunner{Namespace: ns}
	ctx := context.Background()
	r := NewReader(Options{Mode: ModeIPTables, Runner: runner, CacheTTL: -1}).(*selector)
	if _, err := r.Read(ctx); err != nil {
		b.Fatal(err)
	}
	// buffered: the nat read before it streamed (the whole save output, then the parse).
	buffered := NewReader(Options{Mode: ModeIPTables, Runner: onlyRun{runner}, CacheTTL: -1}).(*selector)
	bin := saveCommand(ipFamilies[0], BackendLegacy)
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"whole-table-digest", func() error { _, err := runner.wholeTableDigest(ctx, false, "nat"); return err }},
		{"nat-read", func() error { _, err := r.saveTable(ctx, ipFamilies[0], bin, "nat"); return err }},
		{"nat-read-buffered", func() error { _, err := buffered.saveTable(ctx, ipFamilies[0], bin, "nat"); return err }},
	} {
		b.Run(c.name, func(b *testing.B) { benchPeak(b, c.op) })
	}
	// nftables mode: the same Services as kube-proxy's nftables table.
	nftNS := newNetns(b)
	svcs := bigCluster(false)
	for i := range svcs {
		if svcs[i].nodePort != 0 {
			svcs[i].nodePort = 20000 + i // a map key each (the iptables layout shares some)
		}
	}
	nsRun(b, nftNS, []byte(genNFT(false, svcs)), "nft", "-f", "-")
	nftRunner := NetnsRunner{Namespace: nftNS}
	nr := NewReader(Options{Mode: ModeNFTables, Runner: nftRunner, CacheTTL: -1}).(*selector)
	nrBuffered := NewReader(Options{Mode: ModeNFTables, Runner: onlyRun{nftRunner}, CacheTTL: -1}).(*selector)
	for _, c := range []struct {
		name string
		r    *selector
	}{{"nft-list", nr}, {"nft-list-buffered", nrBuffered}} {
		b.Run(c.name, func(b *testing.B) {
			benchPeak(b, func() error {
				t, err := c.r.listNFTTable(ctx, "nft", "ip")
				if err == nil && len(t.nft.ports) < 10000 {
					b.Fatalf("%d ports", len(t.nft.ports))
				}
				return err
			})
		})
	}
	// What a listing leaves kept: the states, and the model a read in part
	// updates (nftmodel.go), each after a GC.
	b.Run("nft-kept", func(b *testing.B) {
		heap := func() int64 {
			runtime.GC()
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return int64(m.HeapAlloc)
		}
		var states, model int64
		for b.Loop() {
			h0 := heap()
			t, err := nr.listNFTTable(ctx, "nft", "ip")
			if err != nil {
				b.Fatal(err)
			}
			h1 := heap()
			t.nft.model = nil
			h2 := heap()
			runtime.KeepAlive(t)
			states, model = max(states, h2-h0), max(model, h1-h2)
		}
		b.ReportMetric(float64(states)/(1<<20), "states-MiB")
		b.ReportMetric(float64(model)/(1<<20), "model-MiB")
	})
}

// benchPeak runs op per iteration and reports the highest peak heap seen.
func benchPeak(b *testing.B, op func() error) {
	b.ReportAllocs()
	var most uint64
	for b.Loop() {
		var err error
		most = max(most, peakHeap(func() { err = op() }))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(most)/(1<<20), "peak-MiB")
}

// wholeTableDigest runs the old digest inside the namespace.
func (n NetnsRunner) wholeTableDigest(ctx context.Context, ipv6 bool, table string) (uint64, error) {
	var d uint64
	err := inNetns(n.Namespace, func() error {
		var err error
		d, err = wholeTableDigest(ctx, ipv6, table)
		return err
	})
	return d, err
}

// wholeTableDigest is the legacy digest the reader used before it streamed:
// it reads one legacy table's blob as iptables-legacy-save does (GET_INFO for
// the size, GET_ENTRIES for all entries at once: the kernel gives the whole
// table or nothing) and hashes it with the counters zeroed. Kept only for
// BenchmarkMemory's before/after figure.
func wholeTableDigest(ctx context.Context, ipv6 bool, table string) (uint64, error) {
	var sum uint64
	fd, level, err := legacySocket(ipv6, table)
	layout := ipv4Entry
	if ipv6 {
		layout = ipv6Entry
	}
	if err != nil {
		return sum, err
	}
	defer unix.Close(fd)
	// The table can be replaced between the two calls (GET_ENTRIES then fails
	// with EAGAIN for a size that no longer matches): ask again a few times.
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		info := make([]byte, xtGetInfoLen)
		copy(info, table)
		if err := getsockopt(fd, level, xtSoGetInfo, info); err != nil {
			return sum, fmt.Errorf("legacy table %s info: %w", table, err)
		}
		size := binary.NativeEndian.Uint32(info[xtGetInfoLen-4:])
		entries := make([]byte, xtGetEntriesHdr+int(size))
		copy(entries, table)
		binary.NativeEndian.PutUint32(entries[xtTableMaxName:], size)
		err := getsockopt(fd, level, xtSoGetEntries, entries)
		if errors.Is(err, unix.EAGAIN) && attempt < 5 {
			continue
		}
		if err != nil {
			return sum, fmt.Errorf("legacy table %s entries: %w", table, err)
		}
		blob := entries[xtGetEntriesHdr:]
		for off := 0; off < len(blob); {
			if off+layout.counters+16 > len(blob) {
				return sum, fmt.Errorf("legacy table %s: entry at %d past the table's end", table, off)
			}
			next := int(binary.NativeEndian.Uint16(blob[off+layout.nextOffset:]))
			if next < layout.counters+16 || off+next > len(blob) {
				return sum, fmt.Errorf("legacy table %s: bad entry size %d at %d", table, next, off)
			}
			clear(blob[off+layout.counters : off+layout.counters+16])
			off += next
		}
		// maphash, not a cryptographic hash: the table is tens of MiB and
		// hashed every read; nobody chooses rules to collide with our seed.
		var h maphash.Hash
		h.SetSeed(digestSeed)
		h.Write(info[xtTableMaxName:]) // hooks, underflows, entry count, size
		h.Write(blob)
		return h.Sum64(), nil
	}
}

// The old digest's kernel layouts (linux/netfilter_ipv4/ip_tables.h, netfilter_ipv6/ip6_tables.h; the
// same numbers for both families): only this "before" measurement still copies the entry table.
const (
	xtSoGetEntries = 65
	// struct ipt_get_entries: name[32], size, then the 8-aligned entry table.
	xtGetEntriesHdr = 40
)

// entryLayout: where next_offset and the counters sit in struct ipt_entry /
// ip6t_entry (after struct ipt_ip / ip6t_ip6, nfcache and target_offset).
type entryLayout struct{ nextOffset, counters int }

var (
	ipv4Entry = entryLayout{nextOffset: 90, counters: 96}   // sizeof(ipt_entry) 112
	ipv6Entry = entryLayout{nextOffset: 142, counters: 152} // sizeof(ip6t_entry) 168
)
