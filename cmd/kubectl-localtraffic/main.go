// Command kubectl-localtraffic is a kubectl plugin (kubectl localtraffic status|audit|drain-check): the placement
// story of every Service with externalTrafficPolicy Local, live from the API or from manifests as a CI gate. It
// shares the exporter's counting code (kubeview), so the two never disagree on which node drops. Each verb is a
// package of its own (internal/status, internal/audit, internal/draincheck, kubectl's per-verb layout); main
// composes them on the invocation's streams and clients.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/versioninfo"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/audit"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clusterview"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/draincheck"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/status"
)

// verbs are the plugin's commands, in the order its help lists them.
func verbs() []cli.Verb { return []cli.Verb{status.NewCmd, audit.NewCmd, draincheck.NewCmd} }

func main() {
	versioninfo.Fill()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &cli.Env{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr, Getenv: os.Getenv,
		Terminal: term.IsTerminal(int(os.Stdout.Fd())), ErrTerminal: term.IsTerminal(int(os.Stderr.Fd())),
		Client: clusterview.KubeClient, Forward: clusterview.NewPortForwarder, Dynamic: clusterview.DynamicClient}
	code := cli.Execute(ctx, env, os.Args[1:], verbs()...)
	stop()
	os.Exit(code)
}
