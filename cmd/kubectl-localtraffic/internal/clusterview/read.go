package clusterview

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/placement"
)

// Loader reads a live cluster's objects in namespace ("" for all): LoadLive (audit, drain-check) or what status
// reads.
type Loader func(ctx context.Context, cs kubernetes.Interface, namespace string) (*placement.Cluster, error)

// ReadCluster reads the live cluster with load, the announcers' records beside it, in the namespace the flags
// name; it returns the namespace too.
func ReadCluster(ctx context.Context, env *cli.Env, flags *cli.Flags, ann Announcers, load Loader) (*placement.Cluster, string, error) {
	ns, err := flags.Namespace()
	if err != nil {
		return nil, "", err
	}
	cs, err := env.Client(flags.Kube)
	if err != nil {
		return nil, "", cli.BadInputf("kubeconfig: %w", err)
	}
	announcers := ann.start(ctx, env, flags)
	c, err := load(ctx, cs, ns)
	var services []*corev1.Service
	if err == nil {
		services = c.Services
	}
	snap, annErr := announcers(services)
	if err != nil {
		return nil, ns, cli.APIError{Err: err}
	}
	if annErr != nil {
		return nil, ns, annErr
	}
	c.Announcers = snap
	return c, ns, nil
}
