package status

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
)

// parseIgnoreSelector reads status --ignore-selector as the exporter reads its --services.ignore-selector
// (kubectl's label selector syntax; "" selects nothing): the same value given to both marks the same Services
// ignored. A selector that selects every Service is refused, as the exporter refuses it.
func parseIgnoreSelector(raw string) (labels.Selector, error) {
	if raw == "" {
		return nil, nil
	}
	sel, err := labels.Parse(raw)
	if err != nil {
		return nil, cli.BadInputf("bad --ignore-selector %q: %s", raw, cli.OneLine(err.Error()))
	}
	if sel.Empty() {
		return nil, cli.BadInputf("bad --ignore-selector %q: selects every Service; leave it out to ignore none", raw)
	}
	return sel, nil
}
