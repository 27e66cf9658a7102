package kernelrules

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// nftParityCases are rulesets of every shape the reader knows, each as `nft
// -f` input of one family: the generator's layouts (DNAT and endpoint
// chains, with session affinity), long names (cut comments and endpoint
// chains), elements with counters, a thousand Services, and the real v1.37.2
// dumps.
func nftParityCases(t *testing.T) map[string]struct {
	text string
	ipv6 bool
} {
	t.Helper()
	cases := map[string]struct {
		text string
		ipv6 bool
	}{}
	for _, v6 := range []bool{false, true} {
		fam := famName(v6)
		cases["scenario dnat "+fam] = struct {
			text string
			ipv6 bool
		}{genNFTLayout(v6, scenario(v6), true), v6}
		cases["scenario endpoint chains "+fam] = struct {
			text string
			ipv6 bool
		}{genNFTLayout(v6, scenario(v6), false), v6}
		cases["long names "+fam] = struct {
			text string
			ipv6 bool
		}{genNFTLayout(v6, longNames(v6), true), v6}
		counted := strings.Replace(genNFTLayout(v6, scenario(v6), true),
			"\t\ttype inet_proto . inet_service : verdict\n", "\t\ttype inet_proto . inet_service : verdict\n\t\tcounter\n", 1)
		cases["element counters "+fam] = struct {
			text string
			ipv6 bool
		}{counted, v6}
		real, err := os.ReadFile(filepath.Join("testdata", "real-v1.37.2-nft-"+fam+".nft"))
		if err != nil {
			t.Fatal(err)
		}
		cases["real v1.37.2 "+fam] = struct {
			text string
			ipv6 bool
		}{string(real), v6}
	}
	// Maps and chains of a thousand Services: dumps of many datagrams.
	cases["1,000 Services ipv4"] = struct {
		text string
		ipv6 bool
	}{genNFTLayout(false, nftClusterOf(1000), true), false}
	cases["long endpoint chains ipv6"] = struct {
		text string
		ipv6 bool
	}{genNFTLayout(true, []genService{{
		ns: strings.Repeat("n", 63), name: strings.Repeat("s", 63), port: strings.Repeat("p", 63), proto: "tcp",
		clusterIP: "fd00:10:96::70", svcPort: 80, nodePort: 30170, etpLocal: true, affinity: true,
		eps: []genEndpoint{
			{ip: "fd00:1234:5678:9abc:def0:1234:5678:9a70", port: 38080, local: true},
			{ip: "fd00:1234:5678:9abc:def0:1234:5678:9a71", port: 38080, local: true},
			{ip: "fd00:1234:5678:9abc:def0:1234:5678:9b70", port: 38080},
		},
	}}, true), true}
	return cases
}

// relistInto reads the named objects of ns's table over netlink into m, as a
// read in part does.
func relistInto(t *testing.T, ns string, ipv6 bool, m *nftModel, names []objName) *nftRelist {
	t.Helper()
	c, err := dialNFT(context.Background(), ns, nftDumpBuffer)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	d := newNFTRelist(c, ipv6, m)
	if err := d.read(names); err != nil {
		t.Fatal(err)
	}
	d.apply(m)
	return d
}

