package collector

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MetricFilter keeps or drops the exporter's metrics by full name, as kube-state-metrics'
// --metric-allowlist and --metric-denylist do: comma-separated regular expressions, each anchored at both
// ends, an allowlist or a denylist but not both.
type MetricFilter struct {
	allow, deny *regexp.Regexp
}

// NewMetricFilter parses the lists; both empty keeps everything (nil, nil).
func NewMetricFilter(allowlist, denylist string) (*MetricFilter, error) {
	if allowlist != "" && denylist != "" {
		return nil, errors.New("an allowlist and a denylist exclude each other: give one")
	}
	var f MetricFilter
	var err error
	switch {
	case allowlist != "":
		f.allow, err = anchored(allowlist)
	case denylist != "":
		f.deny, err = anchored(denylist)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// anchored joins comma-separated expressions into one that must match a whole name.
func anchored(list string) (*regexp.Regexp, error) {
	var parts []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if _, err := regexp.Compile(p); err != nil {
			return nil, fmt.Errorf("bad expression %q: %w", p, err)
		}
		parts = append(parts, "(?:"+p+")")
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("no expression in %q", list)
	}
	return regexp.Compile("^(?:" + strings.Join(parts, "|") + ")$")
}

// Keep reports whether the metric named name (its full name) is exported.
func (f *MetricFilter) Keep(name string) bool {
	switch {
	case f == nil:
		return true
	case f.allow != nil:
		return f.allow.MatchString(name)
	default:
		return !f.deny.MatchString(name)
	}
}
