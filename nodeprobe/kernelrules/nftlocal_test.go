package kernelrules

import (
	"strings"
	"testing"
)

// nftLocalRule is one rule of a local-* chain as `nft -j` (1.0.6) prints what
// kube-proxy v1.37 writes; expr is the rule's "expr" array.
func nftLocalDoc(rules ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"nftables":[{"metainfo":{"version":"1.0.6","json_schema_version":1}},{"table":{"family":"ip","name":"kube-proxy","handle":1}}`)
	for _, r := range rules {
		b.WriteString(",")
		b.WriteString(r)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

func nftRuleJSON(chain, expr string) string {
	return `{"rule":{"family":"ip","table":"kube-proxy","chain":"` + chain + `","handle":3,"expr":` + expr + `}}`
}

func TestNFTLocalEndpointLayouts(t *testing.T) {
	const l4 = `{"match":{"op":"==","left":{"meta":{"key":"l4proto"}},"right":"tcp"}}`
	cases := []struct {
		name  string
		exprs []string
		want  int
	}{
		{"plain dnat, one endpoint", []string{`[` + l4 + `,{"dnat":{"addr":"10.180.2.1","port":80}}]`}, 1},
		{"plain dnat, IPv6", []string{`[` + l4 + `,{"dnat":{"addr":"fd00::1","port":80}}]`}, 1},
		{"numgen map, two endpoints", []string{`[` + l4 + `,{"dnat":{"family":"ip","addr":{"map":{"key":{"numgen":{"mode":"random","mod":2,"offset":0}},"data":{"set":[[0,{"concat":["10.180.2.1",80]}],[1,{"concat":["10.180.2.2",80]}]]}}}}}]`}, 2},
		{"numgen map, same address on two ports", []string{`[` + l4 + `,{"dnat":{"family":"ip","addr":{"map":{"key":{"numgen":{"mode":"random","mod":2,"offset":0}},"data":{"set":[[0,{"concat":["10.180.2.1",80]}],[1,{"concat":["10.180.2.1",81]}]]}}}}}]`}, 2},
		{"affinity: endpoint chains", []string{
			`[{"match":{"op":"==","left":{"payload":{"protocol":"ip","field":"saddr"}},"right":"@affinity-AAAA1111-ns/s/tcp/p__10.180.2.1/80"}},{"goto":{"target":"endpoint-AAAA1111-ns/s/tcp/p__10.180.2.1/80"}}]`,
			`[{"match":{"op":"==","left":{"payload":{"protocol":"ip","field":"saddr"}},"right":"@affinity-BBBB2222-ns/s/tcp/p__10.180.2.2/80"}},{"goto":{"target":"endpoint-BBBB2222-ns/s/tcp/p__10.180.2.2/80"}}]`,
			`[{"vmap":{"key":{"numgen":{"mode":"random","mod":2,"offset":0}},"data":{"set":[[0,{"goto":{"target":"endpoint-AAAA1111-ns/s/tcp/p__10.180.2.1/80"}}],[1,{"goto":{"target":"endpoint-BBBB2222-ns/s/tcp/p__10.180.2.2/80"}}]]}}}]`,
		}, 2},
	}
	sp := ServicePort{Namespace: "ns", Name: "s", Port: "p", Protocol: "TCP"}
	chain := "local-ABCDEFGH-ns/s/tcp/p"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rules []string
			for _, e := range c.exprs {
				rules = append(rules, nftRuleJSON(chain, e))
			}
			res, err := parseNFTJSON(nftLocalDoc(append([]string{`{"chain":{"family":"ip","table":"kube-proxy","name":"` + chain + `","handle":2}}`}, rules...)...))
			if err != nil {
				t.Fatal(err)
			}
			snap := &Snapshot{}
			snap.addFamily(FamilyIPv4, res.ports)
			if got := snap.Family(sp, FamilyIPv4); !got.Programmed || got.LocalEndpoints != c.want || got.Drop {
				t.Errorf("got %+v, want %d local endpoints", got, c.want)
			}
		})
	}
	// The cluster-policy service-* chain's DNAT is not local.
	res, err := parseNFTJSON(nftLocalDoc(nftRuleJSON("service-ABCDEFGH-ns/s/tcp/p", `[`+l4+`,{"dnat":{"addr":"10.180.9.9","port":80}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	snap := &Snapshot{}
	snap.addFamily(FamilyIPv4, res.ports)
	if got := snap.Family(sp, FamilyIPv4); got.LocalEndpoints != 0 {
		t.Errorf("service-* chain counted as local: %+v", got)
	}
}
