// Package dashquery lists the PromQL queries of a Grafana dashboard and turns them into plain PromQL. The
// alerts module's tests check those queries statically (metric names, parsing) and e2e runs them against a
// live Prometheus: both read the dashboard through this one walker. Standard library only, so e2e can import
// it without Prometheus' packages.
package dashquery

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Query is one PromQL query of a dashboard, with where it came from.
type Query struct {
	Where   string // "panel <title> target <refId>" or "variable <name>"
	Expr    string // as written, with Grafana variables (Expand makes it plain PromQL)
	Instant bool   // the panel asks for an instant value (tables, stats) or it is a variable; otherwise a range
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a row's nested panels
	Targets []struct {
		RefID   string `json:"refId"`
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
	} `json:"targets"`
}

// Queries returns every PromQL query of a Grafana dashboard: each panel target's expr (rows' nested panels
// included) and each query variable's metric selector (label_values(<selector>, <label>)).
func Queries(dashboard []byte) ([]Query, error) {
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
	var out []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr != "" {
					out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr, Instant: t.Instant})
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
		// Grafana writes a variable's query as a string or, in newer dashboards, as an object.
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
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("variable %s: want label_values(<selector>, <label>), got %q", v.Name, q)
		}
		out = append(out, Query{Where: "variable " + v.Name, Expr: m[1], Instant: true})
	}
	return out, nil
}

var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// Grafana's built-in interval variables, replaced by a duration of the same role, and user variables
// ($name or ${name}), replaced by a regular expression matching anything (every user variable of these
// dashboards is used as a label regex, =~"$name", with ".*" as its "All" value).
var (
	grafanaIntervals = strings.NewReplacer("$__rate_interval", "2m", "${__rate_interval}", "2m",
		"$__interval", "30s", "${__interval}", "30s", "$__range", "1h", "${__range}", "1h")
	grafanaVariable = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
)

// Expand turns a dashboard query into plain PromQL as Grafana would with every variable set to "All", a 30s
// scrape interval and a 1h range.
func Expand(expr string) string {
	return grafanaVariable.ReplaceAllString(grafanaIntervals.Replace(expr), ".*")
}
