package kernelrules

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
)

// iptablesResult is what one or more iptables-save outputs of one family say.
type iptablesResult struct {
	ports map[portKey]*PortState
	// endpoints holds the local endpoints' Endpoints while parsing.
	endpoints epArena

	kubeServices bool // nat KUBE-SERVICES exists: kube-proxy (iptables or IPVS) programs this family
	ipvsChains   bool // chains only IPVS mode creates (KUBE-LOAD-BALANCER, KUBE-NODE-PORT)
	hintChains   bool // KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY / KUBE-PROXY-CANARY declared
	rules        int  // all rules
	kubeRules    int  // rules in KUBE-* chains (the wrapper's backend vote)

	// extRules counts filter KUBE-EXTERNAL-SERVICES rules in order; extDrops
	// says which of them are drop rules, and where each one's counter went, so
	// fresh counters of that chain can replace the saved ones.
	extRules int
	extDrops []extDrop
	// extIDs and fwIDs are what each rule of KUBE-EXTERNAL-SERVICES and
	// KUBE-PROXY-FIREWALL spells of itself, in order: how a netlink dump's
	// rules are told apart when they come in another order (counterkeys.go).
	extIDs []ruleIdentity
	fwIDs  []ruleIdentity
	// fwRules counts filter KUBE-PROXY-FIREWALL rules in order; fwDrops are its
	// per-destination DROP rules (loadBalancerSourceRanges).
	fwRules int
	fwDrops []fwDrop
}

// extDrop ties the rule-th rule of KUBE-EXTERNAL-SERVICES to the drop-th entry
// of its port's Drops (in parse order, before sorting).
type extDrop struct {
	rule int
	key  portKey
	drop int
	raw  uint64 // the rule's own packet counter
	fw   int    // index in fwDrops of the firewall rule for the same destination; -1 for none
}

// fwDrop is one "<ns/name:port> traffic not accepted by KUBE-FW-<h>" DROP of
// KUBE-PROXY-FIREWALL: the load balancer IP and port of a Service with
// loadBalancerSourceRanges.
type fwDrop struct {
	rule    int // its index in KUBE-PROXY-FIREWALL
	key     portKey
	address string
	port    int32
	packets uint64
}

func newIPTablesResult() *iptablesResult {
	return &iptablesResult{ports: map[portKey]*PortState{}}
}

// Chain-name prefixes kube-proxy derives from the Service-port hash.
var (
	prefixSVC  = []byte("KUBE-SVC-")
	prefixSVL  = []byte("KUBE-SVL-")
	prefixEXT  = []byte("KUBE-EXT-")
	prefixFW   = []byte("KUBE-FW-")
	prefixXLB  = []byte("KUBE-XLB-")
	prefixSEP  = []byte("KUBE-SEP-")
	prefixKUBE = []byte("KUBE-")

	chainExternalServices = []byte("KUBE-EXTERNAL-SERVICES")
	chainProxyFirewall    = []byte("KUBE-PROXY-FIREWALL")
	chainServices         = []byte("KUBE-SERVICES")
	chainMarkDrop         = []byte("KUBE-MARK-DROP")

	suffixNoLocal    = []byte(" has no local endpoints")
	suffixNoEPs      = []byte(" has no endpoints")
	infixNotAccepted = []byte(" traffic not accepted by KUBE-FW-")
)

// parseIPTablesSave reads `iptables-save [-c]` output (any tables, either argument
// order) into res. Output it cannot read is an error: a truncated or garbled
// ruleset must never be taken for "no drop rule".
func parseIPTablesSave(data []byte, res *iptablesResult) error {
	return parseIPTablesSaveFrom(bytes.NewReader(data), res)
}

// maxSaveLine bounds one line of a save: kube-proxy's longest rules are a few
// hundred bytes; a line past this is garbage, not a rule.
const maxSaveLine = 1 << 20

