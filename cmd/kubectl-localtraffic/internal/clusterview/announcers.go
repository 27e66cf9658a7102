package clusterview

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"

	"github.com/localtraffic/localtraffic-exporter/announce"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
)

// Announcers are the flags of the announcers' reads, which every live verb takes (status, audit, drain-check).
type Announcers struct {
	// CiliumNamespace: where Cilium's L2 announcement Leases are.
	CiliumNamespace string
}

// AddFlags adds the announcers' flags to a live command.
func (a *Announcers) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.CiliumNamespace, "cilium-namespace", announce.DefaultCiliumNamespace,
		"the namespace of Cilium's L2 announcement Leases (cilium-l2announce-<namespace>-<service>), as the exporter's --announcers.cilium-namespace")
}

// start reads the announcers' objects cluster-wide (announce.List: MetalLB's statuses, Cilium's leases and L2
// announcement policies) beside the other lists, and returns the wait for it, which settles what one read of
// Cilium's leases leaves in doubt for the Services the verb read (announce.Snapshot.Settle: a lease that looks
// expired, a Service a policy selects with no live lease) by watching those leases for up to a lease duration,
// never longer than --request-timeout. A source that cannot be read is a state, not an error: its load balancer
// IPs keep the answer the API alone gives (cannot tell where no health check decides), and one line on stderr
// names it. A source that is not installed (no CRD) is said nothing of: most clusters run one announcer or none.
// The zero snapshot when the plugin has no dynamic client (tests).
func (a Announcers) start(ctx context.Context, env *cli.Env, flags *cli.Flags) func(services []*corev1.Service) (announce.Snapshot, error) {
	if env.Dynamic == nil {
		return func([]*corev1.Service) (announce.Snapshot, error) { return announce.Snapshot{}, nil }
	}
	dyn, err := env.Dynamic(flags.Kube)
	if err != nil {
		return func([]*corev1.Service) (announce.Snapshot, error) {
			return announce.Snapshot{}, cli.BadInputf("kubeconfig: %w", err)
		}
	}
	var clock announce.Clock = announce.RealClock{}
	if env.Clock != nil {
		clock = env.Clock
	}
	done := make(chan announce.Snapshot, 1)
	go func() { done <- readAnnouncers(ctx, dyn, a.CiliumNamespace, clock.Now()) }()
	return func(services []*corev1.Service) (announce.Snapshot, error) {
		s := (<-done).Settle(ctx, dyn, a.CiliumNamespace, services, clock, requestTimeout(flags))
		if note := unreadAnnouncers(s, a.CiliumNamespace); note != "" {
			fmt.Fprintf(env.ErrOut, "kubectl-localtraffic: %s\n", note)
		}
		return s, nil
	}
}

// requestTimeout is --request-timeout as client-go reads it (a duration, or whole seconds); 0 when unset, zero
// or unreadable (client-go refuses it then, before the announcers are read).
func requestTimeout(flags *cli.Flags) time.Duration {
	if flags.Kube == nil || flags.Kube.Timeout == nil {
		return 0
	}
	v := *flags.Kube.Timeout
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, _ := time.ParseDuration(v)
	return max(d, 0)
}

// readAnnouncers is every first read of the announcers' objects the plugin makes (the audit RBAC's announcer
// rules are checked against it, and Settle's re-reads are lists of the same leases).
func readAnnouncers(ctx context.Context, dyn dynamic.Interface, ciliumNamespace string, now time.Time) announce.Snapshot {
	return announce.List(ctx, dyn, ciliumNamespace, now)
}

// unreadAnnouncers is the note for the sources the API server refused or did not answer ("" when none).
func unreadAnnouncers(s announce.Snapshot, ciliumNamespace string) string {
	var unread []string
	for _, src := range []announce.Source{announce.SourceMetalLBL2, announce.SourceMetalLBBGP, announce.SourceCiliumL2, announce.SourceCiliumL2Policy} {
		st, ok := s.States[src]
		if !ok || st == announce.SourceOK || st == announce.SourceAbsent {
			continue
		}
		what := string(src)
		switch src {
		case announce.SourceCiliumL2:
			what += " (leases in " + ciliumNamespace + ")"
		case announce.SourceCiliumL2Policy:
			what += " (CiliumL2AnnouncementPolicies)"
		}
		unread = append(unread, what+": "+string(st))
	}
	if len(unread) == 0 {
		return ""
	}
	return "could not read the announcers' records (" + strings.Join(unread, ", ") +
		"): the load balancer IPs they announce stay as the API alone shows them (cannot tell where no health check decides)"
}
