package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// optInMetrics are the metrics docs/metrics.md's table marks Default "no": an exporter started with its
// default flags must not export them. (The alerts module checks statically that no rule or dashboard query
// reads one; the live test checks that the exporters it scrapes run with the defaults.)
func optInMetrics(repo string) ([]string, error) {
	path := filepath.Join(repo, "docs", "metrics.md")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read metric documentation: %w", err)
	}
	col, sawDefault := -1, false
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			col = -1
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "Metric" {
			col = -1
			for i, c := range cells {
				if c == "Default" {
					col = i
				}
			}
			if col < 0 {
				return nil, fmt.Errorf("%s: metric table without a Default column", path)
			}
			sawDefault = true
			continue
		}
		if m := metricCell.FindStringSubmatch(cells[0]); m != nil && col >= 0 && col < len(cells) && cells[col] == "no" {
			out = append(out, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !sawDefault || len(out) == 0 {
		return nil, fmt.Errorf("%s: no metric table with a Default column, or no opt-in metric in it", path)
	}
	return out, nil
}

var metricCell = regexp.MustCompile("^`([a-zA-Z_:][a-zA-Z0-9_:]*)`$")

// alertExpr is the expression of the named alert in a shipped rule file.
func alertExpr(repo, file, alert string) (string, error) {
	data, err := os.ReadFile(filepath.Join(repo, file))
	if err != nil {
		return "", fmt.Errorf("read rules: %w", err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rf); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				return r.Expr, nil
			}
		}
	}
	return "", fmt.Errorf("%s: no alert %s", file, alert)
}
