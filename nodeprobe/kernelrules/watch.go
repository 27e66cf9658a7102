package kernelrules

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/localtraffic/localtraffic-exporter/nodeprobe/dataplane"
)

// WatchState says what vouched for the tables a Snapshot kept from earlier
// reads (Snapshot.Watch): WatchNotified when change notifications cover the mode
// (the nft backend, or nftables mode, while Watch runs: a kept table is used
// while no relevant change was notified since it was saved), WatchPolled when
// the change signal (the nf_tables generation, or a legacy table's GET_INFO) is
// read and compared instead, WatchNone when the Runner offers no change signal
// (every Read saves every table).
type WatchState = dataplane.WatchState

// Watch states.
const (
	WatchNotified = dataplane.WatchNotified
	WatchPolled   = dataplane.WatchPolled
	WatchNone     = dataplane.WatchNone
)

// Defaults of the watcher's Options.
const (
	DefaultPollInterval = time.Second
	DefaultFullVerify   = 10 * time.Minute
	// DefaultNotifyBuffer is the notification socket's receive buffer. A
	// kube-proxy sync of 10,000 Services in iptables mode (nft backend)
	// rewrites its top-level chains, some 35,000 rules: 70,000 notifications,
	// about 30 MB as the kernel accounts them, queued at once when the
	// receiving goroutine is not scheduled (docs/performance.md, "Change
	// notifications"). It is kernel memory used only while queued.
	DefaultNotifyBuffer = 64 << 20
)

// netnsRunner is implemented by the Runners whose network namespace the
// watcher can subscribe in: "" is this process's (ExecRunner).
type netnsRunner interface{ watchNetns() string }

func (ExecRunner) watchNetns() string    { return "" }
func (n NetnsRunner) watchNetns() string { return n.Namespace }

// awaitMax bounds how long a read waits for the watcher to have accounted
// for the generation the read started at; past it the read does without
// notifications (the generation alone vouches, exactly).
const awaitMax = 2 * time.Second

// genAfter: generation a comes after b (the generation counts up by one per
// committed transaction and wraps).
func genAfter(a, b uint32) bool { return int32(a-b) > 0 }

// watchView is what the watcher vouches for, as of generation gen: every
// transaction up to it has been accounted for.
type watchView struct {
	gen uint32
	// lastRelevant is, per family, the generation of the last transaction that
	// changed something the parse reads — or that may have: the baseline the
	// watcher (re)started from after a loss, a scope change or its start.
	lastRelevant [2]uint32
	// lastTouch is, per family and counter chain, the generation of the last
	// transaction that rewrote it.
	lastTouch [2][2]uint32
	losses    uint64
}

// unchangedSince: nothing the parse reads changed in family fi after
// generation g (up to the view's).
func (v *watchView) unchangedSince(fi int, g uint32) bool {
	return v != nil && !genAfter(v.lastRelevant[fi], g)
}

// nftWatch is the watcher of one Reader while Watch runs: a netlink socket
// subscribed to nf_tables notifications in the Runner's namespace (when it
// can be), and a poller of the change signal where there are none.
type nftWatch struct {
	r      *node
	netns  string
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	subscribed bool // notifications are received and accounted for
	baseline   bool // a baseline has been set since subscribing (view valid)
	view       watchView
	changes    [2]changeLog  // per family: what the relevant transactions changed, by name
	advanced   chan struct{} // closed (and replaced) whenever view moves
	scope      watchScope    // the scope the accounting follows
	subs       map[*watchSub]struct{}

	// rescope asks the receiving goroutine to rebase on scope (under mu:
	// the scope and the request are taken together).
	rescope bool
	conn    atomic.Pointer[netlink.Conn] // for waking the receive

	// Counters for benchmarks and tests.
	messages     atomic.Uint64
	transactions atomic.Uint64
	losses       atomic.Uint64
}

// watchSub is one Watch call: its pending signal (one slot: coalesced), and content: a signal since its last
// call said more than a counter chain's rewrite.
type watchSub struct {
	ch      chan struct{}
	content atomic.Bool
}

