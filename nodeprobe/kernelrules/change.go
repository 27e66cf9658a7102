package kernelrules

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ChangeSignals is optionally implemented by a Runner that can tell, in the
// network namespace its commands run in, whether kube-proxy's big tables changed
// without saving them. ExecRunner (this process's namespace: the host's, where
// kube-proxy writes) and NetnsRunner implement it. Without it every read saves
// every table.
type ChangeSignals interface {
	// NFTablesGeneration returns the nf_tables ruleset generation
	// (NFT_MSG_GETGEN over netlink). Every committed nf_tables transaction —
	// iptables-nft(-restore), nft -f, kube-proxy's nftables syncs — moves it;
	// packet counters do not.
	NFTablesGeneration(ctx context.Context) (uint32, error)
	// LegacyTableInfo returns a hash of one legacy table's IPT_SO_GET_INFO
	// answer (hook entry points, underflows, entry count, blob size): a
	// microsecond-cheap signal that catches every change of the entry count or
	// size, not one that keeps both (see Options.LegacyVerify). The table must
	// exist (/proc/net/ip{,6}_tables_names): asking for a missing one makes the
	// kernel create it.
	LegacyTableInfo(ctx context.Context, ipv6 bool, table string) (uint64, error)
	// NFTablesChainRules returns the rules of one iptables-nft chain (table
	// ip/ip6 <table>), in the chain's order — each one's content key and
	// packet counter — and the generation they belong to (read before and
	// after the dump: an error if it moved in between).
	NFTablesChainRules(ctx context.Context, ipv6 bool, table, chain string) (gen uint32, rules []ChainRule, err error)
}

// NFTablesGeneration implements ChangeSignals in this process's namespace.
func (ExecRunner) NFTablesGeneration(ctx context.Context) (uint32, error) {
	return nftGeneration(ctx, "")
}

// NFTablesGeneration implements ChangeSignals inside the namespace.
func (n NetnsRunner) NFTablesGeneration(ctx context.Context) (uint32, error) {
	return nftGeneration(ctx, n.Namespace)
}

// LegacyTableInfo implements ChangeSignals in this process's namespace.
func (ExecRunner) LegacyTableInfo(ctx context.Context, ipv6 bool, table string) (uint64, error) {
	return legacyInfo(ctx, ipv6, table)
}

// LegacyTableInfo implements ChangeSignals inside the namespace.
func (n NetnsRunner) LegacyTableInfo(ctx context.Context, ipv6 bool, table string) (uint64, error) {
	var h uint64
	err := inNetns(n.Namespace, func() error {
		var err error
		h, err = legacyInfo(ctx, ipv6, table)
		return err
	})
	return h, err
}

// NFTablesChainRules implements ChangeSignals in this process's namespace.
func (ExecRunner) NFTablesChainRules(ctx context.Context, ipv6 bool, table, chain string) (uint32, []ChainRule, error) {
	return nftChainRules(ctx, "", ipv6, table, chain)
}

// NFTablesChainRules implements ChangeSignals inside the namespace.
func (n NetnsRunner) NFTablesChainRules(ctx context.Context, ipv6 bool, table, chain string) (uint32, []ChainRule, error) {
	return nftChainRules(ctx, n.Namespace, ipv6, table, chain)
}

// inNetns runs fn on an OS thread switched into the named namespace
// (/run/netns/<name>, as `ip netns` keeps them): the legacy tables' raw socket is
// created there (netlink connections are created there by the library). The
// thread is switched back afterwards; if that fails it is not unlocked, so the
// runtime discards it instead of running other goroutines in the wrong namespace.
func inNetns(name string, fn func() error) error {
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("own network namespace: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leaving network namespace %s: %w", name, err))
			return // thread stays locked: it dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Legacy xtables socket options and layouts (linux/netfilter_ipv4/ip_tables.h,
// netfilter_ipv6/ip6_tables.h; the same numbers for both families).
const (
	xtSoGetInfo    = 64
	xtTableMaxName = 32
	// struct ipt_getinfo: name[32], valid_hooks, hook_entry[5], underflow[5],
	// num_entries, size.
	xtGetInfoLen = xtTableMaxName + 4 + 5*4 + 5*4 + 4 + 4
)

