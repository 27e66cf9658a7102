package kernelrules

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestNFTNumericProtocol: nft prints a protocol number where the system's
// /etc/protocols lacks its name (a slim image): the elements' keys still
// decode, a drop is matched to its port through its dispatch entry and says
// its destination.
func TestNFTNumericProtocol(t *testing.T) {
	doc := nftLocalDoc(
		`{"map":{"family":"ip","name":"service-nodeports","table":"kube-proxy","elem":[[{"concat":[6,30090]},{"goto":{"target":"external-AAAAAAAA-ns/s/tcp/p"}}]]}}`,
		`{"map":{"family":"ip","name":"service-ips","table":"kube-proxy","elem":[[{"concat":["192.0.2.10",6,80]},{"goto":{"target":"external-AAAAAAAA-ns/s/tcp/p"}}]]}}`,
		`{"map":{"family":"ip","name":"no-endpoint-nodeports","table":"kube-proxy","elem":[[{"elem":{"val":{"concat":[6,30090]},"comment":"ns/s:p"}},{"drop":null}]]}}`,
		`{"map":{"family":"ip","name":"no-endpoint-services","table":"kube-proxy","elem":[[{"elem":{"val":{"concat":["192.0.2.10",6,80]},"comment":"ns/s:p"}},{"drop":null}]]}}`,
	)
	res, err := parseNFTJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	if res.model.opaque {
		t.Error("numeric protocols made the model opaque")
	}
	snap := &Snapshot{}
	snap.addFamily(FamilyIPv4, res.ports)
	want := PortState{Programmed: true, Drop: true, Drops: []DropRule{{Port: 30090}, {Address: "192.0.2.10", Port: 80}}}
	if got := snap.Family(ServicePort{Namespace: "ns", Name: "s", Port: "p", Protocol: "TCP"}, FamilyIPv4); !equalState(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestNFTOpaqueKeys: a key not in the shape of kube-proxy's maps (an
// interval, here) is kept as nft printed it and matched only to itself; the
// model is opaque (never read again in part).
func TestNFTOpaqueKeys(t *testing.T) {
	doc := nftLocalDoc(
		`{"map":{"family":"ip","name":"service-nodeports","table":"kube-proxy","elem":[[{"concat":["tcp",{"range":[30090,30091]}]},{"goto":{"target":"external-AAAAAAAA-ns/s/tcp/p"}}]]}}`,
		`{"map":{"family":"ip","name":"no-endpoint-nodeports","table":"kube-proxy","elem":[[{"elem":{"val":{"concat":["tcp",{"range":[30090,30091]}]},"comment":"ns/s:p"}},{"drop":null}]]}}`,
	)
	res, err := parseNFTJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !res.model.opaque {
		t.Error("an interval key: the model is not opaque")
	}
	snap := &Snapshot{}
	snap.addFamily(FamilyIPv4, res.ports)
	if got := snap.Family(ServicePort{Namespace: "ns", Name: "s", Port: "p", Protocol: "TCP"}, FamilyIPv4); !got.Drop || len(got.Drops) != 1 || got.Drops[0].Address != "" {
		t.Errorf("got %+v, want the drop matched through its dispatch entry's key", got)
	}
}

// FuzzNFTKey: the decoder of kube-proxy's plain keys, where it is sure, says
// what the JSON decoder says of the same text.
func FuzzNFTKey(f *testing.F) {
	for _, s := range []string{`{"concat":["10.96.0.1","tcp",80]}`, `{"concat":["fd00::1","sctp",3868]}`, `{"concat":[6,30090]}`,
		`{"concat":["tcp",30090]}`, `{"concat":["::ffff:1.2.3.4","udp",53]}`, `{"concat":["tcp",{"range":[1,2]}]}`,
		`{"concat":["1.2.3.4","icmp",0]}`, `{"concat":["1.2.3.4",256,80]}`, `{"concat":["fe80::1%eth0","tcp",80]}`, `"x"`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, withAddr bool) {
		k, ok, sure := nftKeyFromCompact(s, withAddr)
		if !sure {
			return
		}
		// The JSON decoder reads compact JSON; nft prints nothing else.
		var buf bytes.Buffer
		if json.Compact(&buf, []byte(s)) != nil || buf.String() != s {
			return
		}
		dk, dok := nftKeyDecode(s, withAddr)
		if ok != dok || (ok && k != dk) {
			t.Errorf("%q (address %v): %+v %v, the JSON decoder %+v %v", s, withAddr, k, ok, dk, dok)
		}
	})
}
