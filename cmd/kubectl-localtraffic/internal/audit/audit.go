// Package audit is the plugin's audit verb: the placement story of each Local Service and what is wrong with it,
// live from the cluster or from manifests (-f) against synthetic nodes or a nodes file; its options, command,
// manifest reader and printers (text, SARIF, the AuditReport document).
package audit

import (
	"context"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clusterview"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// Options are audit's flags and what it runs with.
type Options struct {
	env   *cli.Env
	flags *cli.Flags

	print      cli.PrintFlags
	failOn     string
	files      genericclioptions.FileNameFlags // -f and -R, as kubectl's
	nodes      int
	nodesFile  string
	stdinName  string
	announcers clusterview.Announcers
}

// NewCmd is the audit command.
func NewCmd(root *cli.Root) *cobra.Command {
	// -R is on unless turned off: before the resource builder read -f, a directory was always read recursively,
	// and a CI gate that silently audits less is worse than kubectl's default.
	o := &Options{env: root.Env, flags: root.Flags, print: cli.NewPrintFlags(), files: genericclioptions.FileNameFlags{
		Filenames: &[]string{}, Recursive: ptr.To(true),
		Usage: "manifests to audit: file, directory, glob, URL or - for stdin; repeatable or comma-separated"}}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "The placement story of each Local Service and what is wrong with it",
		Long: "Audits every Service with externalTrafficPolicy Local: live from the cluster, or with -f from manifests " +
			"(files, directories, - for stdin: the output of kustomize build or helm template) against --nodes N synthetic " +
			"nodes or the Node objects of --nodes-file." + cli.ExitHelp("audit"),
		Example: "  kubectl localtraffic audit -A\n  kustomize build deploy/overlays/prod | kubectl localtraffic audit -f - --nodes 3\n" +
			"  kubectl localtraffic audit -f manifests/ --nodes-file nodes.yaml -o sarif > audit.sarif",
		Args: cobra.NoArgs,
		RunE: root.RunE(func(cmd *cobra.Command, _ []string) (int, error) { return o.Run(cmd.Context()) }),
	}
	o.print.Print.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "output format: " + strings.Join(o.print.Formats("sarif"), ", ") + " (default: text; -o name: one line per Service)"
	cmd.Flags().StringVar(&o.failOn, "fail-on", "warning", "lowest severity that fails: info, warning or critical")
	o.files.AddFlags(cmd.Flags())
	cmd.Flags().IntVar(&o.nodes, "nodes", 0, "manifest mode: this many synthetic untainted nodes receive the traffic")
	cmd.Flags().StringVar(&o.nodesFile, "nodes-file", "", "manifest mode: Node objects (YAML or JSON) standing in for the cluster")
	o.announcers.AddFlags(cmd)
	cmd.Flags().StringVar(&o.stdinName, "stdin-filename", "", "with -f - and -o sarif (required there): the repository file code scanning attaches standard input's findings to, e.g. the kustomization that was built")
	return cmd
}

// Run audits and prints the report; it returns the exit status.
func (o *Options) Run(ctx context.Context) (int, error) {
	if err := o.print.CheckFor("audit", "sarif"); err != nil {
		return cli.ExitError, err
	}
	output := o.print.Output()
	colour, err := o.flags.Colour(o.env)
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
		if c, err = o.manifestCluster(); err != nil {
			return cli.ExitError, err
		}
	} else {
		if o.nodes != 0 || o.nodesFile != "" {
			return cli.ExitError, cli.BadInputf("--nodes and --nodes-file stand in for the cluster in manifest mode: give -f too")
		}
		var err error
		if c, _, err = clusterview.ReadCluster(ctx, o.env, o.flags, o.announcers, clusterview.LoadLive); err != nil {
			return cli.ExitError, err
		}
	}
	rep := placement.Audit(c)
	if err := o.write(o.env.Out, rep, colour); err != nil {
		return cli.ExitError, err
	}
	if rep.Worst() >= failOn {
		return cli.ExitFindings, nil
	}
	return cli.ExitClean, nil
}

// write prints rep as -o asks.
func (o *Options) write(w io.Writer, rep placement.Report, colour bool) error {
	switch o.print.Output() {
	case "", "text":
		return writeText(w, rep, colour)
	case "sarif":
		return writeSARIF(w, rep, o.stdinName)
	}
	doc, items := document(rep)
	return cli.PrintDocument(w, o.print, doc, items)
}

// manifestCluster is the cluster of the -f manifests and the nodes --nodes or --nodes-file stand in with.
func (o *Options) manifestCluster() (*placement.Cluster, error) {
	if o.nodes < 0 {
		return nil, cli.BadInputf("--nodes %d: want a positive number", o.nodes)
	}
	if o.nodes > 0 && o.nodesFile != "" {
		return nil, cli.BadInputf("--nodes and --nodes-file both given: choose one")
	}
	defaultNS := "default"
	if kube := o.flags.Kube; kube.Namespace != nil && *kube.Namespace != "" {
		defaultNS = *kube.Namespace
	}
	c := &placement.Cluster{}
	if err := loadManifests(c, o.files.ToOptions(), o.env.In, defaultNS); err != nil {
		return nil, err
	}
	switch {
	case o.nodes > 0:
		c.Nodes = placement.SyntheticNodes(o.nodes)
	case o.nodesFile != "":
		nodes, err := loadNodesFile(o.nodesFile, o.env.In)
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