func (s *watchSub) signal(content bool) {
	if content {
		s.content.Store(true)
	}
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// Watch runs until ctx ends, calling changed (never concurrently, coalesced) whenever a Read may give
// something the last Read did not: a relevant change committed, notifications lost, or — where no
// notifications exist (the legacy backend, or the watcher could not subscribe) — the cheap change signal
// moved (legacy: GET_INFO, polled every PollInterval, default 1 s). It also calls changed when kube-proxy
// rewrote a chain whose counters a Snapshot carries (KUBE-EXTERNAL-SERVICES, KUBE-PROXY-FIREWALL), though
// nothing relevant changed: the rewritten rules' counters start again at zero, and a caller that keeps a
// running total must read them before they climb back to where they were, or it cannot tell the reset. It
// never calls changed for counter growth: the caller reads counters on its own schedule. content is false
// when every change since the last call was such a counter chain's rewrite and nothing else: a caller that
// dates what a read shows by when it was told (the exposure recorder) must not date it by a rewrite that
// changed nothing (kube-proxy's iptables mode rewrites those chains at most syncs). Lost notifications, a
// moved change signal and the first call are content changes: what changed is not known.
func (r *node) Watch(ctx context.Context, changed func(content bool)) {
	sub := &watchSub{ch: make(chan struct{}, 1)}
	w := r.attachWatch(sub)
	defer r.detachWatch(w, sub)
	// What happened between the caller's last Read and now is not known.
	sub.signal(true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.ch:
			if ctx.Err() != nil {
				return
			}
			changed(sub.content.Swap(false))
		}
	}
}

// attachWatch adds a subscriber, starting the watcher for the first.
func (r *node) attachWatch(sub *watchSub) *nftWatch {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	w := r.watch
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &nftWatch{r: r, cancel: cancel, done: make(chan struct{}), advanced: make(chan struct{}), subs: map[*watchSub]struct{}{}}
		nr, canSubscribe := r.opts.Runner.(netnsRunner)
		if canSubscribe {
			w.netns = nr.watchNetns()
		}
		w.scope = r.scopeNow()
		r.watch = w
		go w.run(ctx, canSubscribe)
	}
	w.mu.Lock()
	w.subs[sub] = struct{}{}
	w.mu.Unlock()
	return w
}

// detachWatch removes a subscriber and stops the watcher after the last.
func (r *node) detachWatch(w *nftWatch, sub *watchSub) {
	r.watchMu.Lock()
	w.mu.Lock()
	delete(w.subs, sub)
	last := len(w.subs) == 0
	w.mu.Unlock()
	if last && r.watch == w {
		r.watch = nil
	}
	r.watchMu.Unlock()
	if last {
		w.cancel()
		if c := w.conn.Load(); c != nil {
			_ = c.SetReadDeadline(time.Unix(1, 0))
		}
		<-w.done
	}
}

// currentWatch is the running watcher, if any.
func (r *node) currentWatch() *nftWatch {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	return r.watch
}

// notify signals every subscriber, after dropping the Reader's kept
// snapshot (and a read in flight): a Read called for this change must read.
// content: more than a counter chain's rewrite may have changed.
func (w *nftWatch) notify(content bool) {
	w.r.shared.forget()
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		s.signal(content)
	}
}

// setScope is called by each read with the mode and backend it reads: the
// watcher judges transactions by what that read's parse depends on. A new
// scope makes the watcher rebase (everything before counts as changed).
func (w *nftWatch) setScope(s watchScope) {
	w.mu.Lock()
	same := w.scope == s
	if !same {
		w.scope, w.baseline, w.rescope = s, false, true
	}
	w.mu.Unlock()
	if !same {
		if c := w.conn.Load(); c != nil {
			_ = c.SetReadDeadline(time.Unix(1, 0)) // wake the receive
		}
	}
}

// await returns the view once the watcher has accounted for generation gen,
// or nil when it cannot vouch for this read: not subscribed, no baseline for
// the read's scope yet, or behind for longer than awaitMax.
func (w *nftWatch) await(ctx context.Context, gen uint32, scope watchScope) *watchView {
	if w == nil {
		return nil
	}
	timer := time.NewTimer(awaitMax)
	defer timer.Stop()
	for {
		w.mu.Lock()
		if !w.subscribed || !w.baseline || w.scope != scope {
			w.mu.Unlock()
			return nil
		}
		if !genAfter(gen, w.view.gen) {
			v := w.view
			w.mu.Unlock()
			return &v
		}
		ch := w.advanced
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		case <-timer.C:
			w.r.opts.Logger.Debug("change notifications behind the generation; reading without them", "generation", gen)
			return nil
		}
	}
}

