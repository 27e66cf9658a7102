package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// addAnnouncerFlags adds the flags of the announcers' reads to a live command (status, audit, drain-check).
func addAnnouncerFlags(cmd *cobra.Command, o *options) {
	cmd.Flags().StringVar(&o.ciliumNamespace, "cilium-namespace", kubeview.DefaultCiliumNamespace,
		"the namespace of Cilium's L2 announcement Leases (cilium-l2announce-<namespace>-<service>), as the exporter's --announcers.cilium-namespace")
}

// dynamicClient is the announcers' API client, from the same flags as the typed one: the announcers' objects
// are read through the dynamic client (no announcer's Go module is linked), over JSON.
func dynamicClient(f *genericclioptions.ConfigFlags) (dynamic.Interface, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kubectl-localtraffic"
	return dynamic.NewForConfig(cfg)
}

// startAnnouncers reads the announcers' objects cluster-wide (kubeview.ListAnnouncers: MetalLB's statuses,
// Cilium's leases) beside the other lists, and returns the wait for it. A source that cannot be read is a state,
// not an error: its load balancer IPs keep the answer the API alone gives (cannot tell where no health check
// decides), and one line on stderr names it. A source that is not installed (no CRD) is said nothing of: most
// clusters run one announcer or none. The zero snapshot when the plugin has no dynamic client (tests).
func (a *app) startAnnouncers(ctx context.Context, o *options) func() (kubeview.AnnouncerSnapshot, error) {
	if a.dynamic == nil {
		return func() (kubeview.AnnouncerSnapshot, error) { return kubeview.AnnouncerSnapshot{}, nil }
	}
	dyn, err := a.dynamic(o.kube)
	if err != nil {
		return func() (kubeview.AnnouncerSnapshot, error) {
			return kubeview.AnnouncerSnapshot{}, cli.BadInputf("kubeconfig: %w", err)
		}
	}
	done := make(chan kubeview.AnnouncerSnapshot, 1)
	go func() { done <- readAnnouncers(ctx, dyn, o.ciliumNamespace) }()
	return func() (kubeview.AnnouncerSnapshot, error) {
		s := <-done
		if note := unreadAnnouncers(s, o.ciliumNamespace); note != "" {
			fmt.Fprintf(a.errOut, "kubectl-localtraffic: %s\n", note)
		}
		return s, nil
	}
}

// readAnnouncers is every read of the announcers' objects the plugin makes (the audit RBAC's announcer rules
// are checked against it).
func readAnnouncers(ctx context.Context, dyn dynamic.Interface, ciliumNamespace string) kubeview.AnnouncerSnapshot {
	return kubeview.ListAnnouncers(ctx, dyn, ciliumNamespace, time.Now())
}

// unreadAnnouncers is the note for the sources the API server refused or did not answer ("" when none).
func unreadAnnouncers(s kubeview.AnnouncerSnapshot, ciliumNamespace string) string {
	var unread []string
	for _, src := range []kubeview.AnnouncerSource{kubeview.SourceMetalLBL2, kubeview.SourceMetalLBBGP, kubeview.SourceCiliumL2} {
		st, ok := s.States[src]
		if !ok || st == kubeview.SourceOK || st == kubeview.SourceAbsent {
			continue
		}
		what := string(src)
		if src == kubeview.SourceCiliumL2 {
			what += " (leases in " + ciliumNamespace + ")"
		}
		unread = append(unread, what+": "+string(st))
	}
	if len(unread) == 0 {
		return ""
	}
	return "could not read the announcers' records (" + strings.Join(unread, ", ") +
		"): the load balancer IPs they announce stay as the API alone shows them (cannot tell where no health check decides)"
}