// parseIPTablesSaveFrom is parseIPTablesSave on a stream, one line at a time
// through a 64 KiB buffer: a save of 100,000 rules is parsed without ever being
// held whole (nothing parsed keeps a reference into the buffer).
func parseIPTablesSaveFrom(r io.Reader, res *iptablesResult) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var table, long []byte
	inTable := false
	lineNo := 0
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxSaveLine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			if len(long) > maxSaveLine {
				return fmt.Errorf("line %d: longer than %d bytes", lineNo+1, maxSaveLine)
			}
			line = long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading line %d: %w", lineNo+1, err)
		}
		if len(line) == 0 && err != nil {
			break
		}
		lineNo++
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > 0 {
			switch line[0] {
			case '#':
			case '*':
				if inTable {
					return fmt.Errorf("line %d: table %q starts before table %q was committed", lineNo, line[1:], table)
				}
				table, inTable = append(table[:0], line[1:]...), true
				if len(table) == 0 {
					return fmt.Errorf("line %d: empty table name", lineNo)
				}
			case ':':
				if !inTable {
					return fmt.Errorf("line %d: chain outside a table", lineNo)
				}
				name, _, _ := bytes.Cut(line[1:], []byte(" "))
				if len(name) == 0 {
					return fmt.Errorf("line %d: empty chain name", lineNo)
				}
				res.chain(table, name)
			case 'C':
				if !bytes.Equal(line, []byte("COMMIT")) {
					return fmt.Errorf("line %d: unexpected %q", lineNo, clip(line))
				}
				if !inTable {
					return fmt.Errorf("line %d: COMMIT outside a table", lineNo)
				}
				inTable = false
			case '[', '-':
				if !inTable {
					return fmt.Errorf("line %d: rule outside a table", lineNo)
				}
				if err := res.rule(table, line); err != nil {
					return fmt.Errorf("line %d: %w", lineNo, err)
				}
			default:
				return fmt.Errorf("line %d: unexpected %q", lineNo, clip(line))
			}
		}
		if err != nil { // io.EOF after the last line
			break
		}
	}
	if inTable {
		return fmt.Errorf("table %q not committed (truncated output?)", table)
	}
	res.finish()
	return nil
}

// finish completes a parse: each state's Endpoints sorted, and the firewall's
// counters given to the drop rules they belong to (countFirewall).
func (res *iptablesResult) finish() {
	sortEndpoints(res.ports)
	res.linkFirewall()
	if res.firewallLinked() {
		res.applyCounters(nil, nil)
	}
}

// linkFirewall ties each address drop of KUBE-EXTERNAL-SERVICES to the
// KUBE-PROXY-FIREWALL DROP of the same Service port and destination, if any.
//
// With loadBalancerSourceRanges, kube-proxy (≥1.25) sends a load balancer IP's
// traffic through nat KUBE-FW-<h>: allowed sources go on to KUBE-EXT-<h>,
// others fall off the chain un-DNATed. Filter's KUBE-PROXY-FIREWALL, which
// kube-proxy puts first in INPUT and FORWARD, drops every new connection to the
// address that was not DNATed. Without a local endpoint KUBE-EXT-<h> has
// nowhere to send the allowed ones either, so the firewall drops them before
// KUBE-EXTERNAL-SERVICES' "has no local endpoints" rule for the same address
// ever sees them: on such a node the firewall rule's counter is where the
// port's dropped traffic is counted. It counts refused sources too, which the
// node would drop with a local endpoint as well; for the port's drop counter
// both mean the same: traffic arrives at a node that drops it.
func (res *iptablesResult) linkFirewall() {
	if len(res.fwDrops) == 0 {
		return
	}
	type dest struct {
		key     portKey
		address string
		port    int32
	}
	fw := make(map[dest]int, len(res.fwDrops))
	for i, f := range res.fwDrops {
		fw[dest{f.key, f.address, f.port}] = i
	}
	for i := range res.extDrops {
		d := &res.extDrops[i]
		rule := res.ports[d.key].Drops[d.drop]
		d.fw = -1
		if j, ok := fw[dest{d.key, rule.Address, rule.Port}]; ok && rule.Address != "" {
			d.fw = j
		}
	}
}

// firewallLinked: some drop rule's count includes a KUBE-PROXY-FIREWALL rule's.
func (res *iptablesResult) firewallLinked() bool {
	for _, d := range res.extDrops {
		if d.fw >= 0 {
			return true
		}
	}
	return false
}

