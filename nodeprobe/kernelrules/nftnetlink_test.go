package kernelrules

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftPayload encodes nf_tables attributes (network byte order) after an nfgenmsg:
// a NEWGEN or NEWRULE message's payload as the kernel sends it.
func nftPayload(tb testing.TB, fill func(*netlink.AttributeEncoder)) []byte {
	tb.Helper()
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	fill(ae)
	b, err := ae.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return append(nfgenmsg(unix.NFPROTO_IPV4), b...)
}

// nftExpr fills one expression (a list element of NFTA_RULE_EXPRESSIONS).
type nftExpr func(*netlink.AttributeEncoder)

func exprNamed(name string, data func(*netlink.AttributeEncoder)) nftExpr {
	return func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_EXPR_NAME, name)
		ae.Nested(unix.NFTA_EXPR_DATA, func(d *netlink.AttributeEncoder) error { data(d); return nil })
	}
}

// exprCounterOf is a counter expression as the kernel dumps it: bytes, then packets.
func exprCounterOf(packets uint64) nftExpr {
	return exprNamed("counter", func(d *netlink.AttributeEncoder) {
		d.Uint64(unix.NFTA_COUNTER_BYTES, packets*60)
		d.Uint64(unix.NFTA_COUNTER_PACKETS, packets)
	})
}

// exprOther is any other expression (payload, cmp, immediate, an xt match): data the parse skips.
func exprOther(name string) nftExpr {
	return exprNamed(name, func(d *netlink.AttributeEncoder) { d.Uint32(1, 7); d.Bytes(2, []byte("KUBE-FW")) })
}

// nftRulePayload is a NEWRULE payload of table filter, chain
// KUBE-EXTERNAL-SERVICES with these expressions.
func nftRulePayload(tb testing.TB, exprs ...nftExpr) []byte {
	return nftPayload(tb, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_RULE_TABLE, "filter")
		ae.String(unix.NFTA_RULE_CHAIN, "KUBE-EXTERNAL-SERVICES")
		ae.Uint64(unix.NFTA_RULE_HANDLE, 17)
		ae.Nested(unix.NFTA_RULE_EXPRESSIONS, func(list *netlink.AttributeEncoder) error {
			for _, e := range exprs {
				list.Nested(unix.NFTA_LIST_ELEM, func(x *netlink.AttributeEncoder) error { e(x); return nil })
			}
			return nil
		})
	})
}

// nftNetlinkShape is one shape of a NEWGEN or NEWRULE payload and what the parse must say.
type nftNetlinkShape struct {
	name    string
	gen     bool // a NEWGEN payload (parseGen), else NEWRULE (parseRuleCounter)
	data    []byte
	want    uint64 // the generation or the packets
	found   bool   // NEWRULE: a counter was found
	wantErr bool
}