// advance publishes a new view (under w.mu).
func (w *nftWatch) advanceLocked() {
	close(w.advanced)
	w.advanced = make(chan struct{})
}

// run is the watcher: the notification loop, resubscribing after failures,
// and the poller beside it.
func (w *nftWatch) run(ctx context.Context, canSubscribe bool) {
	defer close(w.done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.poll(ctx)
	}()
	for failures := 0; canSubscribe && ctx.Err() == nil; failures++ {
		err := w.receive(ctx)
		w.mu.Lock()
		w.subscribed, w.baseline = false, false
		w.advanceLocked()
		w.mu.Unlock()
		if ctx.Err() != nil {
			break
		}
		level := slog.LevelInfo
		if failures > 0 {
			level = slog.LevelDebug // said once
		}
		w.r.opts.Logger.Log(ctx, level, "nf_tables change notifications unavailable; polling the generation", "err", err, "retry", resubscribeAfter)
		w.notify(true) // a Read may now differ, and is vouched for otherwise
		select {
		case <-ctx.Done():
		case <-time.After(resubscribeAfter):
		}
	}
	wg.Wait()
}

// resubscribeAfter is how long the watcher polls before trying to subscribe
// again after the subscription failed.
const resubscribeAfter = 30 * time.Second

// dialNotify opens a NETLINK_NETFILTER socket in the watcher's namespace,
// joined to NFNLGRP_NFTABLES, with a receive buffer of the given size (forced
// past the system's maximum where permitted: CAP_NET_ADMIN).
func dialNotify(netns string, buffer int) (*netlink.Conn, error) {
	cfg := netlink.Config{}
	if netns != "" {
		f, err := os.Open("/run/netns/" + netns)
		if err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", netns, err)
		}
		defer f.Close()
		cfg.NetNS = int(f.Fd())
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &cfg)
	if err != nil {
		return nil, fmt.Errorf("netlink netfilter socket: %w", err)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("netlink notification socket: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, buffer)
		if serr != nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, buffer)
		}
	}); err != nil || serr != nil {
		c.Close()
		return nil, fmt.Errorf("notification socket receive buffer of %d bytes: %w", buffer, errors.Join(err, serr))
	}
	if err := c.JoinGroup(unix.NFNLGRP_NFTABLES); err != nil {
		c.Close()
		return nil, fmt.Errorf("joining the nf_tables notification group: %w", err)
	}
	return c, nil
}

// recvBuffer is the user-space buffer of one receive: the kernel packs
// notifications into datagrams of a page or two.
const recvBuffer = 256 << 10

// receive subscribes and accounts for transactions until ctx ends or the
// socket fails. Notifications lost (ENOBUFS) make it drain the socket, set a
// new baseline and count a loss.
func (w *nftWatch) receive(ctx context.Context) error {
	buffer := w.r.opts.NotifyBuffer
	c, err := dialNotify(w.netns, buffer)
	if err != nil {
		return err
	}
	defer c.Close()
	w.conn.Store(c)
	defer w.conn.Store(nil)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("netlink notification socket: %w", err)
	}
	w.mu.Lock()
	w.subscribed = true
	w.mu.Unlock()
	acct := newTxAccount()
	buf := make([]byte, recvBuffer)
	rebase := true
	lost := false
	for {
		if rebase || lost || w.rescopeAsked() {
			if err := w.rebase(ctx, acct, raw, lost); err != nil {
				return err
			}
			rebase, lost = false, false
		}
		n, rerr := recvDatagram(raw, buf)
		switch {
		case rerr == nil:
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			if ctx.Err() != nil {
				return ctx.Err()
			}
			_ = c.SetReadDeadline(time.Time{}) // woken for a new scope
			continue
		case errors.Is(rerr, unix.ENOBUFS):
			w.losses.Add(1)
			w.r.lossEvents.Add(1)
			w.r.opts.Logger.Warn("nf_tables change notifications lost (receive buffer overrun); reading everything again", "buffer", buffer)
			w.mu.Lock()
			w.view.losses++
			w.mu.Unlock()
			lost = true
			continue
		default:
			return fmt.Errorf("receiving nf_tables notifications: %w", rerr)
		}
		if n > len(buf) {
			// Cut: the rest of the datagram is gone, as if lost.
			buf = make([]byte, n)
			w.losses.Add(1)
			w.r.lossEvents.Add(1)
			w.mu.Lock()
			w.view.losses++
			w.mu.Unlock()
			lost = true
			continue
		}
		w.datagram(acct, buf[:n])
	}
}

