package draincheck

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// writeText prints drain-check's table (one row per Local Service with an endpoint on the node) and, under
// each Service that loses traffic, why; then one verdict line.
func writeText(w io.Writer, rep placement.DrainReport, colour bool) error {
	p := cli.Painter(colour)
	if len(rep.Services) == 0 {
		_, err := fmt.Fprintf(w, "No Local Service has an endpoint on %s: draining it loses no Local Service's traffic.\n", rep.Node)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tTYPE\tENDPOINTS\tIN ROTATION\tEVICTED\tHELD\tELSEWHERE\tSERVING AFTER\tLB CHECK\tDRAIN")
	for _, s := range rep.Services {
		lb := "-"
		switch w := s.LoadBalancerWindow; {
		case s.AnnouncerFailover != nil:
			lb = "failover"
		case w != nil && w.Source == placement.WindowMeasured:
			lb = fmt.Sprintf("%gs measured (p95 of %g)", roundTenth(w.Seconds), roundTenth(s.MeasuredDrain.Episodes))
		case s.LoadBalancerCheck != nil:
			lb = fmt.Sprintf("%gs (%s × %d)", s.LoadBalancerCheck.Seconds, s.LoadBalancerCheck.Interval.Duration, s.LoadBalancerCheck.Threshold)
		case s.Type == "LoadBalancer" && s.InRotation != "no":
			lb = "unknown"
		}
		elsewhere := "nowhere"
		if len(s.Elsewhere) > 0 {
			elsewhere = strings.Join(s.Elsewhere, ",")
		}
		verdict := p.Paint(cli.Red+cli.Bold, "LOSES")
		if !s.Loses {
			verdict = "ok"
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", s.Namespace, s.Name, s.Type, s.LocalEndpoints, s.InRotation,
			len(s.Evicted), len(s.Blocked)+len(s.Stay), elsewhere, s.ServingAfter, lb, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	losing := 0
	for _, s := range rep.Services {
		lines := append(append([]string{}, s.Why...), s.Unknown...)
		if f := s.AnnouncerFailover; f != nil {
			lines = append(lines, failoverLine(rep.Node, f))
		}
		for _, b := range s.Blocked {
			lines = append(lines, "the drain waits for "+b)
		}
		lines = append(lines, preStopLines(s)...)
		for _, r := range placement.ObservedBlackholes() {
			if nodes := s.Observed[string(r)]; len(nodes) > 0 {
				lines = append(lines, fmt.Sprintf("now, before any drain, its exporters report %s on %s", r, cli.NodeList(nodes)))
			}
		}
		if len(lines) == 0 {
			continue
		}
		if s.Loses {
			losing++
		}
		fmt.Fprintf(w, "\n%s/%s:\n", s.Namespace, s.Name)
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	verdict := "draining " + rep.Node + " leaves every Local Service served" + lbWindowNote(rep) + failoverNote(rep)
	switch {
	case rep.Loses:
		verdict = p.Paint(cli.Red+cli.Bold, "draining "+rep.Node+" loses traffic of "+strconv.Itoa(losing)+" Local Service(s)")
	case rep.ObservedBlackholes > 0:
		// The drain changes nothing the API shows, but the exporters see traffic dropped already: a drain
		// moves load onto nodes that are not all serving.
		verdict = p.Paint(cli.Red+cli.Bold, "draining "+rep.Node+" makes no node drop that does not now, but the exporters report "+
			strconv.Itoa(rep.ObservedBlackholes)+" of these Local Service(s) blackholed now: fix that first")
	}
	_, err := fmt.Fprintf(w, "\n%s\n", verdict)
	return err
}

// lbWindowNote says what "served" leaves out: a load balancer that still sends to the node after its pods stop
// loses those connections until its health check takes the node out (the e2e drain saw it). "" when no Service
// in rotation on the node has a load balancer.
func lbWindowNote(rep placement.DrainReport) string {
	longest, unknown, any := 0.0, false, false
	sources := map[string]bool{}
	for _, s := range rep.Services {
		if s.Type != "LoadBalancer" || s.InRotation == "no" || s.AnnouncerFailover != nil {
			continue // an announcer's failover is failoverNote's
		}
		any = true
		if s.LoadBalancerWindow == nil {
			unknown = true
			continue
		}
		longest = max(longest, s.LoadBalancerWindow.Seconds)
		sources[s.LoadBalancerWindow.Source] = true
	}
	if !any {
		return ""
	}
	window := fmt.Sprintf("up to %gs", roundTenth(longest))
	switch {
	case unknown:
		window = "a time its annotations do not say and no exporter measured"
	case sources[placement.WindowMeasured] && sources[placement.WindowAnnotations]:
		window += " (measured by the exporters where they have episodes, else the annotations' check window)"
	case sources[placement.WindowMeasured]:
		window += " (measured by the exporters: the p95 of their episodes)"
	}
	return "; its load balancers keep sending new connections to " + rep.Node + " for " + window +
		" after its pods stop, and those are lost: label it node.kubernetes.io/exclude-from-external-load-balancers= and wait that out first"
}

// failoverLine says, under a Service, where its announcers move its address and what that costs.
func failoverLine(node string, f *placement.AnnouncerFailover) string {
	names := make([]string, len(f.Sources))
	for i, s := range f.Sources {
		names[i] = string(s)
	}
	gate := ""
	if f.LocalBackendGate {
		gate = "; Cilium moves it only with its local-backend gate (1.20.2 and later): an earlier agent keeps the lease on " +
			node + ", which then drops every client of the address"
	}
	return fmt.Sprintf("%s announces the %s from %s and follows local endpoints: it moves to a node with a ready "+
		"local endpoint (%s) once %s's pods stop; connections sent to %s meanwhile are lost for the failover (seconds), a "+
		"window, not a loss%s", strings.Join(names, ", "), f.Announces, node, cli.NodeList(f.To), node, node, gate)
}

// failoverNote is the verdict's part for the Services whose announcers move their address off the node ("" when
// none): as lbWindowNote for a load balancer's check window, the connections the failover loses.
func failoverNote(rep placement.DrainReport) string {
	n := 0
	for _, s := range rep.Services {
		if s.AnnouncerFailover != nil {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; announcers move the load balancer IP of %d of them off %s to nodes with a ready local endpoint "+
		"once its pods stop: a failover window of seconds, in which new connections sent to %s are lost", n, rep.Node, rep.Node)
}

// roundTenth rounds to a tenth, for seconds and episode counts read from Prometheus (an increase() is fractional).
func roundTenth(x float64) float64 { return math.Round(x*10) / 10 }

// preStopLines says, under a Service with a measured drain, what its pods' preStop lacks to outlast it: per
// workload with less, the exact settings; per workload whose preStop is not a plain sleep, that it is unknown.
func preStopLines(s placement.DrainService) []string {
	a := s.PreStop
	if a == nil {
		return nil
	}
	var out []string
	for _, w := range a.Workloads {
		switch w.Needed {
		case "yes":
			out = append(out, fmt.Sprintf("its load balancers kept sending for %gs (p95) after the health check failed; %s %s's pods stop "+
				"serving after %ds: set lifecycle.preStop.sleep.seconds: %d and terminationGracePeriodSeconds: %d in its pod template",
				roundTenth(a.Drain.P95Seconds), w.Kind, w.Name, *w.PreStopSeconds, w.RecommendedPreStopSeconds, w.RecommendedGraceSeconds))
		case "unknown":
			out = append(out, fmt.Sprintf("its load balancers kept sending for %gs (p95) after the health check failed; %s %s's preStop "+
				"delay is unknown (%s): it needs %ds", roundTenth(a.Drain.P95Seconds), w.Kind, w.Name, w.PreStopUnknown, a.PreStopSeconds))
		}
	}
	return out
}