// applyCounters sets each KUBE-EXTERNAL-SERVICES drop rule's Packets to its
// own counter plus its firewall rule's, keeping DropPackets their sum. ext and
// fw, when given, are fresh counters of the two chains (by rule index);
// otherwise the parsed ones are used.
func (res *iptablesResult) applyCounters(ext, fw []uint64) {
	for _, d := range res.extDrops {
		st := res.ports[d.key]
		rule := &st.Drops[d.drop]
		if !rule.Counted {
			continue
		}
		pk := d.raw
		if ext != nil {
			pk = ext[d.rule]
		}
		if d.fw >= 0 {
			f := res.fwDrops[d.fw]
			if fw != nil {
				pk += fw[f.rule]
			} else {
				pk += f.packets
			}
		}
		st.DropPackets = st.DropPackets - rule.Packets + pk
		rule.Packets = pk
	}
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}

// hashSuffix returns the 16-character hash of a per-service chain name with the
// given prefix, if name has that shape.
func hashSuffix(name, prefix []byte) (portKey, bool) {
	var k portKey
	if len(name) != len(prefix)+16 || !bytes.HasPrefix(name, prefix) {
		return k, false
	}
	copy(k[:], name[len(prefix):])
	return k, true
}

func (res *iptablesResult) chain(table, name []byte) {
	if !bytes.HasPrefix(name, prefixKUBE) {
		return
	}
	switch string(table) {
	case "nat":
		for _, p := range [][]byte{prefixSVC, prefixSVL, prefixEXT, prefixFW, prefixXLB} {
			if k, ok := hashSuffix(name, p); ok {
				stateFor(res.ports, k).Programmed = true
				return
			}
		}
		switch string(name) {
		case "KUBE-SERVICES":
			res.kubeServices = true
		case "KUBE-LOAD-BALANCER", "KUBE-NODE-PORT":
			res.ipvsChains = true
		case "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY":
			res.hintChains = true
		}
	default:
		switch string(name) {
		case "KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY":
			res.hintChains = true
		}
	}
}

// ruleArgs is what the reader needs from one rule.
type ruleArgs struct {
	chain, proto, comment, target []byte
	dest, dport                   []byte // -d and --dport values
	pkts                          uint64
	counted                       bool // the line carried [packets:bytes]
}

