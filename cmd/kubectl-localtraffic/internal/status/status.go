// Package status is the plugin's status verb: every Local Service, how many nodes receive its external traffic,
// serve it and drop it, from the API alone or with what the nodes' exporters observe; its options, command,
// reads and printers (the table, -o wide's grid, the ServiceStatusList document).
package status

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clusterview"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/exporters"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// Options are status's flags and what it runs with.
type Options struct {
	env   *cli.Env
	flags *cli.Flags

	// print: the output, and the nodes (--node, --node-selector) and Services (-l) it judges.
	print        cli.PrintFlags
	nodeNames    []string
	nodeSelector string
	selector     string
	// fromExporters: read what each node's exporter observes (through a port-forward to its pod) into a column.
	fromExporters exporters.ReadFlags
	// nodePortAddresses: kube-proxy's nodePortAddresses as the user knows it.
	nodePortAddresses []string
	announcers        clusterview.Announcers
	// ignoreSelector: the exporter's --services.ignore-selector as the user knows it.
	ignoreSelector string
	// prom: where the exporters' verdicts are read from a Prometheus API (--prometheus).
	prom exporters.PromFlags
}

// NewCmd is the status command.
func NewCmd(root *cli.Root) *cobra.Command {
	o := &Options{env: root.Env, flags: root.Flags, print: cli.NewPrintFlags()}
	cmd := &cobra.Command{
		Use:   "status [SERVICE]",
		Short: "Every Local Service: how many nodes receive its external traffic, serve it, drop it",
		Long: "For each Service with externalTrafficPolicy Local, one row: the nodes that receive its external traffic, " +
			"serve it and drop it (blackholes), from the API alone (the exporter's rules, minus what only a node can see), " +
			"and the first dropping nodes; worst first. -o wide adds one column per node; --node and --node-selector judge " +
			"only those nodes (the counts are of them). --prometheus URL (or --from-exporters, without Prometheus) adds what each node's exporter " +
			"reports, the OBSERVED column: what the alerts page on, the reason of each blackhole; with -o wide, json or yaml also the PRESTOP " +
			"column (preStop in the documents): the preStop sleep and grace period the Service's pods need to outlast its load balancers' " +
			"measured drain, where they have less." + cli.ExitHelp("status"),
		Example: "  kubectl localtraffic status -A\n  kubectl localtraffic status -n shop checkout -o wide\n" +
			"  kubectl localtraffic status -A --node-selector topology.kubernetes.io/zone=eu-1a -o yaml\n" +
			"  kubectl localtraffic status -A -o jsonpath='{range .items[?(@.status==\"Failing\")]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}'\n" +
			"  kubectl localtraffic status -A --prometheus http://prometheus-operated.monitoring:9090\n" +
			"  kubectl localtraffic status -A --prometheus https://mimir.example/prometheus --prometheus-header 'X-Scope-OrgID: prod' --prometheus-bearer-token-file token\n" +
			"  kubectl localtraffic status -A --from-exporters --exporter-namespace localtraffic-system",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeServices(root.Env, root.Flags),
		RunE:              root.RunE(func(cmd *cobra.Command, args []string) (int, error) { return o.Run(cmd.Context(), args) }),
	}
	f := cmd.Flags()
	o.print.Print.AddFlags(cmd)
	f.Lookup("output").Usage = "output format: " + strings.Join(o.print.Formats("wide"), ", ") + " (default: text, one row per Service)"
	f.BoolVar(&o.print.NoHeaders, "no-headers", false, "print the table without its header line")
	f.StringArrayVar(&o.nodeNames, "node", nil, "judge only this node (repeatable): the counts are of the named nodes, and -o json|yaml carry each one's verdict (as they do for a named SERVICE)")
	f.StringVar(&o.nodeSelector, "node-selector", "", "judge only the nodes this label selector selects (read so from the API): the counts are of them, and -o json|yaml carry each one's verdict")
	f.StringVarP(&o.selector, "selector", "l", "", "only the Services this label selector selects (read so from the API)")
	_ = cmd.RegisterFlagCompletionFunc("node", clusterview.CompleteNodes(root.Env, root.Flags))
	o.fromExporters.AddFlags(cmd, "also show what each node's exporter observes (an OBSERVED column: "+
		"traffic_lost, health_check_ignored, no_traffic_seen, ... or no_blackhole)")
	f.StringSliceVar(&o.nodePortAddresses, "node-port-addresses", nil, "kube-proxy's nodePortAddresses (CIDRs, or primary), "+
		"which the API does not show: a node none of whose addresses is inside serves no NodePort, and a NodePort it would drop is "+
		"shown as cannot tell (default: kube-proxy's default, every node serves NodePorts)")
	o.announcers.AddFlags(cmd)
	f.StringVar(&o.ignoreSelector, "ignore-selector", "", "the exporter's --services.ignore-selector, which the API does not show: "+
		"the Services it selects are marked ignored and fail nothing, as the exporter marks them (no shipped alert pages on them)")
	o.prom.AddFlags(cmd)
	return cmd
}