// digestSeed is fixed for the process, so GET_INFO hashes of one table compare equal
// between reads; it is never written after start.
var digestSeed = maphash.MakeSeed()

// legacySocket opens the raw socket the xtables socket options are asked on,
// in the calling thread's namespace.
func legacySocket(ipv6 bool, table string) (fd, level int, err error) {
	if len(table) >= xtTableMaxName {
		return -1, 0, fmt.Errorf("table name %q too long", table)
	}
	domain, level := unix.AF_INET, unix.IPPROTO_IP
	if ipv6 {
		domain, level = unix.AF_INET6, unix.IPPROTO_IPV6
	}
	fd, err = unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return -1, 0, fmt.Errorf("raw socket for legacy table %s: %w", table, err)
	}
	return fd, level, nil
}

// legacyInfo hashes a legacy table's GET_INFO answer.
func legacyInfo(_ context.Context, ipv6 bool, table string) (uint64, error) {
	fd, level, err := legacySocket(ipv6, table)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	info := make([]byte, xtGetInfoLen)
	copy(info, table)
	if err := getsockopt(fd, level, xtSoGetInfo, info); err != nil {
		return 0, fmt.Errorf("legacy table %s info: %w", table, err)
	}
	return maphash.Bytes(digestSeed, info[xtTableMaxName:]), nil
}

