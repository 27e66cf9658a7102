package status

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clusterview"
	"github.com/localtraffic/localtraffic-exporter/kubeview"
)

// completeServices completes SERVICE with the Local Services of the namespace, for cobra's __complete (the
// package clusterview says who calls it), from the apiserver with the flags given so far.
func completeServices(env *cli.Env, flags *cli.Flags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ns, err := flags.Namespace()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		cs, err := env.Client(flags.Kube)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		l, err := clusterview.ListAll[corev1.Service](ctx, "services", cs.CoreV1().Services(ns).List)
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
