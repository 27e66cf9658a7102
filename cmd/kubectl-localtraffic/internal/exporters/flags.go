package exporters

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// ReadFlags is --from-exporters and where the exporter's DaemonSet is found (--exporter-namespace,
// --exporter-daemonset): the verbs that read each node's exporter through a port-forward.
type ReadFlags struct {
	From      bool
	namespace string
	daemonSet string
}

// AddFlags adds the flags to a verb; what says what the verb shows of the exporters' reports.
func (r *ReadFlags) AddFlags(cmd *cobra.Command, what string) {
	f := cmd.Flags()
	f.BoolVar(&r.From, "from-exporters", false, what+", read through a port-forward to each exporter pod "+
		"(behind kube-rbac-proxy, on the pod's loopback), for clusters without Prometheus: needs get on daemonsets, list on pods and get and create on pods/portforward in --exporter-namespace. "+
		"The exporter's pods run with hostNetwork, so that right reaches every port on every node's loopback: the plugin forwards only to the exporter's own port of the DaemonSet's pods, "+
		"but grant it only to who may have that reach (--prometheus needs none)")
	f.StringVar(&r.namespace, "exporter-namespace", "localtraffic-system", "the exporter DaemonSet's namespace (--from-exporters)")
	f.StringVar(&r.daemonSet, "exporter-daemonset", "", "the exporter's DaemonSet (--from-exporters; default: the one in --exporter-namespace that runs the exporter)")
}

// Read reads what each node's exporter observes (--from-exporters). Partial: the nodes that answered still
// show; the others stay unknown, one line on stderr names them, and complete is false (exit status 3 unless a
// blackhole was found anyway). An error is bad input, which ends the command.
func (r ReadFlags) Read(ctx context.Context, env *cli.Env, flags *cli.Flags) (obs placement.Observed, complete bool, err error) {
	cs, err := env.Client(flags.Kube)
	if err != nil {
		return nil, false, cli.BadInputf("kubeconfig: %w", err)
	}
	f, err := env.Forward(flags.Kube)
	if err != nil {
		return nil, false, cli.BadInputf("kubeconfig: %w", err)
	}
	obs, err = ReadObserved(ctx, cs, f, r.namespace, r.daemonSet)
	if errors.As(err, new(cli.BadInput)) {
		return nil, false, err
	}
	complete = true
	if err != nil {
		fmt.Fprintf(env.ErrOut, "kubectl-localtraffic: %s\n", cli.OneLine(err.Error()))
		complete = false
	}
	if obs == nil {
		obs = placement.Observed{}
	}
	return obs, complete, nil
}
