package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/common/version"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// defaultRequestTimeout is --request-timeout's default.
const defaultRequestTimeout = "30s"

// app is one invocation: its streams, its environment and how it reaches the apiserver (tests replace it with
// a fake clientset).
type app struct {
	in          io.Reader
	out, errOut io.Writer
	getenv      func(string) string
	terminal    bool // stdout is a terminal
	// errTerminal: stderr is a terminal, where status shows its progress.
	errTerminal bool
	client      func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error)
	// exporters reaches a port of a pod as the user (status --from-exporters); tests replace it.
	exporters func(*genericclioptions.ConfigFlags) (fetcher, error)
	// dynamic reaches the announcers' objects (MetalLB's statuses, Cilium's leases); nil reads none (tests
	// replace it with a fake dynamic client).
	dynamic func(*genericclioptions.ConfigFlags) (dynamic.Interface, error)
}

type options struct {
	kube          *genericclioptions.ConfigFlags
	allNamespaces bool
	failOn        string
	files         genericclioptions.FileNameFlags // -f and -R, as kubectl's
	nodes         int
	nodesFile     string
	stdinName     string
	// fromExporters: status reads what each node's exporter observes (through a port-forward to its pod) into a
	// column.
	fromExporters     bool
	exporterNamespace string
	exporterDaemonSet string
	// nodePortAddresses: kube-proxy's nodePortAddresses as the user knows it (status).
	nodePortAddresses []string
	// ciliumNamespace: where Cilium's L2 announcement Leases are (live status, audit, drain-check).
	ciliumNamespace string
	// status's output, and the nodes (--node, --node-selector) and Services (-l) it judges.
	print        cli.PrintFlags
	nodeNames    []string
	nodeSelector string
	selector     string
	// color: auto, always or never.
	color string
	// ignoreSelector: the exporter's --services.ignore-selector as the user knows it (status).
	ignoreSelector string
	// prom: where status and drain-check read the exporters' verdicts from a Prometheus API (--prometheus).
	prom promFlags
}

