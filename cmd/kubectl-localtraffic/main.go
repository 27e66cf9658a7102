// Command kubectl-localtraffic is a kubectl plugin (kubectl localtraffic status|audit): the placement story of
// every Service with externalTrafficPolicy Local, live from the API or from manifests as a CI gate. It shares the
// exporter's counting code (kubeview), so the two never disagree on which node drops.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	// The auth providers kubectl registers (OIDC; the azure and gcp names answer with the exec plugin to use
	// instead): a kubeconfig that works for kubectl works for the plugin. Exec credential plugins need nothing.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/versioninfo"
)

func main() {
	versioninfo.Fill()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{in: os.Stdin, out: os.Stdout, errOut: os.Stderr, getenv: os.Getenv,
		terminal: term.IsTerminal(int(os.Stdout.Fd())), errTerminal: term.IsTerminal(int(os.Stderr.Fd())),
		client: kubeClient, exporters: newPortForwarder, dynamic: dynamicClient}
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func kubeClient(f *genericclioptions.ConfigFlags) (kubernetes.Interface, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kubectl-localtraffic"
	return kubernetes.NewForConfig(cfg)
}