func (res *iptablesResult) rule(table, line []byte) error {
	var r ruleArgs
	rest := line
	if line[0] == '[' {
		end := bytes.IndexByte(line, ']')
		if end < 0 {
			return fmt.Errorf("unterminated counters in %q", clip(line))
		}
		pk, _, ok := bytes.Cut(line[1:end], []byte(":"))
		if !ok {
			return fmt.Errorf("bad counters in %q", clip(line))
		}
		n, err := strconv.ParseUint(string(pk), 10, 64)
		if err != nil {
			return fmt.Errorf("bad packet counter in %q", clip(line))
		}
		r.pkts, r.counted = n, true
		rest = bytes.TrimLeft(line[end+1:], " ")
	}
	if !bytes.HasPrefix(rest, []byte("-A ")) {
		return fmt.Errorf("rule without -A: %q", clip(line))
	}
	rest = rest[3:]
	r.chain, rest, _ = bytes.Cut(rest, []byte(" "))
	if len(r.chain) == 0 {
		return fmt.Errorf("rule without chain: %q", clip(line))
	}
	res.rules++
	if !bytes.HasPrefix(r.chain, prefixKUBE) {
		return nil
	}
	res.kubeRules++
	// Most rules are in endpoint chains and say nothing about the node's policy:
	// skip them without tokenizing.
	if bytes.HasPrefix(r.chain, prefixSEP) {
		return nil
	}
	isNAT := string(table) == "nat"
	isFilter := string(table) == "filter"
	var svl, xlb, ext bool
	var key portKey
	extIdx := -1
	switch {
	case isNAT:
		if key, svl = hashSuffix(r.chain, prefixSVL); !svl {
			if key, xlb = hashSuffix(r.chain, prefixXLB); !xlb {
				key, ext = hashSuffix(r.chain, prefixEXT)
			}
		}
		if !svl && !xlb && !ext {
			return nil
		}
	case isFilter:
		extChain := bytes.Equal(r.chain, chainExternalServices)
		if bytes.Equal(r.chain, chainProxyFirewall) {
			idx := res.fwRules
			res.fwRules++
			if err := scanArgs(rest, &r); err != nil {
				return fmt.Errorf("%w in %q", err, clip(line))
			}
			res.fwIDs = append(res.fwIDs, identityOfArgs(&r))
			return res.firewallRule(&r, idx, line)
		}
		if !extChain && !bytes.Equal(r.chain, chainServices) {
			return nil
		}
		if extChain {
			extIdx = res.extRules
			res.extRules++
		}
	default:
		return nil
	}
	if err := scanArgs(rest, &r); err != nil {
		return fmt.Errorf("%w in %q", err, clip(line))
	}
	if extIdx >= 0 {
		res.extIDs = append(res.extIDs, identityOfArgs(&r))
	}
	if isNAT {
		st := stateFor(res.ports, key)
		st.Programmed = true
		switch {
		case ext:
			// KUBE-EXT only matters through the KUBE-SVL it jumps to, counted there.
		case bytes.Equal(r.target, chainMarkDrop):
			// ≤1.24: "<svc> has no local endpoints" -j KUBE-MARK-DROP in XLB/SVL,
			// one rule for the NodePort and every address of the port.
			addDrop(st, DropRule{AllDestinations: true, Packets: r.pkts, Counted: r.counted})
		case bytes.HasPrefix(r.target, prefixSEP):
			sep, ok := hashSuffix(r.target, prefixSEP)
			if !ok {
				return nil
			}
			// Session affinity jumps to each endpoint twice (the "recent" check, then the
			// balancing rule): one endpoint.
			e := sepEndpoint(r.comment, sep)
			if slices.Contains(st.Endpoints, e) {
				return nil
			}
			st.LocalEndpoints++
			res.endpoints.add(st, e)
		}
		return nil
	}
	// filter KUBE-SERVICES / KUBE-EXTERNAL-SERVICES: only the comment names the
	// Service port; with the protocol it gives the same hash as the chains.
	if len(r.comment) == 0 || len(r.proto) == 0 {
		return nil
	}
	var drop bool
	var name []byte
	switch {
	case bytes.Equal(r.target, []byte("DROP")) && bytes.HasSuffix(r.comment, suffixNoLocal):
		// Only KUBE-EXTERNAL-SERVICES: the same DROP in KUBE-SERVICES is
		// internalTrafficPolicy=Local on the cluster IP, not external traffic.
		if !bytes.Equal(r.chain, chainExternalServices) {
			return nil
		}
		drop, name = true, r.comment[:len(r.comment)-len(suffixNoLocal)]
	case bytes.Equal(r.target, []byte("REJECT")) && bytes.HasSuffix(r.comment, suffixNoEPs):
		name = r.comment[:len(r.comment)-len(suffixNoEPs)]
	default:
		return nil
	}
	if bytes.IndexByte(name, '/') <= 0 {
		return nil
	}
	if !drop {
		st := stateFor(res.ports, hashKey(string(name), string(bytes.ToLower(r.proto))))
		st.Programmed = true
		st.Reject = true
		return nil
	}
	d, err := dropRule(&r)
	if err != nil {
		return fmt.Errorf("%w in %q", err, clip(line))
	}
	k := hashKey(string(name), string(bytes.ToLower(r.proto)))
	st := stateFor(res.ports, k)
	addDrop(st, d)
	if extIdx >= 0 {
		res.extDrops = append(res.extDrops, extDrop{rule: extIdx, key: k, drop: len(st.Drops) - 1, raw: d.Packets, fw: -1})
	}
	return nil
}

// firewallRule records a KUBE-PROXY-FIREWALL DROP: "-d <lb ip> -p <proto>
// --dport <port> ... --comment "<ns/name:port> traffic not accepted by
// KUBE-FW-<h>" -j DROP". The Service port is the KUBE-FW chain's hash.
func (res *iptablesResult) firewallRule(r *ruleArgs, idx int, line []byte) error {
	if !bytes.Equal(r.target, []byte("DROP")) {
		return nil
	}
	i := bytes.Index(r.comment, infixNotAccepted)
	if i < 0 {
		return nil
	}
	k, ok := hashSuffix(r.comment[i+len(infixNotAccepted)-len(prefixFW):], prefixFW)
	if !ok {
		return nil
	}
	d, err := dropRule(r)
	if err != nil {
		return fmt.Errorf("%w in %q", err, clip(line))
	}
	if d.Address == "" {
		return nil
	}
	res.fwDrops = append(res.fwDrops, fwDrop{rule: idx, key: k, address: d.Address, port: d.Port, packets: d.Packets})
	return nil
}