// nftNetlinkShapes are small payloads, one per shape: the table test's cases and the fuzz seeds.
func nftNetlinkShapes(tb testing.TB) []nftNetlinkShape {
	counted := nftRulePayload(tb, exprCounterOf(3))
	genID := func(ae *netlink.AttributeEncoder) { ae.Uint32(unix.NFTA_GEN_ID, 0x01020304) }
	return []nftNetlinkShape{
		{name: "gen id", gen: true, data: nftPayload(tb, genID), want: 0x01020304},
		{name: "gen id, pid, process", gen: true, data: nftPayload(tb, func(ae *netlink.AttributeEncoder) {
			genID(ae)
			ae.Uint32(unix.NFTA_GEN_PROC_PID, 4242)
			ae.String(unix.NFTA_GEN_PROC_NAME, "iptables-nft-re")
		}), want: 0x01020304},
		{name: "gen without id", gen: true, data: nftPayload(tb, func(ae *netlink.AttributeEncoder) {
			ae.Uint32(unix.NFTA_GEN_PROC_PID, 4242)
		}), wantErr: true},
		{name: "gen id of two bytes", gen: true, data: nftPayload(tb, func(ae *netlink.AttributeEncoder) {
			ae.Uint16(unix.NFTA_GEN_ID, 7)
		}), wantErr: true},
		{name: "gen shorter than nfgenmsg", gen: true, data: []byte{0, 0}, wantErr: true},
		{name: "counter only", data: counted, want: 3, found: true},
		{name: "counter between match and verdict", data: nftRulePayload(tb,
			exprOther("payload"), exprOther("cmp"), exprOther("match"), exprCounterOf(0x0102030405060708), exprOther("immediate")),
			want: 0x0102030405060708, found: true},
		{name: "counter's data before its name", data: nftRulePayload(tb, func(ae *netlink.AttributeEncoder) {
			ae.Nested(unix.NFTA_EXPR_DATA, func(d *netlink.AttributeEncoder) error { d.Uint64(unix.NFTA_COUNTER_PACKETS, 9); return nil })
			ae.String(unix.NFTA_EXPR_NAME, "counter")
		}), want: 9, found: true},
		{name: "first of two counters", data: nftRulePayload(tb, exprCounterOf(1), exprCounterOf(2)), want: 1, found: true},
		{name: "no counter", data: nftRulePayload(tb, exprOther("immediate"))},
		{name: "no expressions", data: nftRulePayload(tb)},
		{name: "counter without packets", data: nftRulePayload(tb, exprNamed("counter", func(d *netlink.AttributeEncoder) {
			d.Uint64(unix.NFTA_COUNTER_BYTES, 60)
		}))},
		{name: "packets of four bytes", data: nftRulePayload(tb, exprNamed("counter", func(d *netlink.AttributeEncoder) {
			d.Uint32(unix.NFTA_COUNTER_PACKETS, 5)
		})), wantErr: true},
		{name: "rule cut inside an attribute", data: counted[:len(counted)-4], wantErr: true},
		{name: "rule shorter than nfgenmsg", data: []byte{2}, wantErr: true},
	}
}

// parseRuleCounter is ruleCounter on a whole NEWRULE payload (nfgenmsg first),
// as the dump hands it over.
func parseRuleCounter(data []byte) (packets uint64, found bool, err error) {
	if len(data) < nfgenmsgLen {
		return 0, false, fmt.Errorf("NEWRULE of %d bytes", len(data))
	}
	return ruleCounter(data[nfgenmsgLen:])
}

func TestParseNFTNetlink(t *testing.T) {
	for _, c := range nftNetlinkShapes(t) {
		t.Run(c.name, func(t *testing.T) {
			if c.gen {
				gen, err := parseGen(c.data)
				if (err != nil) != c.wantErr || uint64(gen) != c.want {
					t.Errorf("parseGen: %d, %v; want %d, error %v", gen, err, c.want, c.wantErr)
				}
				return
			}
			pk, found, err := parseRuleCounter(c.data)
			if (err != nil) != c.wantErr || pk != c.want || found != c.found {
				t.Errorf("parseRuleCounter: %d, found %v, %v; want %d, found %v, error %v", pk, found, err, c.want, c.found, c.wantErr)
			}
		})
	}
}

// FuzzParseNFTNetlink: any payload, read as a NEWGEN and as a NEWRULE, is
// parsed without a panic, and an error never comes with a value.
func FuzzParseNFTNetlink(f *testing.F) {
	for _, c := range nftNetlinkShapes(f) {
		f.Add(c.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if gen, err := parseGen(data); err != nil && gen != 0 {
			t.Errorf("parseGen: generation %d with error %v", gen, err)
		}
		if pk, found, err := parseRuleCounter(data); err != nil && (found || pk != 0) {
			t.Errorf("parseRuleCounter: %d packets, found %v, with error %v", pk, found, err)
		} else if !found && pk != 0 {
			t.Errorf("parseRuleCounter: %d packets without a counter", pk)
		}
	})
}

// packetsOf is the packets of each dumped rule, in the dump's order.
func packetsOf(rules []ChainRule) []uint64 {
	out := make([]uint64, len(rules))
	for i, r := range rules {
		out[i] = r.Packets
	}
	return out
}

