// Command localtraffic-exporter tells, per node and per Service with externalTrafficPolicy Local, whether this
// node serves or silently drops the Service's external traffic. It runs on every node (a DaemonSet).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/versioninfo"
)

func main() {
	versioninfo.Fill()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runWith(ctx, os.Args[1:], os.Stdout, os.Stderr, klog.SetSlogLogger)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "localtraffic-exporter: %v\n", err)
		os.Exit(1)
	}
}