// Run judges the Local Services (the one args names, when it names one) and prints them; it returns the exit
// status.
func (o *Options) Run(ctx context.Context, args []string) (int, error) {
	if err := o.print.CheckFor("status", "wide"); err != nil {
		return cli.ExitError, err
	}
	colour, err := o.flags.Colour(o.env)
	if err != nil {
		return cli.ExitError, err
	}
	nodePorts, err := parseNodePortAddresses(o.nodePortAddresses)
	if err != nil {
		return cli.ExitError, err
	}
	ignore, err := parseIgnoreSelector(o.ignoreSelector)
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
	q := statusQuery{nodeSelector: o.nodeSelector, selector: o.selector}
	if len(args) == 1 {
		q.service = args[0]
	}
	if len(o.nodeNames) == 1 {
		q.node = o.nodeNames[0]
	}
	if o.env.ErrTerminal {
		q.progress = newProgress(o.env.ErrOut)
	}
	c, ns, err := clusterview.ReadCluster(ctx, o.env, o.flags, o.announcers, q.load)
	if err != nil {
		return cli.ExitError, err
	}
	if c.Nodes, err = pickNodes(c.Nodes, o.nodeNames, o.nodeSelector); err != nil {
		return cli.ExitError, err
	}
	c.NodePortAddresses, c.IgnoreSelector = nodePorts, ignore
	v := statusView{summaries: placement.Summarize(c), perNode: len(o.nodeNames) > 0 || o.nodeSelector != "" || q.service != ""}
	partial := false
	if o.fromExporters.From {
		obs, complete, err := o.fromExporters.Read(ctx, o.env, o.flags)
		if err != nil {
			return cli.ExitError, err
		}
		partial = !complete
		v.observed = obs
	}
	if prom != nil {
		obs, complete := o.prom.Observe(ctx, o.env.ErrOut, prom, v.summaries)
		partial = !complete
		v.observed = obs
	}
	// A Prometheus that failed the verdicts' query is not asked again: its one line on stderr says enough.
	if o.showsPreStop() && (o.fromExporters.From || prom != nil && (!partial || len(v.observed) > 0)) {
		complete, err := o.advisePreStop(ctx, c, prom, &v)
		if err != nil {
			return cli.ExitError, err
		}
		partial = partial || !complete
	}
	if q.service != "" {
		v.summaries = slices.DeleteFunc(v.summaries, func(s placement.Summary) bool { return s.Name != q.service })
		if len(v.summaries) == 0 {
			return cli.ExitError, cli.BadInputf("no Service %q with externalTrafficPolicy Local in namespace %q", q.service, ns)
		}
	}
	if len(v.summaries) == 0 && o.print.Table() {
		// As kubectl get: the table says nothing, stderr says why (a script counting rows reads 0).
		fmt.Fprintln(o.env.ErrOut, "No Service with externalTrafficPolicy: Local.")
	}
	if err := printStatus(o.env.Out, v, o.print, colour); err != nil {
		return cli.ExitError, err
	}
	if note := announcerUnknownNote(v.summaries); note != "" && o.print.Table() {
		fmt.Fprintf(o.env.ErrOut, "kubectl-localtraffic: %s\n", note)
	}
	for i := range v.summaries {
		if v.summaries[i].Failing() || !v.summaries[i].Ignored && v.observedBlackhole(&v.summaries[i]) {
			return cli.ExitFindings, nil
		}
	}
	if partial {
		return cli.ExitAPI, nil
	}
	return cli.ExitClean, nil
}

