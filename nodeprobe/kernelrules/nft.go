package kernelrules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// nftResult is what `nft -j list table <family> kube-proxy` says: each
// Service port's state, and the model they were computed from, kept for a
// read of the objects that change later (nftrelist.go).
type nftResult struct {
	ports map[portKey]*PortState
	table bool // the kube-proxy table object was present
	model *nftModel
}

type nftObject struct {
	Table *struct {
		Family string `json:"family"`
		Name   string `json:"name"`
	} `json:"table"`
	Map   *nftMap   `json:"map"`
	Chain *nftChain `json:"chain"`
	Rule  *nftRule  `json:"rule"`
}

type nftMap struct {
	Name string              `json:"name"`
	Elem [][]json.RawMessage `json:"elem"`
}

type nftChain struct {
	Name string `json:"name"`
}

type nftRule struct {
	Chain string          `json:"chain"`
	Expr  json.RawMessage `json:"expr"`
}

// nftElemKey is a map element key that carries a comment or counter; keys
// without either are the bare value.
type nftElemKey struct {
	Elem *struct {
		Val     json.RawMessage `json:"val"`
		Comment string          `json:"comment"`
		Counter *struct {
			Packets uint64 `json:"packets"`
		} `json:"counter"`
	} `json:"elem"`
}

type nftVerdict struct {
	Drop *json.RawMessage `json:"drop"`
	Goto *struct {
		Target string `json:"target"`
	} `json:"goto"`
	Jump *struct {
		Target string `json:"target"`
	} `json:"jump"`
}

// nftVerdictOf reports what a vmap value does. A JSON null value ("drop": null)
// leaves the pointer nil, so drop is detected from the raw text.
func nftVerdictOf(raw json.RawMessage) (drop bool, target string, err error) {
	var v nftVerdict
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, "", err
	}
	if v.Goto != nil {
		return false, v.Goto.Target, nil
	}
	if v.Jump != nil {
		return false, v.Jump.Target, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err == nil {
		_, drop = m["drop"]
	}
	return drop, "", nil
}

// nftNoEndpoint is one element of no-endpoint-nodeports or
// no-endpoint-services (its key is the model's map key).
type nftNoEndpoint struct {
	comment string
	proto   string
	addr    string // canonical destination address; "" in no-endpoint-nodeports
	port    int32
	drop    bool
	reject  bool
	packets uint64
	counted bool // the element carries a counter (kube-proxy puts none)
}

// parseNFTJSON reads `nft -j list table ip|ip6 kube-proxy`. Output it cannot read
// is an error.
func parseNFTJSON(data []byte) (*nftResult, error) {
	return parseNFTJSONFrom(bytes.NewReader(data))
}

// parseNFTJSONFrom is parseNFTJSON on a stream: the objects of the nftables
// array are decoded one at a time, so the listing is never held whole (the
// biggest object, the service-ips map, is one element per Service port).
func parseNFTJSONFrom(r io.Reader) (*nftResult, error) {
	p := &nftParse{model: newNFTModel(), local: map[string]*nftLocalAcc{}}
	dec := json.NewDecoder(r)
	if err := nftDelim(dec, '{'); err != nil {
		return nil, err
	}
	array := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("decoding nft JSON: %w", err)
		}
		if tok != "nftables" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("decoding nft JSON: %w", err)
			}
			continue
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return nil, fmt.Errorf("nft JSON without an nftables array")
		}
		array = true
		for dec.More() {
			var o nftObject
			if err := dec.Decode(&o); err != nil {
				return nil, fmt.Errorf("decoding nft JSON: %w", err)
			}
			if err := p.object(o); err != nil {
				return nil, err
			}
		}
		if err := nftDelim(dec, ']'); err != nil {
			return nil, err
		}
	}
	if err := nftDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decoding nft JSON: data after the document")
	}
	if !array {
		return nil, fmt.Errorf("nft JSON without an nftables array")
	}
	m := p.model
	if !m.table {
		return nil, fmt.Errorf("nft JSON has no kube-proxy table")
	}
	for chain, acc := range p.local {
		m.setLocal(chain, acc.port, acc.set, acc.rules)
	}
	return &nftResult{ports: m.ports(), table: true, model: m}, nil
}

// nftCommentMax is the longest comment nftables keeps (NFTNL_UDATA_COMMENT_MAXLEN, knftables.CommentLengthMax):
// kube-proxy truncates longer ones to it.
const nftCommentMax = 128

// nftParse is what parseNFTJSONFrom gathers across the listing's objects.
type nftParse struct {
	model *nftModel
	local map[string]*nftLocalAcc // the local-* chains' rules so far
}

// nftLocalAcc is what the rules of one local-* chain listed so far send to.
type nftLocalAcc struct {
	port  portKey
	set   map[Endpoint]bool
	rules int
}

func nftDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decoding nft JSON: %w", err)
	}
	if tok != want {
		return fmt.Errorf("decoding nft JSON: %v where %v was expected", tok, want)
	}
	return nil
}