// run parses args and executes the command; it returns the exit status.
func (a *app) run(ctx context.Context, args []string) int {
	// -R is on unless turned off: before the resource builder read -f, a directory was always read recursively,
	// and a CI gate that silently audits less is worse than kubectl's default.
	o := &options{kube: genericclioptions.NewConfigFlags(true), files: genericclioptions.FileNameFlags{
		Filenames: &[]string{}, Recursive: ptr.To(true),
		Usage: "manifests to audit: file, directory, glob, URL or - for stdin; repeatable or comma-separated"}}
	o.print = cli.NewPrintFlags()
	// A request that hangs (an unreachable apiserver, a stuck proxy) fails after this long instead of never:
	// client-go's default is no timeout. --request-timeout 0 restores it.
	o.kube.Timeout = ptr.To(defaultRequestTimeout)
	code := cli.ExitClean
	root := &cobra.Command{
		Use:   "kubectl-localtraffic",
		Short: "The placement story of every Service with externalTrafficPolicy: Local",
		Long: "kubectl localtraffic shows which nodes receive each Local Service's external traffic and which of them drop it " +
			"(status), and audits the placement of the workloads behind them, live or from manifests before they ship (audit).",
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl localtraffic"},
		// Set by the release pipeline's (and make build's) -ldflags, as the exporter's; cobra adds --version only
		// when it is not empty.
		Version: cmp.Or(version.Version, "unknown"),
	}
	// The same lines as the exporter's --version (prometheus/common/version): version, revision (the commit),
	// build date, Go version and platform.
	root.SetVersionTemplate(version.Print("kubectl-localtraffic") + "\n")
	root.SetArgs(args)
	root.SetIn(a.in)
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.BadInput{Err: err} })
	o.kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "every namespace")
	root.PersistentFlags().StringVar(&o.color, "color", "auto", "colour the output: auto (on a terminal, unless NO_COLOR is set or TERM is dumb), always or never")

	status := &cobra.Command{
		Use:   "status [SERVICE]",
		Short: "Every Local Service: how many nodes receive its external traffic, serve it, drop it",
		Long: "For each Service with externalTrafficPolicy Local, one row: the nodes that receive its external traffic, " +
			"serve it and drop it (blackholes), from the API alone (the exporter's rules, minus what only a node can see), " +
			"and the first dropping nodes; worst first. -o wide adds one column per node; --node and --node-selector judge " +
			"only those nodes (the counts are of them). --prometheus URL (or --from-exporters, without Prometheus) adds what each node's exporter " +
			"reports, the OBSERVED column: what the alerts page on, the reason of each blackhole." + cli.ExitHelp("status"),
		Example: "  kubectl localtraffic status -A\n  kubectl localtraffic status -n shop checkout -o wide\n" +
			"  kubectl localtraffic status -A --node-selector topology.kubernetes.io/zone=eu-1a -o yaml\n" +
			"  kubectl localtraffic status -A -o jsonpath='{range .items[?(@.status==\"Failing\")]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}'\n" +
			"  kubectl localtraffic status -A --prometheus http://prometheus-operated.monitoring:9090\n" +
			"  kubectl localtraffic status -A --prometheus https://mimir.example/prometheus --prometheus-header 'X-Scope-OrgID: prod' --prometheus-bearer-token-file token\n" +
			"  kubectl localtraffic status -A --from-exporters --exporter-namespace localtraffic-system",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeServices(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			code, err = a.status(ctx, o, args)
			return err
		},
	}
	o.print.Print.AddFlags(status)
	status.Flags().Lookup("output").Usage = "output format: " + strings.Join(o.print.Formats("wide"), ", ") + " (default: text, one row per Service)"
	status.Flags().BoolVar(&o.print.NoHeaders, "no-headers", false, "print the table without its header line")
	status.Flags().StringArrayVar(&o.nodeNames, "node", nil, "judge only this node (repeatable): the counts are of the named nodes, and -o json|yaml carry each one's verdict (as they do for a named SERVICE)")
	status.Flags().StringVar(&o.nodeSelector, "node-selector", "", "judge only the nodes this label selector selects (read so from the API): the counts are of them, and -o json|yaml carry each one's verdict")
	status.Flags().StringVarP(&o.selector, "selector", "l", "", "only the Services this label selector selects (read so from the API)")
	_ = status.RegisterFlagCompletionFunc("node", a.completeNodes(o))
	status.Flags().BoolVar(&o.fromExporters, "from-exporters", false, "also show what each node's exporter observes (an OBSERVED column: "+
		"traffic_lost, health_check_ignored, no_traffic_seen, ... or no_blackhole), read through a port-forward to each exporter pod "+
		"(behind kube-rbac-proxy, on the pod's loopback), for clusters without Prometheus: needs get on daemonsets, list on pods and get and create on pods/portforward in --exporter-namespace. "+
		"The exporter's pods run with hostNetwork, so that right reaches every port on every node's loopback: the plugin forwards only to the exporter's own port of the DaemonSet's pods, "+
		"but grant it only to who may have that reach (--prometheus needs none)")
	status.Flags().StringVar(&o.exporterNamespace, "exporter-namespace", "localtraffic-system", "the exporter DaemonSet's namespace (--from-exporters)")
	status.Flags().StringSliceVar(&o.nodePortAddresses, "node-port-addresses", nil, "kube-proxy's nodePortAddresses (CIDRs, or primary), "+
		"which the API does not show: a node none of whose addresses is inside serves no NodePort, and a NodePort it would drop is "+
		"shown as cannot tell (default: kube-proxy's default, every node serves NodePorts)")
	addAnnouncerFlags(status, o)
	status.Flags().StringVar(&o.ignoreSelector, "ignore-selector", "", "the exporter's --services.ignore-selector, which the API does not show: "+
		"the Services it selects are marked ignored and fail nothing, as the exporter marks them (no shipped alert pages on them)")
	status.Flags().StringVar(&o.exporterDaemonSet, "exporter-daemonset", "", "the exporter's DaemonSet (--from-exporters; default: the one in --exporter-namespace that runs the exporter)")
	addPrometheusFlags(status, &o.prom)

	audit := &cobra.Command{
		Use:   "audit",
		Short: "The placement story of each Local Service and what is wrong with it",
		Long: "Audits every Service with externalTrafficPolicy Local: live from the cluster, or with -f from manifests " +
			"(files, directories, - for stdin: the output of kustomize build or helm template) against --nodes N synthetic " +
			"nodes or the Node objects of --nodes-file." + cli.ExitHelp("audit"),
		Example: "  kubectl localtraffic audit -A\n  kustomize build deploy/overlays/prod | kubectl localtraffic audit -f - --nodes 3\n" +
			"  kubectl localtraffic audit -f manifests/ --nodes-file nodes.yaml -o sarif > audit.sarif",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			code, err = a.audit(ctx, o)
			return err
		},
	}
	o.print.Print.AddFlags(audit)
	audit.Flags().Lookup("output").Usage = "output format: " + strings.Join(o.print.Formats("sarif"), ", ") + " (default: text; -o name: one line per Service)"
	audit.Flags().StringVar(&o.failOn, "fail-on", "warning", "lowest severity that fails: info, warning or critical")
	o.files.AddFlags(audit.Flags())
	audit.Flags().IntVar(&o.nodes, "nodes", 0, "manifest mode: this many synthetic untainted nodes receive the traffic")
	audit.Flags().StringVar(&o.nodesFile, "nodes-file", "", "manifest mode: Node objects (YAML or JSON) standing in for the cluster")
	addAnnouncerFlags(audit, o)
	audit.Flags().StringVar(&o.stdinName, "stdin-filename", "", "with -f - and -o sarif (required there): the repository file code scanning attaches standard input's findings to, e.g. the kustomization that was built")
	drain := &cobra.Command{
		Use:   "drain-check NODE",
		Short: "Before draining NODE: which Local Services would lose traffic, and for how long the load balancer keeps sending",
		Long: "For every Local Service with an endpoint on NODE: whether NODE is in rotation for it, whether the other nodes still " +
			"serve once kubectl drain has evicted NODE's pods (PodDisruptionBudgets that allow no disruption hold theirs, DaemonSets' " +
			"stay), where the scheduler can put the evicted pods, and the load balancer's health check interval × threshold from the " +
			"Service's annotations (unknown otherwise); with --prometheus, the blackholes the nodes' exporters report now." + cli.ExitHelp("drain-check"),
		Example: "  kubectl localtraffic drain-check node-7 -A\n  kubectl localtraffic drain-check node-7 -A -o json && kubectl drain node-7 --ignore-daemonsets\n" +
			"  kubectl localtraffic drain-check node-7 -A --prometheus http://prometheus-operated.monitoring:9090",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNodes(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			code, err = a.drainCheck(ctx, o, args[0])
			return err
		},
	}
	o.print.Print.AddFlags(drain)
	drain.Flags().Lookup("output").Usage = "output format: " + strings.Join(o.print.Formats(), ", ") + " (default: text; -o name: one line per Service with an endpoint on NODE)"
	addAnnouncerFlags(drain, o)
	addPrometheusFlags(drain, &o.prom)
	root.AddCommand(status, audit, drain)

	if err := root.Execute(); err != nil {
		msg := err.Error()
		if strings.HasPrefix(msg, "unknown command") || strings.Contains(msg, "accepts") {
			err = cli.BadInput{Err: err}
		}
		fmt.Fprintf(a.errOut, "kubectl-localtraffic: %s\n", cli.OneLine(err.Error()))
		if errors.As(err, new(cli.APIError)) {
			return cli.ExitAPI
		}
		return cli.ExitError
	}
	return code
}

