package kernelrules

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// kubeletMangle is what kubelet creates in mangle (the backend hint).
const kubeletMangle = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"

// nsState captures everything a read could change in a namespace: every table of
// both iptables backends and families, the nftables ruleset, and which legacy
// tables exist (a legacy save of a missing table would create it).
func nsState(t *testing.T, ns string) map[string]string {
	t.Helper()
	st := map[string]string{}
	for _, v6 := range []bool{false, true} {
		for _, b := range []Backend{BackendLegacy, BackendNFT} {
			cmd := xtablesCmd(v6, b, "save")
			if b == BackendLegacy && len(nsRun(t, ns, nil, "cat", legacyNamesFile(v6))) == 0 {
				// A bare legacy save of no table prints nothing and creates nothing.
				st[cmd] = ""
				continue
			}
			st[cmd] = stripComments(nsRun(t, ns, nil, cmd, "-c"))
		}
		st[legacyNamesFile(v6)] = string(nsRun(t, ns, nil, "cat", legacyNamesFile(v6)))
	}
	st["nft list ruleset"] = string(nsRun(t, ns, nil, "nft", "list", "ruleset"))
	return st
}

func legacyNamesFile(v6 bool) string {
	if v6 {
		return "/proc/net/ip6_tables_names"
	}
	return "/proc/net/ip_tables_names"
}

// stripComments drops "# Generated/Completed on <time>" lines only: counters
// stay, so the comparison is byte-exact on the rules and their counters.
func stripComments(b []byte) string {
	var out []byte
	for len(b) > 0 {
		line := b
		if i := indexByte(b, '\n'); i >= 0 {
			line, b = b[:i+1], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > 0 && line[0] == '#' {
			continue
		}
		out = append(out, line...)
	}
	return string(out)
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func compareState(t *testing.T, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed during the read:\nbefore:\n%s\nafter:\n%s", k, v, after[k])
		}
	}
}

// restoreBothFamilies loads gen's IPv4 and IPv6 rules with backend's restore
// (counters too) and kubelet's mangle hint chains.
func restoreBothFamilies(t *testing.T, ns string, backend Backend, gen func(v6 bool) string) {
	t.Helper()
	for _, v6 := range []bool{false, true} {
		nsRun(t, ns, []byte(gen(v6)), xtablesCmd(v6, backend, "restore"), "-c")
		nsRun(t, ns, []byte(kubeletMangle), xtablesCmd(v6, backend, "restore"), "--noflush")
	}
}

// readNS reads ns's rules once in auto mode.
func readNS(t *testing.T, ns string) *Snapshot {
	t.Helper()
	snap, err := NewReader(Options{Runner: NetnsRunner{Namespace: ns}}).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestIntegrationIPTables(t *testing.T) {
	requireRoot(t)
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%s", backend, l), func(t *testing.T) {
				ns := newNetns(t)
				restoreBothFamilies(t, ns, backend, func(v6 bool) string { return genRules(l, v6, scenario(v6)) })
				before := nsState(t, ns)
				// Auto mode without /proxyMode: tables decide, backend by hint.
				snap := readNS(t, ns)
				if snap.Mode != ModeIPTables || snap.Backend != backend || !slices.Equal(snap.Families, []string{FamilyIPv4, FamilyIPv6}) {
					t.Errorf("mode %s backend %s families %v", snap.Mode, snap.Backend, snap.Families)
				}
				// ip6tables-nft-restore 1.8.9 drops -c counters: IPv6 reads 0 there.
				checkFamily(t, snap, FamilyIPv4, layoutWant(l, backend, false))
				checkFamily(t, snap, FamilyIPv6, layoutWant(l, backend, true))
				compareState(t, before, nsState(t, ns))
			})
		}
	}
}

func TestIntegrationIPTablesIPv4Only(t *testing.T) {
	requireRoot(t)
	for _, backend := range []Backend{BackendLegacy, BackendNFT} {
		t.Run(string(backend), func(t *testing.T) {
			ns := newNetns(t)
			nsRun(t, ns, []byte(genRules(layout125, false, scenario(false))), xtablesCmd(false, backend, "restore"), "-c")
			nsRun(t, ns, []byte(kubeletMangle), xtablesCmd(false, backend, "restore"), "--noflush")
			before := nsState(t, ns)
			r := NewReader(Options{Mode: ModeIPTables, Runner: NetnsRunner{Namespace: ns}})
			snap, err := r.Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if snap.Backend != backend || !slices.Equal(snap.Families, []string{FamilyIPv4}) {
				t.Errorf("backend %s families %v", snap.Backend, snap.Families)
			}
			checkFamily(t, snap, FamilyIPv4, scenarioWant(layout125, false))
			compareState(t, before, nsState(t, ns))
		})
	}
}

func TestIntegrationNFTables(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	for _, v6 := range []bool{false, true} {
		nsRun(t, ns, []byte(genNFT(v6, scenario(v6))), "nft", "-f", "-")
	}
	before := nsState(t, ns)
	r := NewReader(Options{Runner: NetnsRunner{Namespace: ns}})
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Mode != ModeNFTables || !slices.Equal(snap.Families, []string{FamilyIPv4, FamilyIPv6}) {
		t.Errorf("mode %s families %v", snap.Mode, snap.Families)
	}
	checkFamily(t, snap, FamilyIPv4, nftWant(false))
	checkFamily(t, snap, FamilyIPv6, nftWant(true))
	compareState(t, before, nsState(t, ns))
}

func TestIntegrationNoRules(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	before := nsState(t, ns)
	r := NewReader(Options{Runner: NetnsRunner{Namespace: ns}})
	if snap, err := r.Read(context.Background()); err == nil {
		t.Fatalf("empty namespace read as %+v", snap)
	}
	compareState(t, before, nsState(t, ns))
}
