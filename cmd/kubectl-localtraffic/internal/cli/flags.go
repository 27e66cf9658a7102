package cli

import "k8s.io/cli-runtime/pkg/genericclioptions"

// Flags are the flags every verb takes (the root command's persistent flags): cli-runtime's kubeconfig flags,
// -A and --color.
type Flags struct {
	Kube          *genericclioptions.ConfigFlags
	AllNamespaces bool
	// Color: auto, always or never.
	Color string
}

// Namespace is where to look: -A for all, else -n, else the kubeconfig context's namespace.
func (f *Flags) Namespace() (string, error) {
	if f.AllNamespaces {
		return "", nil
	}
	if f.Kube.Namespace != nil && *f.Kube.Namespace != "" {
		return *f.Kube.Namespace, nil
	}
	ns, _, err := f.Kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", BadInputf("kubeconfig: %w", err)
	}
	return ns, nil
}

// Colour is --color: auto colours only on a terminal, and never when NO_COLOR is set (https://no-color.org) or
// TERM is dumb; always and never are what they say.
func (f *Flags) Colour(env *Env) (bool, error) {
	switch f.Color {
	case "auto":
		return env.Terminal && env.Getenv("NO_COLOR") == "" && env.Getenv("TERM") != "dumb", nil
	case "always":
		return true, nil
	case "never":
		return false, nil
	}
	return false, BadInputf("--color %q: auto, always or never", f.Color)
}