// modelDiff spells how two models differ ("" when they do not).
func modelDiff(a, b *nftModel) string {
	var out []string
	if a.table != b.table || a.opaque != b.opaque {
		out = append(out, fmt.Sprintf("table %v/%v, opaque %v/%v", a.table, b.table, a.opaque, b.opaque))
	}
	for _, c := range slices.Sorted(maps.Keys(a.chains)) {
		if _, ok := b.chains[c]; !ok {
			out = append(out, "chain only in the first: "+c)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(b.chains)) {
		if _, ok := a.chains[c]; !ok {
			out = append(out, "chain only in the second: "+c)
		}
	}
	if !reflect.DeepEqual(a.local, b.local) {
		out = append(out, fmt.Sprintf("local chains:\n%v\n%v", a.local, b.local))
	}
	for i := range a.noEP {
		if !reflect.DeepEqual(a.noEP[i], b.noEP[i]) {
			out = append(out, fmt.Sprintf("no-endpoint map %d:\n%v\n%v", i, a.noEP[i], b.noEP[i]))
		}
	}
	for i := range a.dispatch {
		if !reflect.DeepEqual(a.dispatch[i], b.dispatch[i]) {
			out = append(out, fmt.Sprintf("dispatch map %d:\n%v\n%v", i, a.dispatch[i], b.dispatch[i]))
		}
	}
	return strings.Join(out, "\n")
}

// portsDiff spells how two families' states differ ("" when they do not).
func portsDiff(a, b map[portKey]*PortState) string {
	sa, sb := &Snapshot{}, &Snapshot{}
	sa.addFamily(FamilyIPv4, a)
	sb.addFamily(FamilyIPv4, b)
	sa.Families, sb.Families = []string{FamilyIPv4}, []string{FamilyIPv4}
	if !reflect.DeepEqual(a, b) {
		if d := snapshotDiff(sa, sb); d != "" {
			return d
		}
		return "the states differ (in what snapshotDiff leaves out)"
	}
	return ""
}

// TestNFTRelistEqualsListing: every object of each ruleset read over netlink,
// as a read in part reads the objects notifications name, makes the model a
// whole listing makes, and the same states. So does a read of the five maps
// alone into an empty model: every Service chain is found through what sends
// to it (kube-proxy's chains are never notified as created).
func TestNFTRelistEqualsListing(t *testing.T) {
	requireRoot(t)
	var seen struct{ local, drops, rejects, counted int }
	defer func() {
		if seen.local == 0 || seen.drops == 0 || seen.rejects == 0 || seen.counted == 0 {
			t.Errorf("the cases hold %+v: a shape went untested", seen)
		}
	}()
	for name, c := range nftParityCases(t) {
		t.Run(name, func(t *testing.T) {
			ns := newNetns(t)
			nsRun(t, ns, []byte(c.text), "nft", "-f", "-")
			fam := "ip"
			if c.ipv6 {
				fam = "ip6"
			}
			whole, err := parseNFTJSON(nsRun(t, ns, nil, "nft", "-j", "list", "table", fam, "kube-proxy"))
			if err != nil {
				t.Fatal(err)
			}
			if whole.model.opaque {
				t.Fatal("the listing's model is opaque: nothing would be read in part")
			}
			seen.local += len(whole.model.local)
			for i := range whole.model.noEP {
				for _, ne := range whole.model.noEP[i] {
					seen.drops += btoi(ne.drop)
					seen.rejects += btoi(ne.reject)
					seen.counted += btoi(ne.counted)
				}
			}
			var all, mapsOnly []objName
			for ch := range whole.model.chains {
				all = append(all, objName{table: "kube-proxy", name: ch})
			}
			for mp := range nftModelMaps {
				all = append(all, objName{table: "kube-proxy", set: true, name: mp})
				mapsOnly = append(mapsOnly, objName{table: "kube-proxy", set: true, name: mp})
			}
			for what, names := range map[string][]objName{"every object": all, "the maps": mapsOnly} {
				m := newNFTModel()
				m.table = true
				relistInto(t, ns, c.ipv6, m, names)
				if d := modelDiff(whole.model, m); d != "" {
					t.Errorf("%s read over netlink: the model differs from the listing's:\n%s", what, d)
				}
				if d := portsDiff(whole.ports, m.ports()); d != "" {
					t.Errorf("%s read over netlink: the states differ from the listing's:\n%s", what, d)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestNFTRelistMissing: an object that is gone reads as gone — a chain
// (an empty dump is also what a missing chain gives: it is asked for), a map
// — not as an error.
func TestNFTRelistMissing(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	svcs := scenario(false)
	nsRun(t, ns, []byte(genNFTLayout(false, svcs, true)), "nft", "-f", "-")
	whole, err := parseNFTJSON(nsRun(t, ns, nil, "nft", "-j", "list", "table", "ip", "kube-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	web := svcs[1]
	var local, external string
	for ch := range whole.model.chains {
		switch {
		case !strings.Contains(ch, "/"+web.name+"/"):
		case strings.HasPrefix(ch, "local-"):
			local = ch
		case strings.HasPrefix(ch, "external-"):
			external = ch
		}
	}
	if local == "" || external == "" {
		t.Fatal("web has no local or external chain")
	}
	m := whole.model
	// As kube-proxy leaves a chain no longer used: flushed (and nothing
	// jumping to it), deleted later.
	nsRun(t, ns, nil, "nft", "flush", "chain", "ip", "kube-proxy", external)
	nsRun(t, ns, nil, "nft", "flush", "chain", "ip", "kube-proxy", local)
	relistInto(t, ns, false, m, []objName{{table: "kube-proxy", name: local}, {table: "kube-proxy", name: external}})
	if _, ok := m.chains[local]; !ok {
		t.Errorf("a flushed chain read as gone")
	}
	if _, ok := m.local[local]; ok {
		t.Errorf("a flushed local chain kept its endpoints")
	}
	nsRun(t, ns, nil, "nft", "delete", "chain", "ip", "kube-proxy", local)
	nsRun(t, ns, nil, "nft", "flush", "chain", "ip", "kube-proxy", "firewall-check") // what refers to the map
	nsRun(t, ns, nil, "nft", "delete", "map", "ip", "kube-proxy", "firewall-ips")
	relistInto(t, ns, false, m, []objName{{table: "kube-proxy", name: local}, {table: "kube-proxy", set: true, name: "firewall-ips"}})
	if _, ok := m.chains[local]; ok {
		t.Errorf("a deleted chain read as present")
	}
	after, err := parseNFTJSON(nsRun(t, ns, nil, "nft", "-j", "list", "table", "ip", "kube-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	if d := portsDiff(after.ports, m.ports()); d != "" {
		t.Errorf("after the deletions the states differ from a listing's:\n%s", d)
	}
	// What nft itself answers for a chain that is not there: an error, which
	// a read of it must take for "gone".
	if _, err := nsExec(ns, nil, "nft", "-j", "list", "chain", "ip", "kube-proxy", local); err == nil || !strings.Contains(err.Error(), "No such file or directory") {
		t.Errorf("nft list chain of a missing chain: %v", err)
	}
}
