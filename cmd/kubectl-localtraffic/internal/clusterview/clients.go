package clusterview

import (
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	// The auth providers kubectl registers (OIDC; the azure and gcp names answer with the exec plugin to use
	// instead): a kubeconfig that works for kubectl works for the plugin. Exec credential plugins need nothing.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

// userAgent is how the plugin's requests name themselves to the API server.
const userAgent = "kubectl-localtraffic"

// KubeClient is the typed API client of the kubeconfig flags.
func KubeClient(f *genericclioptions.ConfigFlags) (kubernetes.Interface, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	return kubernetes.NewForConfig(cfg)
}

// DynamicClient is the announcers' API client, from the same flags as the typed one: the announcers' objects
// are read through the dynamic client (no announcer's Go module is linked), over JSON.
func DynamicClient(f *genericclioptions.ConfigFlags) (dynamic.Interface, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	return dynamic.NewForConfig(cfg)
}
