package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// Shell completion: cobra's __complete, which the completion scripts (kubectl-localtraffic completion bash|zsh|
// fish|powershell) call, and which kubectl (1.26 and later) calls through an executable named
// kubectl_complete-localtraffic on PATH when completing `kubectl localtraffic` (docs/audit.md has the two
// lines). The names come from the apiserver with the flags given so far (--kubeconfig, --context, -n, -A).

// completeServices completes SERVICE with the Local Services of the namespace.
func (a *app) completeServices(o *options) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ns, err := o.namespace()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		cs, err := a.client(o.kube)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		l, err := listAll[corev1.Service](ctx, "services", cs.CoreV1().Services(ns).List)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, s := range l {
			if kubeview.IsExternalLocal(s) && strings.HasPrefix(s.Name, prefix) {
				out = append(out, s.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNodes completes a node name (drain-check NODE, status --node).
func (a *app) completeNodes(o *options) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if cmd.Name() == "drain-check" && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cs, err := a.client(o.kube)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		l, err := listAll[corev1.Node](ctx, "nodes", cs.CoreV1().Nodes().List)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, n := range l {
			if strings.HasPrefix(n.Name, prefix) {
				out = append(out, n.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