// object takes one object of the nftables array.
func (p *nftParse) object(o nftObject) error {
	m := p.model
	switch {
	case o.Table != nil:
		if o.Table.Name == "kube-proxy" {
			m.table = true
		}
	case o.Map != nil:
		mp, ok := nftModelMaps[o.Map.Name]
		if !ok {
			return nil
		}
		for i, e := range o.Map.Elem {
			if mp.noEP {
				ne, compact, err := nftNoEndpointElem(e)
				if err != nil {
					return fmt.Errorf("map %s element %d: %w", o.Map.Name, i, err)
				}
				m.noEP[mp.index][p.key(compact, mp.withAddr, &ne)] = ne
				continue
			}
			if len(e) != 2 {
				return fmt.Errorf("map %s element %d: %d parts, want key and verdict", o.Map.Name, i, len(e))
			}
			val, _, _, err := nftElemVal(e[0])
			if err != nil {
				return fmt.Errorf("map %s element %d: %w", o.Map.Name, i, err)
			}
			_, target, err := nftVerdictOf(e[1])
			if err != nil {
				return fmt.Errorf("map %s element %d: %w", o.Map.Name, i, err)
			}
			key := p.key(val, mp.withAddr, nil)
			// Only external traffic's entries: a cluster IP's lead to service-* or local-*.
			if prefix, k, ok := nftServiceChain(target); ok && prefix == "external-" && mp.index >= 0 {
				m.dispatch[mp.index][key] = k
			}
		}
	case o.Chain != nil:
		if _, k, ok := nftServiceChain(o.Chain.Name); ok {
			m.chains[o.Chain.Name] = k
		}
	case o.Rule != nil:
		prefix, k, ok := nftServiceChain(o.Rule.Chain)
		if !ok || prefix != "local-" {
			return nil
		}
		var expr any
		if err := json.Unmarshal(o.Rule.Expr, &expr); err != nil {
			return fmt.Errorf("rule in %s: %w", o.Rule.Chain, err)
		}
		acc := p.local[o.Rule.Chain]
		if acc == nil {
			acc = &nftLocalAcc{port: k, set: map[Endpoint]bool{}}
			p.local[o.Rule.Chain] = acc
		}
		acc.rules++
		collectEndpointTargets(expr, acc.set)
	}
	return nil
}

// key is a listed element's key in the model. One not in the shape of
// kube-proxy's maps is kept as its JSON and makes the model opaque; a
// no-endpoint element (ne) then says of its destination what its key's parts
// spell (nftNoEndpointDest), else what the decoded key says.
func (p *nftParse) key(compact string, withAddr bool, ne *nftNoEndpoint) nftKey {
	k, ok := nftKeyFromJSON(compact, withAddr)
	if !ok {
		p.model.opaque = true
		if ne != nil {
			nftNoEndpointDest(compact, ne)
		}
		return nftKey{raw: compact}
	}
	if ne != nil {
		k.fill(ne)
	}
	return k
}

// nftElemVal returns the compact key value, its comment and counter packets.
func nftElemVal(raw json.RawMessage) (val, comment string, packets uint64, err error) {
	val, comment, packets, _, err = nftElemValCounted(raw)
	return val, comment, packets, err
}

func nftElemValCounted(raw json.RawMessage) (val, comment string, packets uint64, counted bool, err error) {
	var k nftElemKey
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		if err := json.Unmarshal(raw, &k); err != nil {
			return "", "", 0, false, err
		}
	}
	if k.Elem != nil {
		raw = k.Elem.Val
		comment = k.Elem.Comment
		if k.Elem.Counter != nil {
			packets, counted = k.Elem.Counter.Packets, true
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", "", 0, false, err
	}
	return buf.String(), comment, packets, counted, nil
}

// nftNoEndpointElem reads one no-endpoint element: what it does, its comment
// and counter, and its key (compact JSON), which nftParse.key decodes.
func nftNoEndpointElem(e []json.RawMessage) (ne nftNoEndpoint, key string, err error) {
	if len(e) != 2 {
		return ne, "", fmt.Errorf("%d parts, want key and verdict", len(e))
	}
	key, ne.comment, ne.packets, ne.counted, err = nftElemValCounted(e[0])
	if err != nil {
		return ne, "", err
	}
	drop, target, err := nftVerdictOf(e[1])
	if err != nil {
		return ne, "", err
	}
	ne.drop = drop
	ne.reject = target == "reject-chain"
	return ne, key, nil
}

// nftNoEndpointDest reads the destination of a key not in the shape of
// kube-proxy's maps from its parts: the protocol is the part that names one,
// the port the number after it, the address the part before it (keys are
// "proto . port" in no-endpoint-nodeports, "addr . proto . port" in
// no-endpoint-services).
func nftNoEndpointDest(compact string, ne *nftNoEndpoint) {
	var key struct {
		Concat []json.RawMessage `json:"concat"`
	}
	if json.Unmarshal([]byte(compact), &key) != nil {
		return
	}
	for i, p := range key.Concat {
		var s string
		if json.Unmarshal(p, &s) != nil || (s != "tcp" && s != "udp" && s != "sctp") {
			continue
		}
		ne.proto = s
		if i+1 < len(key.Concat) {
			var port uint16
			if json.Unmarshal(key.Concat[i+1], &port) == nil {
				ne.port = int32(port)
			}
		}
		if i > 0 {
			var a string
			if json.Unmarshal(key.Concat[i-1], &a) == nil {
				if addr, err := netip.ParseAddr(a); err == nil {
					ne.addr = addr.String()
				} else {
					ne.addr = a // not an address nft would print; kept as written
				}
			}
		}
	}
}

