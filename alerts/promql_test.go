package alerts

import (
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// The rule files read as the tests read them: every group, the metrics an expression selects.

// LoadRules parses every file of RuleFiles under root.
func LoadRules(root string) ([]rulefmt.RuleGroup, error) {
	var all []rulefmt.RuleGroup
	for _, rel := range RuleFiles {
		data, err := os.ReadFile(root + "/" + rel)
		if err != nil {
			return nil, fmt.Errorf("read rule file: %w", err)
		}
		g, err := ParseRules(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		all = append(all, g.Groups...)
	}
	return all, nil
}

// MetricNames returns the metric names a PromQL expression selects, sorted and de-duplicated. A selector
// without a fixed name (only a regular expression on __name__) is an error: it could match anything.
func MetricNames(expr string) ([]string, error) {
	e, err := promQL().ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	seen := map[string]bool{}
	var inspectErr error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" {
			inspectErr = fmt.Errorf("selector %s in %q has no fixed metric name", vs, expr)
			return nil
		}
		seen[name] = true
		return nil
	})
	if inspectErr != nil {
		return nil, inspectErr
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// ParseRulesFile parses and validates one rule file and returns its groups' names, in order.
func ParseRulesFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read rule file: %w", err)
	}
	g, err := ParseRules(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	names := make([]string, len(g.Groups))
	for i, gr := range g.Groups {
		names[i] = gr.Name
	}
	return names, nil
}
