package kernelrules

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"runtime"
	"time"
	"unsafe"

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
	// NFTablesChainCounters returns the packet counter of each rule of one
	// iptables-nft chain (table ip/ip6 <table>), in the chain's order, and the
	// generation they belong to (read before and after the dump: an error if it
	// moved in between).
	NFTablesChainCounters(ctx context.Context, ipv6 bool, table, chain string) (gen uint32, packets []uint64, err error)
}

// NFTablesGeneration implements ChangeSignals in this process's namespace.
func (ExecRunner) NFTablesGeneration(ctx context.Context) (uint32, error) {
	return nftGeneration(ctx)
}

// NFTablesGeneration implements ChangeSignals inside the namespace.
func (n NetnsRunner) NFTablesGeneration(ctx context.Context) (uint32, error) {
	var gen uint32
	err := inNetns(n.Namespace, func() error {
		var err error
		gen, err = nftGeneration(ctx)
		return err
	})
	return gen, err
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

// NFTablesChainCounters implements ChangeSignals in this process's namespace.
func (ExecRunner) NFTablesChainCounters(ctx context.Context, ipv6 bool, table, chain string) (uint32, []uint64, error) {
	return nftChainCounters(ctx, ipv6, table, chain)
}

// NFTablesChainCounters implements ChangeSignals inside the namespace.
func (n NetnsRunner) NFTablesChainCounters(ctx context.Context, ipv6 bool, table, chain string) (uint32, []uint64, error) {
	var gen uint32
	var pk []uint64
	err := inNetns(n.Namespace, func() error {
		var err error
		gen, pk, err = nftChainCounters(ctx, ipv6, table, chain)
		return err
	})
	return gen, pk, err
}

// inNetns runs fn on an OS thread switched into the named namespace
// (/run/netns/<name>, as `ip netns` keeps them). The thread is switched back
// afterwards; if that fails it is not unlocked, so the runtime discards it
// instead of running other goroutines in the wrong namespace.
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

// Netlink constants (linux/netfilter/nfnetlink.h, nf_tables.h).
const (
	nfnlSubsysNFTables = 10
	nftMsgGetGen       = 16
	nftMsgNewGen       = 15
	nftaGenID          = 1
)

// nftGeneration asks nf_tables for its ruleset generation over a netlink
// socket opened in the calling thread's network namespace. The socket's
// namespace is fixed when it is created, so only the creation must happen there.
func nftGeneration(ctx context.Context) (uint32, error) {
	// The kernel answers a GETGEN at once; the receive timeout only guards
	// against a kernel that never does, within the read's deadline.
	fd, err := netlinkConn(ctx)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	// nlmsghdr (16 bytes) + nfgenmsg (family AF_UNSPEC, version NFNETLINK_V0, res_id 0).
	req := make([]byte, 20)
	binary.NativeEndian.PutUint32(req[0:], 20)
	binary.NativeEndian.PutUint16(req[4:], nfnlSubsysNFTables<<8|nftMsgGetGen)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], 1) // seq
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("netlink GETGEN: %w", err)
	}
	buf := make([]byte, 4096)
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, fmt.Errorf("netlink GETGEN answer: %w", err)
		}
		gen, done, err := parseGenAnswer(buf[:n])
		if err != nil || done {
			return gen, err
		}
	}
}

// parseGenAnswer reads netlink messages for the NEWGEN answer; done is false
// when the messages held something else (to be skipped).
func parseGenAnswer(b []byte) (gen uint32, done bool, err error) {
	for len(b) >= 16 {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		typ := binary.NativeEndian.Uint16(b[4:])
		if l < 16 || l > len(b) {
			return 0, true, fmt.Errorf("netlink answer: bad message length %d", l)
		}
		msg := b[16:l]
		switch {
		case typ == unix.NLMSG_ERROR:
			if len(msg) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(msg)); code != 0 {
					return 0, true, fmt.Errorf("netlink GETGEN: %w", unix.Errno(-code))
				}
			}
		case typ == nfnlSubsysNFTables<<8|nftMsgNewGen && len(msg) >= 4:
			attrs := msg[4:] // after nfgenmsg
			for len(attrs) >= 4 {
				al := int(binary.NativeEndian.Uint16(attrs[0:]))
				at := binary.NativeEndian.Uint16(attrs[2:]) & 0x3fff
				if al < 4 || al > len(attrs) {
					break
				}
				if at == nftaGenID && al >= 8 {
					return binary.BigEndian.Uint32(attrs[4:8]), true, nil
				}
				attrs = attrs[min((al+3)&^3, len(attrs)):]
			}
			return 0, true, errors.New("netlink NEWGEN without a generation id")
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return 0, false, nil
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
	backend string
	byKey   map[string]cachedTable // "<family>/<table>"
	// loggedNoSignal: "cannot read the change signal" was logged once.
	loggedNoSignal bool
}

