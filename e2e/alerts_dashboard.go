package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// dashboardQuery is one PromQL query of a Grafana dashboard.
type dashboardQuery struct {
	Where   string // panel title and refId, or variable name
	Expr    string // with Grafana's variables expanded (see expandGrafana)
	Instant bool   // the panel asks for an instant value (tables, stats); otherwise a range (time series)
}

// dashboardQueries returns every query of a dashboard: panel targets (rows' nested panels included) and the
// selectors of query variables (label_values(<selector>, <label>)). The alerts module's tests check the same
// dashboards statically (metric names, parsing); this is what runs them against a live Prometheus.
func dashboardQueries(dashboard []byte) ([]dashboardQuery, error) {
	type target struct {
		RefID   string `json:"refId"`
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
	}
	type panel struct {
		Title   string            `json:"title"`
		Targets []target          `json:"targets"`
		Panels  []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
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
	var out []dashboardQuery
	var walk func([]json.RawMessage) error
	walk = func(raw []json.RawMessage) error {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				return fmt.Errorf("decode panel: %w", err)
			}
			for _, t := range p.Targets {
				if t.Expr != "" {
					out = append(out, dashboardQuery{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: expandGrafana(t.Expr), Instant: t.Instant})
				}
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
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
				return nil, fmt.Errorf("variable %s: undecodable query", v.Name)
			}
			q = obj.Query
		}
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("variable %s: want label_values(<selector>, <label>), got %q", v.Name, q)
		}
		out = append(out, dashboardQuery{Where: "variable " + v.Name, Expr: expandGrafana(m[1]), Instant: true})
	}
	return out, nil
}

var (
	labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	// Grafana's interval variables, as Grafana sets them for a 30s scrape interval and a 1h dashboard range.
	grafanaIntervals = strings.NewReplacer("$__rate_interval", "2m", "${__rate_interval}", "2m",
		"$__interval", "30s", "${__interval}", "30s", "$__range", "1h", "${__range}", "1h")
	grafanaVariableRE = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)
)

// expandGrafana sets every user variable to its "All" value (".*": the dashboards use them as label regexes).
func expandGrafana(expr string) string {
	return grafanaVariableRE.ReplaceAllString(grafanaIntervals.Replace(expr), ".*")
}