func getsockopt(fd, level, opt int, buf []byte) error {
	l := uint32(len(buf))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// tableCache keeps the parsed tables a change signal vouches for, so a read
// re-saves them only when the signal moved. It belongs to the read in flight.
type tableCache struct {
	mode    Mode
	backend Backend
	byKey   map[string]cachedTable // "<family>/<table>"
	// loggedNoSignal: "cannot read the change signal" was logged once.
	loggedNoSignal bool
	// lossesSeen: the reader's lossEvents when a read last looked (a loss
	// since forces a full re-read, counted once in resyncs).
	lossesSeen uint64
}

type cachedTable struct {
	// sig is the change signal read before the table was saved.
	sig changeSig
	// savedAt is when it was saved, for Options.FullVerify.
	savedAt time.Time
	ipt     *iptablesResult // iptables mode: one table (nat, or filter with the nft backend)
	nft     *nftResult      // nftables mode; nil with absent
	// absent: the nftables family table did not exist.
	absent bool
	// Legacy nat: when it was last saved, for Options.LegacyVerify.
	verified time.Time
	// keys: nft backend filter, the content keys of the counter chains' rules
	// (by their index in the save), learned from a dump (counterkeys.go); nil
	// until learned.
	keys *counterKeys
}

// counterKeys are the kept filter's counter chains' keys.
type counterKeys struct{ ext, fw *keyIndex }

// changeSig is one reading of a change signal: the nf_tables generation, or a
// legacy table's GET_INFO hash.
type changeSig struct {
	gen  uint32
	info uint64 // legacy: hash of GET_INFO
}

// signals reads the change signals of one Read: the nf_tables generation once,
// legacy GET_INFO per table; and, while Watch runs, what the change
// notifications vouch for at that generation.
type signals struct {
	cs      ChangeSignals // nil: none
	legacy  bool          // iptables legacy backend: GET_INFO; else the generation
	gen     uint32
	genErr  error
	genRead bool
	// w is the running watcher (nil: none), scope what this read's parse
	// depends on; view is w's view at gen, nil when it cannot vouch for it.
	w        *nftWatch
	scope    watchScope
	view     *watchView
	notified bool // some view vouched during this read
}

// newSignals starts a read of the given scope: the watcher, when Watch runs,
// is told the scope (what it judges transactions by), and a loss of
// notifications since the last read is counted as a forced re-read.
func (r *node) newSignals(scope watchScope) *signals {
	r.scope.Store(&scope)
	s := &signals{cs: r.changeSignals(), legacy: scope.mode == ModeIPTables && scope.backend == BackendLegacy, scope: scope}
	if w := r.currentWatch(); w != nil {
		w.setScope(scope)
		if scope.covered() {
			s.w = w
		}
	}
	if le := r.lossEvents.Load(); le != r.tables.lossesSeen {
		r.tables.lossesSeen = le
		if len(r.tables.byKey) > 0 {
			r.resyncs.Add(1)
		}
	}
	return s
}

// state is what vouched for this read's kept tables (Snapshot.Watch).
func (s *signals) state() WatchState {
	switch {
	case s.cs == nil:
		return WatchNone
	case s.notified:
		return WatchNotified
	}
	return WatchPolled
}

// forget drops the generation read so far: the next get reads it again.
func (s *signals) forget() { s.genRead = false }

// get returns the table's signal; ok false when it cannot be read (then the
// table is read every time). With a watcher, reading the generation waits for
// the watcher to have accounted for it (s.view).
func (s *signals) get(ctx context.Context, ipv6 bool, table string) (changeSig, error) {
	if s.cs == nil {
		return changeSig{}, errors.New("the runner offers no change signal")
	}
	if s.legacy {
		h, err := s.cs.LegacyTableInfo(ctx, ipv6, table)
		return changeSig{info: h}, err
	}
	if !s.genRead {
		s.gen, s.genErr = s.cs.NFTablesGeneration(ctx)
		s.genRead = true
		s.view = nil
		if s.genErr == nil && s.w != nil {
			s.view = s.w.await(ctx, s.gen, s.scope)
			s.notified = s.notified || s.view != nil
		}
	}
	return changeSig{gen: s.gen}, s.genErr
}

// vouch says why a kept table may be used.
type vouch int

const (
	vouchNone     vouch = iota
	vouchSignal         // its change signal has not moved since it was saved: exact
	vouchNotified       // no relevant change was notified since it was saved
)

// cached returns the kept entry for key and what vouches for it: its change
// signal unchanged since the save (sig, read before this read's save, equals
// the one read before the kept save), or — with the nf_tables generation
// moved — the watcher's view: no relevant change in family fi after the
// generation the kept save started at. verify is true when notifications
// alone vouch but the table was saved FullVerify ago or more: it is to be
// saved again and compared (c is then the kept entry, not to be used). An
// unreadable signal is never taken for "unchanged": it is logged once and
// everything is read.
func (r *node) cached(key string, fi int, sig changeSig, sigErr error, view *watchView) (c cachedTable, v vouch, verify bool) {
	if sigErr != nil {
		if !r.tables.loggedNoSignal {
			r.tables.loggedNoSignal = true
			r.opts.Logger.Info("cannot read the ruleset change signal; every read saves every table", "table", key, "err", sigErr)
		}
		return cachedTable{}, vouchNone, false
	}
	c, ok := r.tables.byKey[key]
	switch {
	case !ok:
		return cachedTable{}, vouchNone, false
	case c.sig == sig:
		return c, vouchSignal, false
	case c.sig.info == 0 && sig.info == 0 && view.unchangedSince(fi, c.sig.gen):
		if r.verifyDue(c) {
			return c, vouchNone, true
		}
		return c, vouchNotified, false
	}
	return cachedTable{}, vouchNone, false
}

// verifyDue: notifications alone have vouched for c since it was saved
// FullVerify ago or more; it is to be saved again and compared.
func (r *node) verifyDue(c cachedTable) bool {
	return r.opts.FullVerify > 0 && r.opts.Now().Sub(c.savedAt) >= r.opts.FullVerify
}

// keep remembers a freshly read table under the signal read before it was
// saved: a change during the save moves the signal (and is notified after
// it), so the next read saves again.
func (r *node) keep(key string, sig changeSig, sigErr error, c cachedTable) {
	if sigErr != nil {
		delete(r.tables.byKey, key)
		return
	}
	if r.tables.byKey == nil {
		r.tables.byKey = map[string]cachedTable{}
	}
	c.sig = sig
	c.savedAt = r.opts.Now()
	r.tables.byKey[key] = c
}

// drifted counts and logs a kept table that a verification found differing
// from the kernel's: the change signal or the notifications missed a change.
func (r *node) drifted(key, how string) {
	n := r.resyncs.Add(1)
	r.opts.Logger.Warn("kept rules differed from the kernel's; read again", "table", key, "vouched", how, "resyncs", n)
}

// useTables resets the cache when the mode or backend it was filled for changed.
func (r *node) useTables(mode Mode, backend Backend) {
	if r.tables.mode != mode || r.tables.backend != backend {
		r.tables = tableCache{mode: mode, backend: backend, loggedNoSignal: r.tables.loggedNoSignal, lossesSeen: r.tables.lossesSeen}
	}
}

// changeSignals returns the Runner's change signals, if it has them.
func (r *node) changeSignals() ChangeSignals {
	cs, _ := r.opts.Runner.(ChangeSignals)
	return cs
}

// nf_tables netlink message types (the NFNL_SUBSYS_NFTABLES subsystem in the
// high byte).
const (
	nftGetGen  = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN)
	nftNewGen  = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWGEN)
	nftGetRule = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE)
	nftNewRule = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE)
)