// dropRule reads the destination of a ≥1.25 KUBE-EXTERNAL-SERVICES DROP rule:
// "-m addrtype --dst-type LOCAL ... --dport <nodePort>" is the NodePort rule
// (Address ""), "-d <ip>/32 ... --dport <port>" (/128 for IPv6) an LB ingress IP
// or externalIP.
func dropRule(r *ruleArgs) (DropRule, error) {
	d := DropRule{Packets: r.pkts, Counted: r.counted}
	// kube-proxy always writes --dport and either -d or --dst-type LOCAL; a rule
	// without them still drops, so it is kept (Port 0, Address "") rather than lost.
	if len(r.dport) > 0 {
		port, err := strconv.ParseUint(string(r.dport), 10, 16)
		if err != nil {
			return d, fmt.Errorf("drop rule with bad --dport %q", clip(r.dport))
		}
		d.Port = int32(port)
	}
	if len(r.dest) == 0 {
		return d, nil
	}
	addr, err := canonicalDest(r.dest)
	if err != nil {
		return d, err
	}
	d.Address = addr
	return d, nil
}

// canonicalDest turns iptables-save's "-d" value (an address with a prefix
// length, "/32" or "/128" for one host) into netip's canonical spelling.
func canonicalDest(b []byte) (string, error) {
	s := string(b)
	if !bytes.ContainsRune(b, '/') {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return "", fmt.Errorf("drop rule with bad -d %q", clip(b))
		}
		return a.String(), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("drop rule with bad -d %q", clip(b))
	}
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String(), nil
	}
	// kube-proxy writes single addresses only; keep a wider match as the prefix.
	return p.Masked().String(), nil
}

// scanArgs walks the arguments of a rule after the chain name, in any order, and
// picks -p, --comment and -j. Quoting follows iptables-save: double quotes, with
// backslash escaping '"' and '\'.
func scanArgs(s []byte, r *ruleArgs) error {
	var prev []byte
	for {
		for len(s) > 0 && s[0] == ' ' {
			s = s[1:]
		}
		if len(s) == 0 {
			return nil
		}
		var tok []byte
		if s[0] == '"' {
			end := -1
			escaped := false
			for i := 1; i < len(s); i++ {
				if s[i] == '\\' {
					escaped = true
					i++
					continue
				}
				if s[i] == '"' {
					end = i
					break
				}
			}
			if end < 0 {
				return fmt.Errorf("unterminated quote")
			}
			tok = s[1:end]
			if escaped {
				tok = unescape(tok)
			}
			s = s[end+1:]
		} else {
			i := bytes.IndexByte(s, ' ')
			if i < 0 {
				i = len(s)
			}
			tok, s = s[:i], s[i:]
		}
		switch string(prev) {
		case "-p", "--protocol":
			r.proto = tok
		case "--comment":
			r.comment = tok
		case "-j", "--jump", "-g", "--goto":
			r.target = tok
		case "-d", "--destination":
			r.dest = tok
		case "--dport", "--destination-port":
			r.dport = tok
		}
		prev = tok
	}
}

func unescape(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) {
			i++
		}
		out = append(out, b[i])
	}
	return out
}

// sameTable says whether two parses of one table say the same about every
// Service port (counters aside: they move without a rule change), for a
// verification of a kept table. A nil parse is the same as none.
func sameTable(a, b *iptablesResult) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.kubeServices == b.kubeServices && a.ipvsChains == b.ipvsChains && samePorts(a.ports, b.ports)
}

// samePorts compares two parses' states, counters aside.
func samePorts(a, b map[portKey]*PortState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || !sameState(*x, *y) {
			return false
		}
	}
	return true
}

func sameState(x, y PortState) bool {
	if x.Programmed != y.Programmed || x.Drop != y.Drop || x.Reject != y.Reject || x.LocalEndpoints != y.LocalEndpoints ||
		len(x.Drops) != len(y.Drops) || !slices.Equal(x.Endpoints, y.Endpoints) {
		return false
	}
	dx, dy := slices.Clone(x.Drops), slices.Clone(y.Drops)
	for i := range dx {
		dx[i].Packets, dy[i].Packets = 0, 0
	}
	sortDrops(dx)
	sortDrops(dy)
	return slices.Equal(dx, dy)
}