// rescopeAsked: a read asked for a rebase on a new scope.
func (w *nftWatch) rescopeAsked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rescope
}

// recvDatagram receives one datagram through the runtime's poller (so the
// socket's read deadline applies) into buf, without copying it elsewhere; n
// is the datagram's full length (more than len(buf) when it was cut).
func recvDatagram(raw syscall.RawConn, buf []byte) (n int, err error) {
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_TRUNC|unix.MSG_DONTWAIT)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// datagram accounts for the messages of one datagram.
func (w *nftWatch) datagram(acct *txAccount, b []byte) {
	ok := forEachMessage(b, func(htype uint16, data []byte) {
		if gen, isGen := acct.message(htype, data); isGen {
			w.commit(acct, gen)
		}
	})
	if !ok {
		acct.bad = true
	}
}

// forEachMessage hands each netlink message of a datagram (its type and
// payload) to fn; false when the datagram is malformed (fn has had the
// messages before the fault).
func forEachMessage(b []byte, fn func(htype uint16, data []byte)) bool {
	for len(b) >= nlmsgHeaderLen {
		l := int(binary.NativeEndian.Uint32(b))
		if l < nlmsgHeaderLen || l > len(b) {
			return false
		}
		fn(binary.NativeEndian.Uint16(b[4:]), b[nlmsgHeaderLen:l])
		b = b[min((l+3)&^3, len(b)):]
	}
	return len(b) == 0
}

// commit ends a transaction: a relevant one moves its families' lastRelevant
// and signals the subscribers; one from before the baseline is dropped.
func (w *nftWatch) commit(acct *txAccount, gen uint32) {
	w.mu.Lock()
	accept := genAfter(gen, w.view.gen)
	w.mu.Unlock()
	j := acct.end(accept)
	w.messages.Store(acct.messages)
	if !accept {
		return
	}
	w.transactions.Add(1)
	relevant, content := false, false
	w.mu.Lock()
	w.view.gen = gen
	for fi := range j.changed {
		if j.changed[fi] {
			w.view.lastRelevant[fi] = gen
			w.changes[fi].add(gen, j.names[fi])
			relevant, content = true, true
		}
		for c := range j.touched[fi] {
			if j.touched[fi][c] {
				w.view.lastTouch[fi][c] = gen
				relevant = true // a reset of the counters a caller keeps a total of: it must read them soon
			}
		}
	}
	w.advanceLocked()
	w.mu.Unlock()
	w.r.opts.Logger.Debug("nf_tables transaction", "generation", gen, "relevant", j.changed, "counterChainsRewritten", j.touched,
		"changedIPv4", j.names[0], "changedIPv6", j.names[1])
	if relevant {
		w.notify(content)
	}
}

// maxLoggedNames bounds, per family, the names the watcher keeps of the
// relevant transactions since the oldest a read may ask about; past it the
// oldest are forgotten, and a read whose tables were saved before them saves
// or lists them whole.
const maxLoggedNames = 512

// changeLog is one family's record of what relevant transactions changed, by
// name: complete for every transaction after generation from.
type changeLog struct {
	from    uint32
	entries []changeEntry // oldest first, all after from
	names   int           // objects in entries
}

type changeEntry struct {
	gen  uint32
	objs []objName
}

// reset forgets every entry: what changed up to gen cannot be named.
func (l *changeLog) reset(gen uint32) {
	*l = changeLog{from: gen}
}

// add records a relevant transaction; one whose objects cannot be named
// resets the log at its generation.
func (l *changeLog) add(gen uint32, n txNames) {
	if n.unnamed {
		l.reset(gen)
		return
	}
	l.entries = append(l.entries, changeEntry{gen: gen, objs: n.objs})
	l.names += len(n.objs)
	drop := 0
	for l.names > maxLoggedNames && drop < len(l.entries) {
		l.names -= len(l.entries[drop].objs)
		l.from = l.entries[drop].gen
		drop++
	}
	if drop > 0 {
		l.entries = append(l.entries[:0:0], l.entries[drop:]...)
	}
}

