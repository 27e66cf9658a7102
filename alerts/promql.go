package alerts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// promQL is the parser Prometheus itself uses, with its default options.
func promQL() parser.Parser { return parser.NewParser(parser.Options{}) }

// ParseRules parses and validates a rule file exactly as Prometheus loads it (unknown fields are errors).
func ParseRules(data []byte) (*rulefmt.RuleGroups, error) {
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, promQL(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return groups, nil
}

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
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
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

// DashboardQuery is one PromQL query of a dashboard, with where it came from.
type DashboardQuery struct {
	Where string // "panel <title> target <refId>" or "variable <name>"
	Expr  string // as written, with Grafana variables
}

// DashboardQueries returns every PromQL query of a Grafana dashboard: each panel target's expr (rows' nested
// panels included) and each query variable's metric selector (label_values(<selector>, <label>)).
func DashboardQueries(dashboard []byte) ([]DashboardQuery, error) {
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, fmt.Errorf("decode dashboard: %w", err)
	}
	var out []DashboardQuery
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr != "" {
					out = append(out, DashboardQuery{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable %s: query is neither a string nor an object", v.Name)
			}
			q = obj.Query
		}
		sel, ok := labelValuesSelector(q)
		if !ok {
			return nil, fmt.Errorf("variable %s: want label_values(<selector>, <label>), got %q", v.Name, q)
		}
		out = append(out, DashboardQuery{Where: "variable " + v.Name, Expr: sel})
	}
	return out, nil
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

func labelValuesSelector(q string) (string, bool) {
	m := labelValues.FindStringSubmatch(q)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Grafana's built-in interval variables, replaced by a duration of the same role, and user variables
// ($name or ${name}), replaced by a regular expression matching anything (every user variable of these
// dashboards is used as a label regex, =~"$name", with ".*" as its "All" value).
var (
	grafanaIntervals = strings.NewReplacer("$__rate_interval", "2m", "${__rate_interval}", "2m",
		"$__interval", "30s", "${__interval}", "30s", "$__range", "1h", "${__range}", "1h")
	grafanaVariable = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
)

// ExpandGrafanaVariables turns a dashboard query into plain PromQL as Grafana would with every variable set
// to "All" and a 30s scrape interval.
func ExpandGrafanaVariables(expr string) string {
	return grafanaVariable.ReplaceAllString(grafanaIntervals.Replace(expr), ".*")
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