// nftServiceChain parses "<prefix><HASH8>-<ns>/<name>/<proto>/<port>" chain names
// (kube-proxy's servicePortChainNameBase) into the iptables-style key.
func nftServiceChain(name string) (prefix string, k portKey, ok bool) {
	for _, p := range []string{"service-", "external-", "local-", "firewall-"} {
		if strings.HasPrefix(name, p) {
			prefix = p
			break
		}
	}
	if prefix == "" {
		return "", k, false
	}
	rest := name[len(prefix):]
	if len(rest) < 10 || rest[8] != '-' {
		return "", k, false
	}
	// "ns/name/proto/port", cut without allocating: every chain, rule and dispatch entry of the table
	// comes through here.
	ns, rest, _ := strings.Cut(rest[9:], "/")
	svc, rest, _ := strings.Cut(rest, "/")
	proto, port, found := strings.Cut(rest, "/")
	if !found || ns == "" || svc == "" || strings.IndexByte(port, '/') >= 0 {
		return "", k, false
	}
	switch proto {
	case "tcp", "udp", "sctp":
	default:
		return "", k, false
	}
	return prefix, spKey(ServicePort{Namespace: ns, Name: svc, Port: port, Protocol: proto}, ""), true
}

// collectEndpointTargets adds, to set, every endpoint a local-* chain rule sends
// traffic to, in each layout kube-proxy writes (v1.37 writeServiceToEndpointDNATs
// and writeServiceToEndpointJumps in pkg/proxy/nftables/proxier.go):
//   - without session affinity, one endpoint: "dnat to 10.180.2.1:80"
//     (JSON {"dnat":{"addr":"10.180.2.1","port":80}});
//   - without session affinity, several: "dnat ip addr . port to numgen random mod N
//     map { 0 : 10.180.2.1 . 80, ... }" (JSON addr {"map":{"data":{"set":[[0,{"concat":[ip,port]}],...]}}});
//   - with session affinity (and releases before the DNAT layout): goto/jump to
//     endpoint-* chains, from "ip saddr @affinity-… goto endpoint-…" rules and a
//     "numgen random mod N vmap { 0 : goto endpoint-…, ... }"; the chain's name
//     spells the endpoint ("endpoint-<h>-ns/name/tcp/port__10.180.2.1/80").
//
// Endpoints are kept by identity (nftEndpointChain, addrEndpoint), so the affinity
// rule and the vmap entry for one endpoint count once.
func collectEndpointTargets(v any, set map[Endpoint]bool) {
	switch x := v.(type) {
	case map[string]any:
		for key, val := range x {
			switch key {
			case "goto", "jump":
				if m, ok := val.(map[string]any); ok {
					if t, ok := m["target"].(string); ok && strings.HasPrefix(t, "endpoint-") {
						if e, ok := nftEndpointChain(t); ok {
							set[e] = true
						}
						continue
					}
				}
			case "dnat":
				if m, ok := val.(map[string]any); ok && collectDNATTargets(m, set) {
					continue
				}
			}
			collectEndpointTargets(val, set)
		}
	case []any:
		for _, e := range x {
			collectEndpointTargets(e, set)
		}
	}
}

// collectDNATTargets adds the endpoints of one dnat statement; false when its
// shape is not one kube-proxy writes (then nothing is added).
func collectDNATTargets(m map[string]any, set map[Endpoint]bool) bool {
	switch addr := m["addr"].(type) {
	case string:
		// "dnat to ip:port". A dnat without a port keeps the packet's port.
		e, ok := addrEndpoint(addr, jsonScalar(m["port"]))
		if ok {
			set[e] = true
		}
		return ok
	case map[string]any:
		mp, ok := addr["map"].(map[string]any)
		if !ok {
			return false
		}
		data, ok := mp["data"].(map[string]any)
		if !ok {
			return false
		}
		elems, ok := data["set"].([]any)
		if !ok {
			return false
		}
		n := 0
		for _, e := range elems {
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				continue
			}
			var ep Endpoint
			switch target := pair[1].(type) {
			case map[string]any: // {"concat": [ip, port]}
				parts, ok := target["concat"].([]any)
				if !ok || len(parts) != 2 {
					continue
				}
				ip, ok := parts[0].(string)
				if !ok {
					continue
				}
				if ep, ok = addrEndpoint(ip, jsonScalar(parts[1])); !ok {
					continue
				}
			case string: // "dnat to numgen ... map { 0 : ip }": address only
				if ep, ok = addrEndpoint(target, ""); !ok {
					continue
				}
			default:
				continue
			}
			set[ep] = true
			n++
		}
		return n > 0
	}
	return false
}

// jsonScalar spells a decoded JSON number or string; "" for anything else.
func jsonScalar(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		return x
	}
	return ""
}
