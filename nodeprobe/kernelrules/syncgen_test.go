package kernelrules

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
)

// This file writes the input of kube-proxy's partial syncs, as its proxiers
// write them (pkg/proxy/iptables/proxier.go, pkg/proxy/nftables/proxier.go;
// docs/kube-proxy.md, "Partial syncs"), from the generators' full rulesets:
//
//   - iptables mode: one `iptables-restore --noflush` of both tables that
//     re-declares (flushes) and refills every top-level chain — its rules in
//     the order kube-proxy walks its Services, a Go map's, so another order
//     every sync — and the chains of the Services that changed, and deletes
//     the chains no longer used (-X);
//   - nftables mode: one `nft -f` transaction that adds (again) and flushes
//     each chain of a changed Service and refills it, adds and deletes only the
//     map elements that differ, and flushes the chains no longer used (deleted
//     by a later transaction, nftStaleDelete).

// shuffled is svcs in another order (kube-proxy's map order), seeded.
func shuffled(svcs []genService, seed uint64) []genService {
	out := slices.Clone(svcs)
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// iptTopLevel are the chains kube-proxy's iptables proxier writes whole on
// every sync, per table.
var iptTopLevel = map[string][]string{
	"filter": {"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL", "KUBE-FIREWALL"},
	"nat":    {"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"},
}

// serviceChains are the per-Service chain names of s in iptables mode, as
// kube-proxy names them (hash chains and the endpoint chains of eps).
func (s genService) serviceChains() []string {
	out := []string{s.chain("KUBE-SVC-"), s.chain("KUBE-SVL-"), s.chain("KUBE-EXT-"), s.chain("KUBE-FW-"), s.chain("KUBE-XLB-")}
	for _, ep := range s.eps {
		out = append(out, s.sepChain(ep))
	}
	return out
}

// iptPartialSync is the restore input of a partial sync to the state after
// (in the Service order given), rewriting the chains of the Services named in
// changed ("ns/name") and deleting the chains of before's that after does not
// use.
func iptPartialSync(ipv6 bool, before, after []genService, changed map[string]bool) string {
	full := genRules(layout125, ipv6, after)
	write := map[string]bool{}
	for _, s := range after {
		if changed[s.ns+"/"+s.name] {
			for _, c := range s.serviceChains() {
				write[c] = true
			}
		}
	}
	// A chain before declared and after does not is stale.
	declared, had := declaredChains(full), declaredChains(genRules(layout125, ipv6, before))
	var stale []string
	for _, s := range before {
		if !changed[s.ns+"/"+s.name] {
			continue
		}
		for _, c := range s.serviceChains() {
			if had[c] && !declared[c] && !slices.Contains(stale, c) {
				stale = append(stale, c)
			}
		}
	}
	var out strings.Builder
	table := ""
	for _, line := range strings.Split(full, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			out.WriteString(line + "\n")
		case line == "COMMIT":
			if table == "nat" {
				// As kube-proxy does: every stale chain flushed, then each
				// deleted (one may still jump to another until flushed).
				for _, c := range stale {
					fmt.Fprintf(&out, ":%s - [0:0]\n", c)
				}
				for _, c := range stale {
					fmt.Fprintf(&out, "-X %s\n", c)
				}
			}
			out.WriteString(line + "\n")
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if slices.Contains(iptTopLevel[table], name) || write[name] {
				fmt.Fprintf(&out, ":%s - [0:0]\n", name)
			}
		case strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, "["):
			// kube-proxy writes no counters: a rewritten rule starts at 0.
			if strings.HasPrefix(line, "[") {
				_, line, _ = strings.Cut(line, "] ")
			}
			chain, _, _ := strings.Cut(line[3:], " ")
			if slices.Contains(iptTopLevel[table], chain) || write[chain] {
				out.WriteString(line + "\n")
			}
		}
	}
	return out.String()
}

// declaredChains are the chains a restore input declares.
func declaredChains(ruleset string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(ruleset, "\n") {
		if strings.HasPrefix(line, ":") {
			name, _, _ := strings.Cut(line[1:], " ")
			out[name] = true
		}
	}
	return out
}

// nftBlock is one chain of a generated nftables table: its name and rules.
type nftBlock struct {
	name  string
	rules []string
}

var nftChainLine = regexp.MustCompile(`^\tchain (\S+) \{$`)

