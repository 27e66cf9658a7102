// Package draincheck is the plugin's drain-check verb: before draining a node, which Local Services would lose
// traffic and for how long the load balancer keeps sending; its options, command and printers (text, the
// DrainReport document).
package draincheck

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clusterview"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/exporters"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// Options are drain-check's flags and what it runs with.
type Options struct {
	env   *cli.Env
	flags *cli.Flags

	print      cli.PrintFlags
	announcers clusterview.Announcers
	// prom: where the exporters' verdicts are read from a Prometheus API (--prometheus).
	prom exporters.PromFlags
	// fromExporters: the exporters' verdicts and measured drains read from each exporter pod (--from-exporters).
	fromExporters exporters.ReadFlags
}

// NewCmd is the drain-check command.
func NewCmd(root *cli.Root) *cobra.Command {
	o := &Options{env: root.Env, flags: root.Flags, print: cli.NewPrintFlags()}
	cmd := &cobra.Command{
		Use:   "drain-check NODE",
		Short: "Before draining NODE: which Local Services would lose traffic, and for how long the load balancer keeps sending",
		Long: "For every Local Service with an endpoint on NODE: whether NODE is in rotation for it, whether the other nodes still " +
			"serve once kubectl drain has evicted NODE's pods (PodDisruptionBudgets that allow no disruption hold theirs, DaemonSets' " +
			"stay), where the scheduler can put the evicted pods, and the load balancer's health check interval × threshold from the " +
			"Service's annotations (unknown otherwise); with --prometheus (or --from-exporters, without Prometheus), the blackholes the nodes' " +
			"exporters report now, and where they measured how long the Service's load balancers really kept sending to a node after its health " +
			"check failed, that measured drain (its p95) instead of the annotations', and the preStop sleep its pods need to outlast it." + cli.ExitHelp("drain-check"),
		Example: "  kubectl localtraffic drain-check node-7 -A\n  kubectl localtraffic drain-check node-7 -A -o json && kubectl drain node-7 --ignore-daemonsets\n" +
			"  kubectl localtraffic drain-check node-7 -A --prometheus http://prometheus-operated.monitoring:9090\n" +
			"  kubectl localtraffic drain-check node-7 -A --from-exporters",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: clusterview.CompleteNodes(root.Env, root.Flags),
		RunE:              root.RunE(func(cmd *cobra.Command, args []string) (int, error) { return o.Run(cmd.Context(), args[0]) }),
	}
	o.print.Print.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "output format: " + strings.Join(o.print.Formats(), ", ") + " (default: text; -o name: one line per Service with an endpoint on NODE)"
	o.announcers.AddFlags(cmd)
	o.prom.AddFlags(cmd)
	o.fromExporters.AddFlags(cmd, "read the nodes' exporters (the blackholes they report now, the load balancers' measured drain) without Prometheus")
	return cmd
}

// Run checks the drain of node and prints the report; it returns the exit status.
func (o *Options) Run(ctx context.Context, node string) (int, error) {
	if err := o.print.CheckFor("drain-check"); err != nil {
		return cli.ExitError, err
	}
	colour, err := o.flags.Colour(o.env)
	if err != nil {
		return cli.ExitError, err
	}
	if o.fromExporters.From && o.prom.Given() {
		return cli.ExitError, cli.BadInputf("--from-exporters and --prometheus both read the exporters' verdicts: choose one")
	}
	prom, err := o.prom.API()
	if err != nil {
		return cli.ExitError, err
	}
	c, _, err := clusterview.ReadCluster(ctx, o.env, o.flags, o.announcers, clusterview.LoadLive)
	if err != nil {
		return cli.ExitError, err
	}
	rep, err := placement.DrainCheck(c, node)
	if err != nil {
		return cli.ExitError, cli.BadInput{Err: err}
	}
	complete := true
	var drains placement.MeasuredDrains
	switch {
	case prom != nil:
		var obs placement.Observed
		obs, complete = o.prom.Observe(ctx, o.env.ErrOut, prom, placement.Summarize(c))
		rep.AddObserved(obs)
		// A Prometheus that failed the verdicts' query is not asked again: its one line on stderr says enough.
		if complete || len(obs) > 0 {
			var read bool
			drains, read = o.prom.Drains(ctx, o.env.ErrOut, prom)
			complete = complete && read
		}
	case o.fromExporters.From:
		var obs placement.Observed
		obs, complete, err = o.fromExporters.Read(ctx, o.env, o.flags)
		if err != nil {
			return cli.ExitError, err
		}
		rep.AddObserved(obs)
		drains = exporters.DrainsFromExporters(obs)
	}
	rep.AddMeasuredDrains(drains, placement.AdvisePreStop(c, drains))
	if o.print.Table() {
		err = writeText(o.env.Out, rep, colour)
	} else {
		doc, items := document(rep)
		err = cli.PrintDocument(o.env.Out, o.print, doc, items)
	}
	if err != nil {
		return cli.ExitError, err
	}
	if rep.Loses || rep.ObservedBlackholes > 0 {
		return cli.ExitFindings, nil
	}
	if !complete {
		return cli.ExitAPI, nil
	}
	return cli.ExitClean, nil
}
