package docs

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// number parses a figure as the docs write it (2,535,000).
func number(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(s), ",", ""))
	if err != nil {
		t.Fatalf("%q is not a number: %v", s, err)
	}
	return n
}

// TestScaleSeriesAtNodeCounts: scale.md's table of series at 1,000 and 5,000 nodes follows from the per-Service
// series budget collector/budget_test.go enforces, the page's own mix of Services and per-node series, and the
// recording rules' shapes (one verdict per node × Service, one drop rate per node × health-checked Service, one
// sync age per node, three sums per Service, at most one sole-node series per Service).
func TestScaleSeriesAtNodeCounts(t *testing.T) {
	budget, err := os.ReadFile("../collector/budget_test.go")
	if err != nil {
		t.Fatal(err)
	}
	b := regexp.MustCompile(`const nodePortBudget, loadBalancerBudget, whileBlackholing = (\d+), (\d+), \d+`).FindStringSubmatch(string(budget))
	if b == nil {
		t.Fatal("collector/budget_test.go no longer declares nodePortBudget, loadBalancerBudget")
	}
	nodePortSeries, lbSeries := number(t, b[1]), number(t, b[2])

	doc, err := os.ReadFile("scale.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	mix := regexp.MustCompile(`\*\*(\d+) NodePort Services and (\d+)\s+LoadBalancer Services`).FindStringSubmatch(text)
	perNode := regexp.MustCompile(`Per node, besides the Services: (\d+) series`).FindStringSubmatch(text)
	if mix == nil || perNode == nil {
		t.Fatal("scale.md no longer states its mix of Services or the per-node series")
	}
	nodePorts, lbs, nodeLevel := number(t, mix[1]), number(t, mix[2]), number(t, perNode[1])
	services := nodePorts + lbs

	table := regexp.MustCompile(`(?s)<!-- series-at-scale:start -->\n(.*?)<!-- series-at-scale:end -->`).FindStringSubmatch(text)
	if table == nil {
		t.Fatal("scale.md has no series-at-scale table")
	}
	rows := 0
	for _, line := range strings.Split(table[1], "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 6 || !regexp.MustCompile(`^\s*[\d,]+\s*$`).MatchString(cells[0]) {
			continue
		}
		rows++
		nodes := number(t, cells[0])
		series := nodePorts*nodePortSeries + lbs*lbSeries + nodeLevel
		exporters := nodes * series
		rules := nodes*services + nodes*lbs + nodes + 3*services + services
		want := []int{nodes, series, exporters, rules, exporters + rules, exporters / 30}
		for i, w := range want {
			if got := number(t, cells[i]); got != w {
				t.Errorf("scale.md at %d nodes, column %d: %d, computed %d", nodes, i+1, got, w)
			}
		}
	}
	if rows != 2 {
		t.Errorf("the series-at-scale table has %d rows of figures, want 1,000 and 5,000 nodes", rows)
	}
}