// nftTableParts splits genNFTLayout's output into its chains (in order) and
// each map's elements (one string per element, as written).
func nftTableParts(text string) (chains []nftBlock, maps map[string][]string) {
	maps = map[string][]string{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := nftChainLine.FindStringSubmatch(line); m != nil {
			b := nftBlock{name: m[1]}
			for i++; lines[i] != "\t}"; i++ {
				r := strings.TrimSpace(lines[i])
				if strings.HasPrefix(r, "type ") || strings.HasPrefix(r, "comment ") {
					continue // a base chain's hook, a chain's comment
				}
				b.rules = append(b.rules, r)
			}
			chains = append(chains, b)
			continue
		}
		if name, ok := strings.CutPrefix(line, "\tmap "); ok {
			name = strings.TrimSuffix(name, " {")
			maps[name] = nil
			inElems := false
			for i++; lines[i] != "\t}"; i++ {
				t := strings.TrimSpace(lines[i])
				if rest, ok := strings.CutPrefix(t, "elements = { "); ok {
					inElems, t = true, rest
				} else if !inElems {
					continue // type, comment
				}
				end := strings.HasSuffix(t, " }")
				t = strings.TrimSuffix(strings.TrimSuffix(t, " }"), ",")
				maps[name] = append(maps[name], t)
				inElems = !end
			}
		}
	}
	return chains, maps
}

// genElemKey is an element's key as written ("tcp . 30090" of "tcp . 30090
// comment \"…\" : drop").
func genElemKey(el string) string {
	k, _, _ := strings.Cut(el, " : ")
	k, _, _ = strings.Cut(k, " comment ")
	return k
}

// nftServiceOf says whether a chain belongs to a Service port ("…-ns/name/proto/port"
// or an endpoint chain "…-ns/name/proto/port__…").
func nftServiceOf(chain string, s genService) bool {
	base := fmt.Sprintf("-%s/%s/%s/%s", s.ns, s.name, s.proto, s.port)
	return strings.HasSuffix(chain, base) || strings.Contains(chain, base+"__")
}

// nftPartialSync is the `nft -f` input of a partial sync from before to after
// in nftables mode: every chain of a changed Service added, flushed and
// refilled, the elements that differ deleted and added, and the chains before
// had and after does not flushed (kube-proxy deletes them a second later:
// nftStaleDelete). It returns the stale chains too.
func nftPartialSync(ipv6, dnat bool, before, after []genService, changed map[string]bool) (input string, stale []string) {
	fam := "ip"
	if ipv6 {
		fam = "ip6"
	}
	oldChains, oldMaps := nftTableParts(genNFTLayout(ipv6, before, dnat))
	newChains, newMaps := nftTableParts(genNFTLayout(ipv6, after, dnat))
	isChanged := func(chain string, svcs []genService) bool {
		for _, s := range svcs {
			if changed[s.ns+"/"+s.name] && nftServiceOf(chain, s) {
				return true
			}
		}
		return false
	}
	var out strings.Builder
	have := map[string]bool{}
	for _, c := range newChains {
		have[c.name] = true
		if !isChanged(c.name, after) {
			continue
		}
		fmt.Fprintf(&out, "add chain %s kube-proxy %s\nflush chain %s kube-proxy %s\n", fam, c.name, fam, c.name)
		for _, r := range c.rules {
			fmt.Fprintf(&out, "add rule %s kube-proxy %s %s\n", fam, c.name, r)
		}
	}
	for _, c := range oldChains {
		if !have[c.name] && isChanged(c.name, before) {
			stale = append(stale, c.name)
			fmt.Fprintf(&out, "flush chain %s kube-proxy %s\n", fam, c.name)
		}
	}
	for name, els := range newMaps {
		oldKeys := map[string]string{}
		for _, el := range oldMaps[name] {
			oldKeys[genElemKey(el)] = el
		}
		newKeys := map[string]bool{}
		for _, el := range els {
			k := genElemKey(el)
			newKeys[k] = true
			switch old, ok := oldKeys[k]; {
			case !ok:
				fmt.Fprintf(&out, "add element %s kube-proxy %s { %s }\n", fam, name, el)
			case old != el:
				fmt.Fprintf(&out, "delete element %s kube-proxy %s { %s }\nadd element %s kube-proxy %s { %s }\n", fam, name, k, fam, name, el)
			}
		}
		for k := range oldKeys {
			if !newKeys[k] {
				fmt.Fprintf(&out, "delete element %s kube-proxy %s { %s }\n", fam, name, k)
			}
		}
	}
	return out.String(), stale
}

// nftStaleDelete is kube-proxy's later transaction deleting flushed chains.
func nftStaleDelete(ipv6 bool, stale []string) string {
	fam := "ip"
	if ipv6 {
		fam = "ip6"
	}
	var out strings.Builder
	for _, c := range stale {
		fmt.Fprintf(&out, "delete chain %s kube-proxy %s\n", fam, c)
	}
	return out.String()
}