type cachedTable struct {
	sig changeSig
	ipt *iptablesResult // iptables mode: the nat table alone
	nft *nftResult      // nftables mode; nil with absent
	// absent: the nftables family table did not exist.
	absent bool
	// Legacy nat: when it was last saved, for Options.LegacyVerify.
	verified time.Time
}

// changeSig is one reading of a change signal: the nf_tables generation, or a
// legacy table's GET_INFO hash.
type changeSig struct {
	gen  uint32
	info uint64 // legacy: hash of GET_INFO
}

// signals reads the change signals of one Read: the nf_tables generation once,
// legacy GET_INFO per table.
type signals struct {
	cs      ChangeSignals // nil: none
	legacy  bool          // iptables legacy backend: GET_INFO; else the generation
	gen     uint32
	genErr  error
	genRead bool
}

// forget drops the generation read so far: the next get reads it again.
func (s *signals) forget() { s.genRead = false }

// get returns the table's signal; ok false when it cannot be read (then the
// table is read every time).
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
	}
	return changeSig{gen: s.gen}, s.genErr
}

// cached returns the kept entry for key when sig (read before this read's
// save) still equals the one read before the kept save. An unreadable signal
// is never taken for "unchanged": it is logged once and everything is read.
func (r *reader) cached(key string, sig changeSig, sigErr error) (cachedTable, bool) {
	if sigErr != nil {
		if !r.tables.loggedNoSignal {
			r.tables.loggedNoSignal = true
			r.opts.Logger.Info("cannot read the ruleset change signal; every read saves every table", "table", key, "err", sigErr)
		}
		return cachedTable{}, false
	}
	c, ok := r.tables.byKey[key]
	if !ok || c.sig != sig {
		return cachedTable{}, false
	}
	return c, true
}

// keep remembers a freshly read table under the signal read before it was
// saved: a change during the save moves the signal, so the next read saves again.
func (r *reader) keep(key string, sig changeSig, sigErr error, c cachedTable) {
	if sigErr != nil {
		delete(r.tables.byKey, key)
		return
	}
	if r.tables.byKey == nil {
		r.tables.byKey = map[string]cachedTable{}
	}
	c.sig = sig
	r.tables.byKey[key] = c
}

// useTables resets the cache when the mode or backend it was filled for changed.
func (r *reader) useTables(mode Mode, backend string) {
	if r.tables.mode != mode || r.tables.backend != backend {
		r.tables = tableCache{mode: mode, backend: backend, loggedNoSignal: r.tables.loggedNoSignal}
	}
}

// changeSignals returns the Runner's change signals, if it has them.
func (r *reader) changeSignals() ChangeSignals {
	cs, _ := r.opts.Runner.(ChangeSignals)
	return cs
}

// More netlink constants (nf_tables.h).
const (
	nftMsgNewRule      = 6
	nftMsgGetRule      = 7
	nftaRuleTable      = 1
	nftaRuleChain      = 2
	nftaRuleExprs      = 4
	nftaListElem       = 1
	nftaExprName       = 1
	nftaExprData       = 2
	nftaCounterPackets = 2
	nfprotoIPv4        = 2
	nfprotoIPv6        = 10
)

// netlinkConn is a NETLINK_NETFILTER socket opened in the calling thread's
// namespace, with receives bounded by the context's deadline (at most 2 s).
func netlinkConn(ctx context.Context) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("netlink netfilter socket: %w", err)
	}
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); left > 0 && left < 2*time.Second {
			tv = unix.NsecToTimeval(left.Nanoseconds())
		}
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netlink receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netlink bind: %w", err)
	}
	return fd, nil
}