// namespace is where to look: -A for all, else -n, else the kubeconfig context's namespace.
func (o *options) namespace() (string, error) {
	if o.allNamespaces {
		return "", nil
	}
	if o.kube.Namespace != nil && *o.kube.Namespace != "" {
		return *o.kube.Namespace, nil
	}
	ns, _, err := o.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", cli.BadInputf("kubeconfig: %w", err)
	}
	return ns, nil
}

func (a *app) liveCluster(ctx context.Context, o *options) (*placement.Cluster, string, error) {
	return a.readCluster(ctx, o, loadLive)
}

// readCluster reads the live cluster with load: loadLive (audit, drain-check) or loadStatus.
func (a *app) readCluster(ctx context.Context, o *options,
	load func(context.Context, kubernetes.Interface, string) (*placement.Cluster, error)) (*placement.Cluster, string, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, "", err
	}
	cs, err := a.client(o.kube)
	if err != nil {
		return nil, "", cli.BadInputf("kubeconfig: %w", err)
	}
	announcers := a.startAnnouncers(ctx, o)
	c, err := load(ctx, cs, ns)
	ann, annErr := announcers()
	if err != nil {
		return nil, ns, cli.APIError{Err: err}
	}
	if annErr != nil {
		return nil, ns, annErr
	}
	c.Announcers = ann
	return c, ns, nil
}