// showsPreStop: the output shows the preStop advice (-o wide's PRESTOP column, the documents' preStop), so the
// measured drain is worth reading (--prometheus asks a second query for it, over a week of histograms).
func (o *Options) showsPreStop() bool {
	switch o.print.Output() {
	case "", "text", "name":
		return false
	}
	return true
}

// advisePreStop reads the measured drains (from the exporters' reports --from-exporters already read, or with
// one more --prometheus query) and, for the Services that have one, the pods and workload templates of their
// namespaces, into v's preStop advice. complete is false when the drain query failed (said on stderr); an error
// is a failed list.
func (o *Options) advisePreStop(ctx context.Context, c *placement.Cluster, prom promv1.API, v *statusView) (complete bool, err error) {
	var drains placement.MeasuredDrains
	complete = true
	if o.fromExporters.From {
		drains = exporters.DrainsFromExporters(v.observed)
	} else {
		drains, complete = o.prom.Drains(ctx, o.env.ErrOut, prom)
	}
	v.preStopRead = complete
	var namespaces []string
	for i := range v.summaries {
		if _, ok := drains[v.summaries[i].Namespace+"/"+v.summaries[i].Name]; ok {
			namespaces = append(namespaces, v.summaries[i].Namespace)
		}
	}
	if len(namespaces) == 0 {
		return complete, nil
	}
	cs, err := o.env.Client(o.flags.Kube)
	if err != nil {
		return false, cli.BadInputf("kubeconfig: %w", err)
	}
	if err := clusterview.LoadWorkloads(ctx, cs, namespaces, c); err != nil {
		return false, cli.APIError{Err: err}
	}
	v.preStop = placement.AdvisePreStop(c, drains)
	return complete, nil
}

// pickNodes keeps the nodes --node names (all when none is named); a name the list lacks is bad input.
func pickNodes(nodes []*corev1.Node, names []string, selector string) ([]*corev1.Node, error) {
	if len(names) == 0 {
		return nodes, nil
	}
	var out []*corev1.Node
	for _, name := range names {
		i := slices.IndexFunc(nodes, func(n *corev1.Node) bool { return n.Name == name })
		if i < 0 {
			if selector != "" {
				return nil, cli.BadInputf("--node %s: no such node among those --node-selector %q selects", name, selector)
			}
			return nil, cli.BadInputf("--node %s: no such node", name)
		}
		if !slices.Contains(out, nodes[i]) {
			out = append(out, nodes[i])
		}
	}
	return out, nil
}

// parseNodePortAddresses reads --node-port-addresses as kube-proxy reads its nodePortAddresses: CIDRs, and the
// keyword primary (the node's primary IP of each family, which every node has: as if not given). nil: not given.
func parseNodePortAddresses(vals []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		if v == "primary" {
			return nil, nil
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return nil, cli.BadInputf("--node-port-addresses %q: want CIDRs (10.0.0.0/8,fd00::/64) or primary", v)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// announcerUnknownNote is the table's one line of why for the ANNOUNCER-UNKNOWN column ("" when no Service has
// such an address; -o json carries it per Service): what was seen of MetalLB's speakers, the same for every
// Service.
func announcerUnknownNote(summaries []placement.Summary) string {
	ips, why := 0, ""
	for i := range summaries {
		ips += len(summaries[i].AnnouncerUnknown)
		why = cmpOr(why, summaries[i].AnnouncerUnknownWhy)
	}
	if ips == 0 {
		return ""
	}
	return fmt.Sprintf("the announcer of %d load balancer IP(s) MetalLB allocated is unknown (ANNOUNCER-UNKNOWN): %s; "+
		"whoever announces them (Calico's BGP serviceLoadBalancerIPs, say) writes nothing the plugin reads, so they are not "+
		"called unannounced, and the nodes without a ready endpoint show unknown, not drop?", ips, why)
}
