package alerts

import (
	"errors"
	"io"
	"log/slog"

	"github.com/prometheus/common/model"
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
