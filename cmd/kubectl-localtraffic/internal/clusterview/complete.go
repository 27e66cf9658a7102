package clusterview

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
)

// Shell completion: cobra's __complete, which the completion scripts (kubectl-localtraffic completion bash|zsh|
// fish|powershell) call, and which kubectl (1.26 and later) calls through an executable named
// kubectl_complete-localtraffic on PATH when completing `kubectl localtraffic` (docs/audit.md has the two
// lines). The names come from the apiserver with the flags given so far (--kubeconfig, --context, -n, -A).

// CompleteNodes completes a node name (drain-check NODE, status --node).
func CompleteNodes(env *cli.Env, flags *cli.Flags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if cmd.Name() == "drain-check" && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cs, err := env.Client(flags.Kube)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		l, err := ListAll[corev1.Node](ctx, "nodes", cs.CoreV1().Nodes().List)
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
