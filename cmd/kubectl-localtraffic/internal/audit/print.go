package audit

import (
	"fmt"
	"io"
	"strings"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// severityColour is the colour of a finding's severity on a terminal.
func severityColour(s placement.Severity) string {
	switch s {
	case placement.Critical:
		return cli.Red + cli.Bold
	case placement.Warning:
		return cli.Yellow
	}
	return cli.Dim
}

// writeText prints each Service's story and its findings, then a one-line tally.
func writeText(w io.Writer, rep placement.Report, colour bool) error {
	p := cli.Painter(colour)
	if len(rep.Services) == 0 {
		_, err := fmt.Fprintln(w, "No Service with externalTrafficPolicy: Local.")
		return err
	}
	count := map[placement.Severity]int{}
	ignored := 0
	for _, s := range rep.Services {
		fmt.Fprintf(w, "%s (%s): %s\n", p.Paint(cli.Bold, s.Service.Namespace+"/"+s.Service.Name), s.Type, s.Story)
		if s.Ignored {
			fmt.Fprintf(w, "  ignored: %s (%s): its findings are reported, not failing\n", s.IgnoredReason, kubeview.AnnotationIntentionalPlacement)
		}
		if s.HealthCheck != "" {
			fmt.Fprintf(w, "  health check: %s\n", s.HealthCheck)
		}
		if s.Status != nil {
			fmt.Fprintf(w, "  now: %s\n", s.Status.Summary)
		}
		for _, f := range s.Findings {
			mark := p.Paint(severityColour(f.Severity), strings.ToUpper(f.Severity.String()))
			if f.Ignored {
				ignored++
				mark = p.Paint(cli.Dim, "IGNORED ("+f.Severity.String()+")")
			} else {
				count[f.Severity]++
			}
			fmt.Fprintf(w, "  %s %s %s: %s\n", mark, f.ID, f.Name, f.Message)
			fmt.Fprintf(w, "      why: %s\n", f.Why)
			fmt.Fprintf(w, "      fix: %s\n", f.Fix)
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintf(w, "%d Local Services: %d critical, %d warning, %d info, %d ignored\n", len(rep.Services),
		count[placement.Critical], count[placement.Warning], count[placement.Info], ignored)
	return err
}
