package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/common/version"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
)

// defaultRequestTimeout is --request-timeout's default.
const defaultRequestTimeout = "30s"

// Root is what a verb's command is made with: the invocation's Env and the shared Flags, and the exit status the
// verb leaves (RunE).
type Root struct {
	Env   *Env
	Flags *Flags
	code  int
}

// RunE is a cobra RunE of run, which returns the verb's exit status beside its error: an error decides the exit
// status itself (Execute), the status counts when there is none.
func (r *Root) RunE(run func(cmd *cobra.Command, args []string) (int, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		var err error
		r.code, err = run(cmd, args)
		return err
	}
}

// Verb makes one verb's command (kubectl's NewCmd), its flags bound to its own options.
type Verb func(root *Root) *cobra.Command

// Execute parses args into the root command and the verbs, runs the one named and returns the exit status.
func Execute(ctx context.Context, env *Env, args []string, verbs ...Verb) int {
	f := &Flags{Kube: genericclioptions.NewConfigFlags(true)}
	// A request that hangs (an unreachable apiserver, a stuck proxy) fails after this long instead of never:
	// client-go's default is no timeout. --request-timeout 0 restores it.
	f.Kube.Timeout = ptr.To(defaultRequestTimeout)
	r := &Root{Env: env, Flags: f, code: ExitClean}
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
	root.SetIn(env.In)
	root.SetOut(env.Out)
	root.SetErr(env.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return BadInput{err} })
	f.Kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&f.AllNamespaces, "all-namespaces", "A", false, "every namespace")
	root.PersistentFlags().StringVar(&f.Color, "color", "auto", "colour the output: auto (on a terminal, unless NO_COLOR is set or TERM is dumb), always or never")
	for _, v := range verbs {
		root.AddCommand(v(r))
	}

	if err := root.ExecuteContext(ctx); err != nil {
		msg := err.Error()
		if strings.HasPrefix(msg, "unknown command") || strings.Contains(msg, "accepts") {
			err = BadInput{err}
		}
		fmt.Fprintf(env.ErrOut, "kubectl-localtraffic: %s\n", OneLine(err.Error()))
		if errors.As(err, new(APIError)) {
			return ExitAPI
		}
		return ExitError
	}
	return r.code
}