// nlAttr appends one netlink attribute (padded to 4 bytes).
func nlAttr(b []byte, typ uint16, val []byte) []byte {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(4+len(val)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b = append(append(b, h[:]...), val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nlAttrs calls fn for each attribute in b (type without the nested and
// byte-order flags).
func nlAttrs(b []byte, fn func(typ uint16, val []byte) error) error {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff
		if l < 4 || l > len(b) {
			return fmt.Errorf("netlink attribute length %d of %d", l, len(b))
		}
		if err := fn(typ, b[4:l]); err != nil {
			return err
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return nil
}

// nftChainCounters dumps one chain's rules (NFT_MSG_GETRULE, filtered by table
// and chain in the kernel) and returns each rule's counter expression's packets.
func nftChainCounters(ctx context.Context, ipv6 bool, table, chain string) (uint32, []uint64, error) {
	before, err := nftGeneration(ctx)
	if err != nil {
		return 0, nil, err
	}
	fd, err := netlinkConn(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(fd)
	fam := byte(nfprotoIPv4)
	if ipv6 {
		fam = nfprotoIPv6
	}
	req := make([]byte, 20, 128)
	req[16] = fam
	req = nlAttr(req, nftaRuleTable, append([]byte(table), 0))
	req = nlAttr(req, nftaRuleChain, append([]byte(chain), 0))
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], nfnlSubsysNFTables<<8|nftMsgGetRule)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 2)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, nil, fmt.Errorf("netlink GETRULE: %w", err)
	}
	var packets []uint64
	buf := make([]byte, 1<<16)
	for {
		if err := ctx.Err(); err != nil {
			return 0, nil, err
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, nil, fmt.Errorf("netlink GETRULE answer: %w", err)
		}
		for b := buf[:n]; len(b) >= 16; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			typ := binary.NativeEndian.Uint16(b[4:])
			if l < 16 || l > len(b) {
				return 0, nil, fmt.Errorf("netlink GETRULE answer: bad message length %d", l)
			}
			msg := b[16:l]
			b = b[min((l+3)&^3, len(b)):]
			switch typ {
			case unix.NLMSG_DONE:
				after, err := nftGeneration(ctx)
				if err != nil {
					return 0, nil, err
				}
				if after != before {
					return 0, nil, fmt.Errorf("nf_tables generation moved during the counter dump (%d → %d)", before, after)
				}
				return before, packets, nil
			case unix.NLMSG_ERROR:
				if len(msg) >= 4 {
					if code := int32(binary.NativeEndian.Uint32(msg)); code != 0 {
						return 0, nil, fmt.Errorf("netlink GETRULE %s %s: %w", table, chain, unix.Errno(-code))
					}
				}
			case nfnlSubsysNFTables<<8 | nftMsgNewRule:
				if len(msg) < 4 {
					return 0, nil, errors.New("netlink rule message too short")
				}
				pk, found := uint64(0), false
				err := nlAttrs(msg[4:], func(t uint16, v []byte) error {
					if t != nftaRuleExprs {
						return nil
					}
					return nlAttrs(v, func(t uint16, elem []byte) error {
						if t != nftaListElem {
							return nil
						}
						var name string
						var data []byte
						if err := nlAttrs(elem, func(t uint16, v []byte) error {
							switch t {
							case nftaExprName:
								name = string(bytes.TrimRight(v, "\x00"))
							case nftaExprData:
								data = v
							}
							return nil
						}); err != nil {
							return err
						}
						if name != "counter" || found {
							return nil
						}
						return nlAttrs(data, func(t uint16, v []byte) error {
							if t == nftaCounterPackets && len(v) == 8 {
								pk, found = binary.BigEndian.Uint64(v), true
							}
							return nil
						})
					})
				})
				if err != nil {
					return 0, nil, err
				}
				if !found {
					return 0, nil, fmt.Errorf("rule %d of %s %s has no counter", len(packets), table, chain)
				}
				packets = append(packets, pk)
			}
		}
	}
}