// since returns the objects that relevant transactions after generation g
// changed, each once; false when they cannot all be named.
func (l *changeLog) since(g uint32) ([]objName, bool) {
	if genAfter(l.from, g) {
		return nil, false
	}
	var out []objName
	seen := map[objName]bool{}
	for _, e := range l.entries {
		if !genAfter(e.gen, g) {
			continue
		}
		for _, o := range e.objs {
			if !seen[o] {
				seen[o] = true
				out = append(out, o)
			}
		}
	}
	return out, true
}

// changedSince names the objects of family fi that relevant transactions
// after generation g changed — up to the last transaction the watcher has
// judged, which may be past the generation a view was awaited at; false when
// it cannot name them all (notifications lost, a rebase, a transaction whose
// objects were not named, or more names than it keeps since g).
func (w *nftWatch) changedSince(fi int, g uint32) ([]objName, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.subscribed || !w.baseline {
		return nil, false
	}
	return w.changes[fi].since(g)
}

// rebase drains what is queued (a lost stream's rest, or transactions
// judged under the old scope), reads the generation and, in nftables mode,
// the anonymous sets the local chains refer to, and makes that generation the
// baseline: everything up to it counts as changed, everything after is
// accounted for. The subscribers are told when notifications were lost or
// drained unread: a Read may differ.
func (w *nftWatch) rebase(ctx context.Context, acct *txAccount, raw syscall.RawConn, lost bool) error {
	buf := make([]byte, 64<<10)
	drained := false
	for {
		var n int
		var rerr error
		err := raw.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_TRUNC|unix.MSG_DONTWAIT)
			return true // never wait: stop at the first EAGAIN
		})
		if err != nil {
			return err
		}
		if errors.Is(rerr, unix.EAGAIN) {
			break
		}
		if rerr != nil && !errors.Is(rerr, unix.ENOBUFS) {
			return fmt.Errorf("draining nf_tables notifications: %w", rerr)
		}
		drained = drained || n > 0 || rerr != nil
	}
	w.mu.Lock()
	scope := w.scope
	w.rescope = false
	w.mu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	gen, kept, err := w.baselineOf(gctx, scope)
	if err != nil {
		return err
	}
	acct.rebase(scope, kept)
	w.mu.Lock()
	if w.scope == scope {
		w.baseline = true
	}
	w.view.gen = gen
	w.view.lastRelevant = [2]uint32{gen, gen}
	w.view.lastTouch = [2][2]uint32{{gen, gen}, {gen, gen}}
	for fi := range w.changes {
		w.changes[fi].reset(gen)
	}
	w.advanceLocked()
	w.mu.Unlock()
	if lost || drained {
		w.notify(true)
	}
	return nil
}

// baselineOf reads the generation and, for nftables mode, the content of the
// anonymous sets the relevant chains' rules refer to, at that one
// generation (read before and after: again when it moved).
func (w *nftWatch) baselineOf(ctx context.Context, scope watchScope) (uint32, [2]map[string]uint64, error) {
	var kept [2]map[string]uint64
	for attempt := 0; ; attempt++ {
		c, err := dialNFT(ctx, w.netns, nftDumpBuffer)
		if err != nil {
			return 0, kept, err
		}
		before, err := c.generation()
		if err == nil && scope.nftables() {
			kept, err = c.anonSets(scope)
		}
		var after uint32
		if err == nil {
			after, err = c.generation()
		}
		c.close()
		if err != nil {
			return 0, kept, err
		}
		if before == after || attempt == 4 {
			if before != after {
				// Could not catch a quiet moment: remember no anonymous set (a
				// rewrite of a rule with one then counts as a change).
				kept = [2]map[string]uint64{}
			}
			return after, kept, nil
		}
	}
}