// TestNFTablesChainRules: on the real kernel, a chain's rules' counters come
// back in the chain's order with the generation they belong to, through both
// runners; a rule without a counter is an error, and a missing chain has no rules.
func TestNFTablesChainRules(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	nsRun(t, ns, []byte(`
table ip ltest {
	chain c {
		counter packets 5 bytes 300 accept
		ip saddr 192.0.2.1 counter packets 7 bytes 420 drop
		counter packets 0 bytes 0 return
	}
	chain nocounter {
		accept
	}
}
table ip6 ltest {
	chain c {
		counter packets 11 bytes 660 accept
	}
}
`), "nft", "-f", "-")
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cs   ChangeSignals
		run  func(func() error) error
	}{
		{"ExecRunner", ExecRunner{}, func(fn func() error) error { return inNetns(ns, fn) }},
		{"NetnsRunner", NetnsRunner{Namespace: ns}, func(fn func() error) error { return fn() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var gen, gen4, gen6 uint32
			var v4, v6, missing []ChainRule
			var noCounter error
			err := c.run(func() error {
				var err error
				if gen, err = c.cs.NFTablesGeneration(ctx); err != nil {
					return err
				}
				if gen4, v4, err = c.cs.NFTablesChainRules(ctx, false, "ltest", "c"); err != nil {
					return err
				}
				if gen6, v6, err = c.cs.NFTablesChainRules(ctx, true, "ltest", "c"); err != nil {
					return err
				}
				if _, missing, err = c.cs.NFTablesChainRules(ctx, false, "ltest", "absent"); err != nil {
					return err
				}
				_, _, noCounter = c.cs.NFTablesChainRules(ctx, false, "ltest", "nocounter")
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if gen4 != gen || gen6 != gen {
				t.Errorf("generations %d (ip) and %d (ip6), the ruleset's is %d", gen4, gen6, gen)
			}
			if !slices.Equal(packetsOf(v4), []uint64{5, 7, 0}) || !slices.Equal(packetsOf(v6), []uint64{11}) {
				t.Errorf("counters ip %v, ip6 %v; want [5 7 0] and [11]", packetsOf(v4), packetsOf(v6))
			}
			if len(missing) != 0 {
				t.Errorf("a chain that does not exist: %v", missing)
			}
			if noCounter == nil || !strings.Contains(noCounter.Error(), "rule 0 of ltest nocounter has no counter") {
				t.Errorf("a rule without a counter: %v", noCounter)
			}
		})
	}
}

// TestNFTablesReceiveBounded: a netlink receive ends at the context's deadline,
// at once when the context is cancelled, and at the 2 s cap without either. The
// kernel answers nothing to a message without NLM_F_REQUEST, so the receive
// waits for an answer that never comes.
func TestNFTablesReceiveBounded(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	silent := netlink.Message{Header: netlink.Header{Type: nftGetGen}, Data: nfgenmsg(unix.AF_UNSPEC)}
	receive := func(ctx context.Context) (time.Duration, error) {
		t.Helper()
		c, err := dialNFT(ctx, ns, nftAnswerBuffer)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		start := time.Now()
		msgs, err := c.execute("silent request", silent)
		if err == nil {
			t.Fatalf("the kernel answered a message without NLM_F_REQUEST (%d messages): the test proves nothing", len(msgs))
		}
		return time.Since(start), err
	}
	// "At once" and "at the deadline" mean well before the cap: the receive
	// that ignored the context would end only there.
	early := nftReceiveCap / 2

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	took, err := receive(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, os.ErrDeadlineExceeded) || took >= early {
		t.Errorf("context deadline 100 ms: %v after %v; want the context's deadline, well before the %v cap", err, took, nftReceiveCap)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	took, err = receive(ctx)
	if !errors.Is(err, context.Canceled) || took >= early {
		t.Errorf("context cancelled after 100 ms: %v after %v; want the cancellation, well before the %v cap", err, took, nftReceiveCap)
	}

	took, err = receive(context.Background())
	if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || took < early {
		t.Errorf("no deadline: %v after %v; want the %v cap", err, took, nftReceiveCap)
	}
}