// nftReceiveCap bounds a connection's receives, from its opening, when the
// context has no earlier deadline: the kernel answers at once, this only guards
// against one that never does.
const nftReceiveCap = 2 * time.Second

// nftConn is a NETLINK_NETFILTER connection in one network namespace whose
// receives end at the context's deadline (at most nftReceiveCap after it was
// opened) and at once when the context is cancelled.
type nftConn struct {
	ctx  context.Context
	nl   *netlink.Conn
	stop func() bool // stops the cancellation hook
}

// nftDumpBuffer is the receive buffer of a rule dump. The kernel sizes a dump's
// datagrams to the largest buffer a receive offered (up to 32 KiB) and
// walks the chain from its start again for every datagram: the library's default
// (peek at each datagram, then read exactly that) keeps them at about a page, and
// a dump of 2,500 rules then took two to four times as long (BenchmarkChangeSignals).
const nftDumpBuffer = 64 << 10

// nftAnswerBuffer is the receive buffer of a GETGEN: its answer (or an error
// echoing the request) is one message of under 100 bytes. A fixed buffer spares
// the library's peek at each datagram.
const nftAnswerBuffer = 4 << 10

// dialNFT opens the connection in the named network namespace (/run/netns/<name>,
// as `ip netns` keeps them) or, with "", in the calling thread's (the exporter's:
// the host's). A socket's namespace is fixed when it is created: the library
// creates it on a thread of its own switched there, so no thread of ours changes
// namespace. buffer is the size of the receive buffer.
func dialNFT(ctx context.Context, netns string, buffer int) (*nftConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := netlink.Config{MessageBufferSize: buffer}
	if netns != "" {
		f, err := os.Open("/run/netns/" + netns)
		if err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", netns, err)
		}
		defer f.Close()
		cfg.NetNS = int(f.Fd())
	}
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, &cfg)
	if err != nil {
		return nil, fmt.Errorf("netlink netfilter socket: %w", err)
	}
	deadline := time.Now().Add(nftReceiveCap)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := nl.SetReadDeadline(deadline); err != nil {
		nl.Close()
		return nil, fmt.Errorf("netlink receive deadline: %w", err)
	}
	// A deadline in the past wakes a receive in progress at once.
	stop := context.AfterFunc(ctx, func() { _ = nl.SetReadDeadline(time.Unix(1, 0)) })
	return &nftConn{ctx: ctx, nl: nl, stop: stop}, nil
}

func (c *nftConn) close() {
	c.stop()
	c.nl.Close()
}