// anonSets reads, per family, the content of each anonymous set that a rule
// of a chain the scope reads refers to (a local-* chain's numgen map of
// endpoints): a rewrite of such a rule is then told from a change even though
// its new set has a new name.
func (c *nftConn) anonSets(scope watchScope) ([2]map[string]uint64, error) {
	var kept [2]map[string]uint64
	for fi, fam := range []byte{unix.NFPROTO_IPV4, unix.NFPROTO_IPV6} {
		kept[fi] = map[string]uint64{}
		var names []string
		err := c.dump(fam, nftGetRule, unix.NFTA_RULE_TABLE, "kube-proxy", 0, "", func(m nftMsg) error {
			if rel, _ := scope.ruleContent(m.table, m.name); !rel {
				return nil
			}
			_, _, err := ruleContentKey(m.attrs, func(name []byte) (uint64, bool) {
				names = append(names, string(name))
				return 0, true
			})
			return err
		})
		if errors.Is(err, unix.ENOENT) {
			continue // no such table in this family
		}
		if err != nil {
			return kept, err
		}
		for _, name := range names {
			var sum uint64
			var n int64
			err := c.dump(fam, nftGetSetElem, unix.NFTA_SET_ELEM_LIST_TABLE, "kube-proxy", unix.NFTA_SET_ELEM_LIST_SET, name, func(m nftMsg) error {
				return forEachElem(m.attrs, func(k uint64) { sum += mix64(k); n++ })
			})
			if err != nil {
				return kept, err
			}
			if len(kept[fi]) < maxKeptAnon {
				kept[fi][name] = anonContent(sum, n)
			}
		}
	}
	return kept, nil
}

// nftGetSetElem is the NFT_MSG_GETSETELEM request type.
const nftGetSetElem = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSETELEM)

// dump sends one dump request (with up to two string attributes) and hands
// each answer to fn, decoded by parseNFTMsg, as it arrives.
func (c *nftConn) dump(fam byte, typ netlink.HeaderType, attr1 uint16, val1 string, attr2 uint16, val2 string, fn func(nftMsg) error) error {
	what := fmt.Sprintf("netlink dump %#x %s %s", uint16(typ), val1, val2)
	ae := netlink.NewAttributeEncoder()
	ae.String(attr1, val1)
	if attr2 != 0 {
		ae.String(attr2, val2)
	}
	attrs, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	req, err := c.nl.Send(netlink.Message{
		Header: netlink.Header{Type: typ, Flags: netlink.Request | netlink.Dump},
		Data:   append(nfgenmsg(fam), attrs...),
	})
	if err != nil {
		return c.fail(what, err)
	}
	for m, err := range c.nl.ReceiveIter() {
		if err == nil {
			err = netlink.Validate(req, []netlink.Message{m})
		}
		if err != nil {
			return c.fail(what, err)
		}
		nm, ok, err := parseNFTMsg(uint16(m.Header.Type), m.Data)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !ok {
			continue
		}
		if err := fn(nm); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// poll reads the change signal every PollInterval where notifications do
// not cover the mode read last, and signals the subscribers when it moved:
// the legacy backend's GET_INFO of nat and filter (and which legacy tables
// exist), the nf_tables generation while not subscribed. A Runner without
// change signals has nothing to poll: every tick is a possible change.
func (w *nftWatch) poll(ctx context.Context) {
	t := time.NewTicker(w.r.opts.PollInterval)
	defer t.Stop()
	var prev string
	have := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cs := w.r.changeSignals()
		scope := w.r.scopeNow()
		w.mu.Lock()
		subscribed := w.subscribed
		w.mu.Unlock()
		var now string
		var err error
		switch {
		case cs == nil:
			w.notify(true)
			continue
		case scope.mode == ModeIPTables && scope.backend == BackendLegacy:
			now, err = w.legacySignal(ctx, cs)
		case subscribed || scope.mode == ModeIPVS:
			have = false
			continue
		default:
			var gen uint32
			gen, err = cs.NFTablesGeneration(ctx)
			now = fmt.Sprintf("gen %d", gen)
		}
		if err != nil {
			w.r.opts.Logger.Debug("polling the change signal", "err", err)
			have = false
			continue
		}
		if have && now != prev {
			w.notify(true)
		}
		prev, have = now, true
	}
}

// legacySignal spells the legacy tables' change signal: which tables exist
// and nat's and filter's GET_INFO, per family (only existing tables are
// asked: asking creates a missing one).
func (w *nftWatch) legacySignal(ctx context.Context, cs ChangeSignals) (string, error) {
	var out []byte
	for _, f := range ipFamilies {
		tables, err := w.r.legacyTables(ctx, f)
		if err != nil {
			return "", err
		}
		for _, t := range []string{"nat", "filter"} {
			if !tables[t] {
				out = append(out, '-')
				continue
			}
			h, err := cs.LegacyTableInfo(ctx, f.ipv6, t)
			if err != nil {
				return "", err
			}
			out = binary.LittleEndian.AppendUint64(out, h)
		}
	}
	return string(out), nil
}
