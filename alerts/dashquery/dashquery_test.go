package dashquery

import (
	"reflect"
	"strings"
	"testing"
)

func TestQueriesAndVariables(t *testing.T) {
	dash := []byte(`{
	  "templating": {"list": [
	    {"name": "datasource", "type": "datasource", "query": "prometheus"},
	    {"name": "cluster", "type": "query", "query": {"query": "label_values(localtraffic_build_info, cluster)"}},
	    {"name": "ns", "type": "query", "query": "label_values(localtraffic_service_info{cluster=~\"$cluster\"}, namespace)"}
	  ]},
	  "panels": [
	    {"type": "row", "title": "r", "panels": [
	      {"title": "nested", "targets": [{"refId": "A", "expr": "rate(x_total{ns=~\"${ns}\"}[$__rate_interval])"}]}
	    ]},
	    {"title": "top", "targets": [{"refId": "B", "expr": "up", "instant": true}, {"refId": "C", "expr": ""}]}
	  ]
	}`)
	qs, err := Queries(dash)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range qs {
		kind := "range"
		if q.Instant {
			kind = "instant"
		}
		got = append(got, q.Where+" ("+kind+"): "+Expand(q.Expr))
	}
	want := []string{
		`panel "nested" target A (range): rate(x_total{ns=~".*"}[2m])`,
		`panel "top" target B (instant): up`,
		`variable cluster (instant): localtraffic_build_info`,
		`variable ns (instant): localtraffic_service_info{cluster=~".*"}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Expr stays as written: the static checks parse the expanded form, the dashboard keeps its variables.
	if qs[0].Expr != `rate(x_total{ns=~"${ns}"}[$__rate_interval])` {
		t.Errorf("Expr = %q, want the query as written", qs[0].Expr)
	}
}

func TestQueriesRejects(t *testing.T) {
	for name, dash := range map[string]string{
		"not label_values":    `{"templating": {"list": [{"name": "x", "type": "query", "query": "query_result(up)"}]}}`,
		"query of other type": `{"templating": {"list": [{"name": "x", "type": "query", "query": 3}]}}`,
		"not a dashboard":     `[1, 2]`,
	} {
		if _, err := Queries([]byte(dash)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