// fail wraps a failed exchange; when it failed because the context ended
// (its deadline is the socket's, so the socket may time out a moment before
// the context says so) it also wraps the context's error.
func (c *nftConn) fail(what string, err error) error {
	cerr := c.ctx.Err()
	if d, ok := c.ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("%s: %w (%w)", what, cerr, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// nfgenmsg is the netfilter header every nf_tables message's payload starts
// with: the protocol family, NFNETLINK_V0 and a zero resource id.
func nfgenmsg(family byte) []byte { return []byte{family, unix.NFNETLINK_V0, 0, 0} }

// nftGeneration reads the nf_tables ruleset generation in the named namespace
// ("": the calling thread's).
func nftGeneration(ctx context.Context, netns string) (uint32, error) {
	c, err := dialNFT(ctx, netns, nftAnswerBuffer)
	if err != nil {
		return 0, err
	}
	defer c.close()
	return c.generation()
}

// execute sends one request and receives its answer; the library checks the
// answer's sequence and turns an error message into an error.
func (c *nftConn) execute(what string, m netlink.Message) ([]netlink.Message, error) {
	msgs, err := c.nl.Execute(m)
	if err != nil {
		return nil, c.fail(what, err)
	}
	return msgs, nil
}

// generation asks NFT_MSG_GETGEN.
func (c *nftConn) generation() (uint32, error) {
	msgs, err := c.execute("nf_tables generation", netlink.Message{
		Header: netlink.Header{Type: nftGetGen, Flags: netlink.Request},
		Data:   nfgenmsg(unix.AF_UNSPEC),
	})
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if m.Header.Type == nftNewGen {
			return parseGen(m.Data)
		}
	}
	return 0, errors.New("nf_tables generation: no NEWGEN in the answer")
}

// parseGen reads the generation id of a NEWGEN message's payload (nfgenmsg,
// then attributes in network byte order).
func parseGen(data []byte) (uint32, error) {
	if len(data) < 4 {
		return 0, fmt.Errorf("NEWGEN of %d bytes", len(data))
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return 0, fmt.Errorf("NEWGEN attributes: %w", err)
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() == unix.NFTA_GEN_ID {
			if gen := ad.Uint32(); ad.Err() == nil {
				return gen, nil
			}
		}
	}
	if err := ad.Err(); err != nil {
		return 0, fmt.Errorf("NEWGEN attributes: %w", err)
	}
	return 0, errors.New("NEWGEN without a generation id")
}

// nftChainRules dumps one chain's rules (NFT_MSG_GETRULE, filtered by table
// and chain in the kernel) over one connection, between two reads of the
// generation, and returns each rule's content key and counter's packets.
func nftChainRules(ctx context.Context, netns string, ipv6 bool, table, chain string) (uint32, []ChainRule, error) {
	c, err := dialNFT(ctx, netns, nftDumpBuffer)
	if err != nil {
		return 0, nil, err
	}
	defer c.close()
	before, err := c.generation()
	if err != nil {
		return 0, nil, err
	}
	fam := byte(unix.NFPROTO_IPV4)
	if ipv6 {
		fam = unix.NFPROTO_IPV6
	}
	var rules []ChainRule
	err = c.dump(fam, nftGetRule, unix.NFTA_RULE_TABLE, table, unix.NFTA_RULE_CHAIN, chain, func(m nftMsg) error {
		if m.typ != unix.NFT_MSG_NEWRULE {
			return nil
		}
		pk, found, err := ruleCounter(m.attrs)
		switch {
		case err != nil:
			return fmt.Errorf("rule %d: %w", len(rules), err)
		case !found:
			return fmt.Errorf("rule %d of %s %s has no counter", len(rules), table, chain)
		}
		key, _, err := ruleContentKey(m.attrs, nil)
		if err != nil {
			return fmt.Errorf("rule %d: %w", len(rules), err)
		}
		rules = append(rules, ChainRule{Key: key, Packets: pk, id: ruleIdentityOf(m.attrs)})
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	after, err := c.generation()
	if err != nil {
		return 0, nil, err
	}
	if after != before {
		return 0, nil, fmt.Errorf("nf_tables generation moved during the rule dump (%d → %d)", before, after)
	}
	return before, rules, nil
}

// ruleCounter reads the packets of the first counter expression of a rule's
// attributes (after the nfgenmsg; in network byte order: NFTA_RULE_EXPRESSIONS
// holds list elements, each an expression's name and data); found is false
// when the rule has no counter. An expression other than a counter is left at
// its name: its data (hundreds of bytes for an xt match) is never walked.
func ruleCounter(attrs []byte) (packets uint64, found bool, err error) {
	var exprErr error // an expression's own error, not wrapped as an attribute's
	err = forEachListElem(attrs, unix.NFTA_RULE_EXPRESSIONS, func(elem []byte) (bool, error) {
		name, data, err := nlExpr(elem)
		if err != nil {
			return false, err
		}
		if string(name) != "counter" {
			return false, nil
		}
		d := nlAttr{b: data}
		for d.next() {
			if d.typ == unix.NFTA_COUNTER_PACKETS {
				if len(d.val) != 8 {
					exprErr = fmt.Errorf("counter packets of %d bytes", len(d.val))
					return true, nil
				}
				packets, found = binary.BigEndian.Uint64(d.val), true
				return true, nil
			}
		}
		return true, d.err // the first counter, without its packets
	})
	switch {
	case exprErr != nil:
		return 0, false, exprErr
	case err != nil:
		return 0, false, fmt.Errorf("NEWRULE attributes: %w", err)
	}
	return packets, found, nil
}