func (a *app) status(ctx context.Context, o *options, args []string) (int, error) {
	if err := o.print.CheckFor("status", "wide"); err != nil {
		return cli.ExitError, err
	}
	colour, err := a.colourFor(o)
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
	if o.fromExporters && o.prom.url != "" {
		return cli.ExitError, cli.BadInputf("--from-exporters and --prometheus both read the exporters' verdicts: choose one")
	}
	prom, err := o.prom.api()
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
	if a.errTerminal {
		q.progress = newProgress(a.errOut)
	}
	c, ns, err := a.readCluster(ctx, o, q.load)
	if err != nil {
		return cli.ExitError, err
	}
	if c.Nodes, err = pickNodes(c.Nodes, o.nodeNames, o.nodeSelector); err != nil {
		return cli.ExitError, err
	}
	c.NodePortAddresses, c.IgnoreSelector = nodePorts, ignore
	v := statusView{summaries: placement.Summarize(c), perNode: len(o.nodeNames) > 0 || o.nodeSelector != "" || q.service != ""}
	partial := false
	if o.fromExporters {
		cs, err := a.client(o.kube)
		if err != nil {
			return cli.ExitError, cli.BadInputf("kubeconfig: %w", err)
		}
		f, err := a.exporters(o.kube)
		if err != nil {
			return cli.ExitError, cli.BadInputf("kubeconfig: %w", err)
		}
		obs, err := readObserved(ctx, cs, f, o.exporterNamespace, o.exporterDaemonSet)
		if errors.As(err, new(cli.BadInput)) {
			return cli.ExitError, err
		}
		if err != nil {
			// Partial: the nodes that answered still show; the others stay unknown, and the exit status says
			// the picture is incomplete (3) unless a blackhole was found anyway (1).
			fmt.Fprintf(a.errOut, "kubectl-localtraffic: %s\n", cli.OneLine(err.Error()))
			partial = true
		}
		if obs == nil {
			obs = placement.Observed{}
		}
		v.observed = obs
	}
	if prom != nil {
		obs, complete := a.readPrometheus(ctx, o, prom, v.summaries)
		partial = !complete
		v.observed = obs
	}
	if q.service != "" {
		v.summaries = slices.DeleteFunc(v.summaries, func(s placement.Summary) bool { return s.Name != q.service })
		if len(v.summaries) == 0 {
			return cli.ExitError, cli.BadInputf("no Service %q with externalTrafficPolicy Local in namespace %q", q.service, ns)
		}
	}
	if len(v.summaries) == 0 && o.print.Table() {
		// As kubectl get: the table says nothing, stderr says why (a script counting rows reads 0).
		fmt.Fprintln(a.errOut, "No Service with externalTrafficPolicy: Local.")
	}
	if err := printStatus(a.out, v, o.print, colour); err != nil {
		return cli.ExitError, err
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

func (a *app) drainCheck(ctx context.Context, o *options, node string) (int, error) {
	if err := o.print.CheckFor("drain-check"); err != nil {
		return cli.ExitError, err
	}
	colour, err := a.colourFor(o)
	if err != nil {
		return cli.ExitError, err
	}
	prom, err := o.prom.api()
	if err != nil {
		return cli.ExitError, err
	}
	c, _, err := a.liveCluster(ctx, o)
	if err != nil {
		return cli.ExitError, err
	}
	rep, err := placement.DrainCheck(c, node)
	if err != nil {
		return cli.ExitError, cli.BadInput{Err: err}
	}
	complete := true
	if prom != nil {
		var obs placement.Observed
		obs, complete = a.readPrometheus(ctx, o, prom, placement.Summarize(c))
		rep.AddObserved(obs)
	}
	if o.print.Table() {
		err = writeDrainText(a.out, rep, colour)
	} else {
		doc, items := drainDocument(rep)
		err = cli.PrintDocument(a.out, o.print, doc, items)
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

func (a *app) audit(ctx context.Context, o *options) (int, error) {
	if err := o.print.CheckFor("audit", "sarif"); err != nil {
		return cli.ExitError, err
	}
	output := o.print.Output()
	colour, err := a.colourFor(o)
	if err != nil {
		return cli.ExitError, err
	}
	failOn, ok := placement.ParseSeverity(o.failOn)
	if !ok {
		return cli.ExitError, cli.BadInputf("unknown --fail-on %q: info, warning or critical", o.failOn)
	}
	if output == "sarif" && slices.Contains(*o.files.Filenames, "-") && o.stdinName == "" {
		return cli.ExitError, cli.BadInputf("-o sarif with -f -: name the repository file standard input comes from with --stdin-filename (e.g. deploy/overlays/prod/kustomization.yaml); code scanning cannot attach findings to \"stdin\"")
	}
	var c *placement.Cluster
	if len(*o.files.Filenames) > 0 {
		var err error
		if c, err = a.manifestCluster(o); err != nil {
			return cli.ExitError, err
		}
	} else {
		if o.nodes != 0 || o.nodesFile != "" {
			return cli.ExitError, cli.BadInputf("--nodes and --nodes-file stand in for the cluster in manifest mode: give -f too")
		}
		var err error
		if c, _, err = a.liveCluster(ctx, o); err != nil {
			return cli.ExitError, err
		}
	}
	rep := placement.Audit(c)
	switch output {
	case "", "text":
		err = writeAuditText(a.out, rep, colour)
	case "sarif":
		err = writeSARIF(a.out, rep, o.stdinName)
	default:
		doc, items := auditDocument(rep)
		err = cli.PrintDocument(a.out, o.print, doc, items)
	}
	if err != nil {
		return cli.ExitError, err
	}
	if rep.Worst() >= failOn {
		return cli.ExitFindings, nil
	}
	return cli.ExitClean, nil
}

func (a *app) manifestCluster(o *options) (*placement.Cluster, error) {
	if o.nodes < 0 {
		return nil, cli.BadInputf("--nodes %d: want a positive number", o.nodes)
	}
	if o.nodes > 0 && o.nodesFile != "" {
		return nil, cli.BadInputf("--nodes and --nodes-file both given: choose one")
	}
	defaultNS := "default"
	if o.kube.Namespace != nil && *o.kube.Namespace != "" {
		defaultNS = *o.kube.Namespace
	}
	c := &placement.Cluster{}
	if err := loadManifests(c, o.files.ToOptions(), a.in, defaultNS); err != nil {
		return nil, err
	}
	switch {
	case o.nodes > 0:
		c.Nodes = placement.SyntheticNodes(o.nodes)
	case o.nodesFile != "":
		nodes, err := loadNodesFile(o.nodesFile, a.in)
		if err != nil {
			return nil, err
		}
		c.Nodes = nodes
	case len(c.Nodes) == 0:
		return nil, cli.BadInputf("manifest mode needs the nodes that receive the traffic: --nodes N or --nodes-file FILE")
	}
	// Manifests describe what is to be, not what runs: pods and slices in them are not "now".
	c.Pods, c.EndpointSlices = nil, nil
	return c, nil
}

// colour: only on a terminal, and never when NO_COLOR is set (https://no-color.org) or TERM is dumb.
func (a *app) colour() bool {
	return a.terminal && a.getenv("NO_COLOR") == "" && a.getenv("TERM") != "dumb"
}

// colourFor is --color: auto is colour()'s rule, always and never are what they say.
func (a *app) colourFor(o *options) (bool, error) {
	switch o.color {
	case "auto":
		return a.colour(), nil
	case "always":
		return true, nil
	case "never":
		return false, nil
	}
	return false, cli.BadInputf("--color %q: auto, always or never", o.color)
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
