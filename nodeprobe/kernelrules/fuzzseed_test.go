package kernelrules

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz seeds are small inputs, one per shape, cut from the real fixtures: a whole ruleset as a seed makes every
// execution parse thousands of lines (FuzzParseNFTJSON ran 19 executions in a 15 s slot seeded that way), while
// the fuzzer learns as much from one line or object of each kind. The whole fixtures stay with the table tests.

// maxSeedElems is how many elements of a map or set a seed keeps: the shape of an element, not their number,
// is what the parser branches on.
const maxSeedElems = 2

// nftShapeSeeds returns, for the nft JSON fixtures matching pattern, one small document per object shape: the
// kube-proxy table and one object (a rule, chain, map or set), maps and sets cut to maxSeedElems elements.
func nftShapeSeeds(tb testing.TB, pattern string) [][]byte {
	tb.Helper()
	var seeds [][]byte
	seen := map[string]bool{}
	for _, file := range fixtureFiles(tb, pattern) {
		var doc struct {
			Nftables []map[string]json.RawMessage `json:"nftables"`
		}
		if err := json.Unmarshal(readFixture(tb, file), &doc); err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		var table json.RawMessage
		for _, o := range doc.Nftables {
			if t, ok := o["table"]; ok {
				table = t
			}
		}
		for _, o := range doc.Nftables {
			for kind, body := range o {
				if kind == "table" || kind == "metainfo" {
					continue
				}
				body, shape := nftShape(tb, kind, body)
				if seen[shape] {
					continue
				}
				seen[shape] = true
				seed, err := json.Marshal(map[string]any{"nftables": []any{
					map[string]json.RawMessage{"table": table}, map[string]json.RawMessage{kind: body},
				}})
				if err != nil {
					tb.Fatal(err)
				}
				seeds = append(seeds, seed)
			}
		}
	}
	return seeds
}

// nftShape cuts a map's or set's elements to maxSeedElems and names the object's shape: its kind and name for
// maps, sets and chains (kube-proxy names them by role, or by role and Service: the prefix before the hash),
// its chain's role and the kinds of its expressions for a rule.
func nftShape(tb testing.TB, kind string, body json.RawMessage) (json.RawMessage, string) {
	tb.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		tb.Fatalf("%s object: %v", kind, err)
	}
	var name string
	_ = json.Unmarshal(fields["name"], &name)
	if kind == "rule" {
		_ = json.Unmarshal(fields["chain"], &name)
	}
	role, _, _ := strings.Cut(name, "-")
	shape := kind + " " + role
	switch kind {
	case "map", "set":
		shape = kind + " " + name
		var elems []json.RawMessage
		if json.Unmarshal(fields["elem"], &elems) == nil && len(elems) > maxSeedElems {
			cut, _ := json.Marshal(elems[:maxSeedElems])
			fields["elem"] = cut
		}
	case "rule":
		var exprs []map[string]json.RawMessage
		_ = json.Unmarshal(fields["expr"], &exprs)
		for _, e := range exprs {
			for k := range e {
				shape += " " + k
			}
		}
	}
	out, err := json.Marshal(fields)
	if err != nil {
		tb.Fatal(err)
	}
	return out, shape
}

// iptablesShapeSeeds returns, for the iptables-save fixtures matching pattern, one small save per table: its
// header, its chain declarations and the first rule of each chain-and-target pair, then COMMIT.
func iptablesShapeSeeds(tb testing.TB, pattern string) [][]byte {
	tb.Helper()
	var seeds [][]byte
	seen := map[string]bool{}
	for _, file := range fixtureFiles(tb, pattern) {
		var cur bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(readFixture(tb, file)))
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "*"):
				cur.Reset()
				cur.WriteString(line + "\n")
			case strings.HasPrefix(line, ":"):
				cur.WriteString(line + "\n")
			case line == "COMMIT":
				cur.WriteString("COMMIT\n")
				if s := cur.String(); !seen[s] {
					seen[s] = true
					seeds = append(seeds, []byte(s))
				}
			case strings.Contains(line, "-A "):
				if shape := iptablesRuleShape(line); !seen[shape] {
					seen[shape] = true
					cur.WriteString(line + "\n")
				}
			}
		}
	}
	return seeds
}

// iptablesRuleShape: the chain's role (the name without its hash) and the rule's target.
func iptablesRuleShape(line string) string {
	f := strings.Fields(line[strings.Index(line, "-A "):])
	chain, target := "", ""
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "-A":
			chain = f[i+1]
		case "-j":
			target = f[i+1]
		}
	}
	cut := func(s string) string {
		if i := strings.LastIndexByte(s, '-'); i > 0 && len(s)-i == 17 {
			return s[:i]
		}
		return s
	}
	return cut(chain) + " -j " + cut(target) + " " + strings.Join(f[2:min(len(f), 4)], " ")
}

func fixtureFiles(tb testing.TB, pattern string) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no fixtures %s: %v", pattern, err)
	}
	return files
}

func readFixture(tb testing.TB, file string) []byte {
	tb.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// TestShapeSeedsAreSmallAndParse: the seeds cover every object kind of a real ruleset, each parses as the
// fixture's format does, and none is big.
func TestShapeSeedsAreSmallAndParse(t *testing.T) {
	nft := nftShapeSeeds(t, "real-*-nft-*.json")
	kinds := map[string]bool{}
	for _, s := range nft {
		if len(s) > 2048 {
			t.Errorf("nft seed of %d bytes: %.200s", len(s), s)
		}
		res, err := parseNFTJSON(s)
		if err != nil || !res.table {
			t.Errorf("nft seed does not parse as a kube-proxy table (%v): %.200s", err, s)
		}
		for _, k := range []string{`"rule"`, `"chain"`, `"map"`, `"set"`} {
			if bytes.Contains(s, []byte(k)) {
				kinds[k] = true
			}
		}
	}
	if len(kinds) != 4 || len(nft) < 10 {
		t.Errorf("nft seeds: %d, kinds %v: the real ruleset has rules, chains, maps and sets", len(nft), kinds)
	}
	ipt := iptablesShapeSeeds(t, "real-*-iptables-*.save")
	for _, s := range ipt {
		if len(s) > 8192 {
			t.Errorf("iptables seed of %d bytes", len(s))
		}
		if err := parseIPTablesSave(s, newIPTablesResult()); err != nil {
			t.Errorf("iptables seed does not parse: %v\n%s", err, s)
		}
	}
	if len(ipt) < 4 {
		t.Errorf("iptables seeds: %d, want one per table of each fixture", len(ipt))
	}
}
