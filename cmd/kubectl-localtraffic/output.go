package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// ANSI colours for the text output on a terminal.
const (
	red    = "\x1b[31m"
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	dim    = "\x1b[2m"
	bold   = "\x1b[1m"
	reset  = "\x1b[0m"
)

type painter bool

func (p painter) paint(colour, s string) string {
	if !p {
		return s
	}
	return colour + s + reset
}

// cell is one node's mark in the grid. Colour codes go around the padded text, so tabwriter's widths stay true.
// An ignored Service's blackholes are still shown, dimmed: measured, failing nothing.
func cell(s placement.ServiceStatus, n placement.NodeStatus) (text, colour string) {
	switch {
	case n.Blackhole && s.Ignored:
		return "drop", dim
	case n.Blackhole:
		return "DROP", red
	case len(n.CannotTell) > 0:
		return "drop?", yellow
	case n.Serves:
		return fmt.Sprintf("ok %d", n.LocalEndpoints), green
	case n.Receives && !n.InRotation:
		return "drained", yellow
	case !n.Receives && len(n.Drops) == 0 && n.LocalEndpoints > 0:
		return fmt.Sprintf("(%d)", n.LocalEndpoints), dim
	default:
		return "-", dim
	}
}

// observedCell summarises what the Service's nodes' exporters observe: the nodes per blackhole reason, strongest
// first; "-" when they report none; "?" when no exporter report was read.
func observedCell(s placement.ServiceStatus) string {
	byReason := map[placement.Observation][]string{}
	read := false
	for _, n := range s.Nodes {
		if n.Observed == "" {
			continue
		}
		read = true
		if n.Observed != placement.ObservedNoBlackhole {
			byReason[n.Observed] = append(byReason[n.Observed], n.Node)
		}
	}
	if !read {
		return "?"
	}
	var parts []string
	for _, r := range placement.ObservedBlackholes() {
		if nodes := byReason[r]; len(nodes) > 0 {
			parts = append(parts, string(r)+": "+strings.Join(nodes, ","))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// writeStatusText prints the nodes × Services grid and one summary line per Service; observed adds the column
// of what the nodes' exporters observe (--from-exporters).
func writeStatusText(w io.Writer, st []placement.ServiceStatus, colour, observed bool) error {
	p := painter(colour)
	if len(st) == 0 {
		_, err := fmt.Fprintln(w, "No Service with externalTrafficPolicy: Local.")
		return err
	}
	var nodes []string
	for _, n := range st[0].Nodes {
		nodes = append(nodes, n.Node)
	}
	width := 0
	for _, n := range nodes {
		width = max(width, len(n))
	}
	width = max(width, len("drained"))
	pad := func(s string) string { return s + strings.Repeat(" ", width-len(s)) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{"SERVICE", "TYPE"}
	for _, n := range nodes {
		header = append(header, pad(n))
	}
	if observed {
		header = append(header, "OBSERVED")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, s := range st {
		row := []string{s.Namespace + "/" + s.Name, string(s.Type)}
		for _, n := range s.Nodes {
			text, c := cell(s, n)
			row = append(row, p.paint(c, pad(text)))
		}
		if observed {
			row = append(row, observedCell(s))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, s := range st {
		mark := p.paint(green, "ok  ")
		switch {
		case s.Ignored:
			mark = p.paint(dim, "IGN ")
		case s.Failing(): // a node blackholes, or nobody announces a load balancer IP: its traffic is lost
			mark = p.paint(red+bold, "DROP")
		case s.Outage:
			mark = p.paint(yellow, "DOWN")
		}
		summary := s.Summary
		if s.Ignored {
			summary = fmt.Sprintf("ignored (%s: %s): %s", kubeview.AnnotationIntentionalPlacement, s.IgnoredReason, s.Summary)
		}
		fmt.Fprintf(w, "%s %s/%s: %s\n", mark, s.Namespace, s.Name, summary)
	}
	_, err := fmt.Fprintln(w, p.paint(dim, "\nok N: receives and serves (N local endpoints)  DROP: receives and drops (blackhole)  "+
		"IGN, drop: a Service placed so on purpose (annotation "+kubeview.AnnotationIntentionalPlacement+"), its drops fail nothing  "+
		"drained: no ready endpoint, its health check answers 503  drop?: would drop what only the node can tell reaches it (an externalIP, a VIP an announcer may hold, a NodePort outside nodePortAddresses)  "+
		"-: receives nothing"))
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// statusJSON is the status output: every node and every Local Service.
type statusJSON struct {
	Nodes    []string                  `json:"nodes"`
	Services []placement.ServiceStatus `json:"services"`
}

func writeStatusJSON(w io.Writer, c *placement.Cluster, st []placement.ServiceStatus) error {
	out := statusJSON{Nodes: []string{}, Services: st}
	for _, n := range c.Nodes {
		out.Nodes = append(out.Nodes, n.Name)
	}
	if out.Services == nil {
		out.Services = []placement.ServiceStatus{}
	}
	return writeJSON(w, out)
}

func severityColour(s placement.Severity) string {
	switch s {
	case placement.Critical:
		return red + bold
	case placement.Warning:
		return yellow
	}
	return dim
}

// writeAuditText prints each Service's story and its findings, then a one-line tally.
func writeAuditText(w io.Writer, rep placement.Report, colour bool) error {
	p := painter(colour)
	if len(rep.Services) == 0 {
		_, err := fmt.Fprintln(w, "No Service with externalTrafficPolicy: Local.")
		return err
	}
	count := map[placement.Severity]int{}
	ignored := 0
	for _, s := range rep.Services {
		fmt.Fprintf(w, "%s (%s): %s\n", p.paint(bold, s.Service.Namespace+"/"+s.Service.Name), s.Type, s.Story)
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
			mark := p.paint(severityColour(f.Severity), strings.ToUpper(f.Severity.String()))
			if f.Ignored {
				ignored++
				mark = p.paint(dim, "IGNORED ("+f.Severity.String()+")")
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
