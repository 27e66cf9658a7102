// Command localtraffic-exporter tells, per node and per Service with externalTrafficPolicy Local, whether this
// node serves or silently drops the Service's external traffic. It runs on every node (a DaemonSet).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/localtraffic/localtraffic-exporter/cmd/internal/versioninfo"
)

func main() {
	versioninfo.Fill()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runWith(ctx, os.Args[1:], os.Stdout, os.Stderr, processHooks{routeKlog: klog.SetSlogLogger, profileMemory: profileMemory})
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "localtraffic-exporter: %v\n", err)
		os.Exit(1)
	}
}

// profileMemory leaves Go's sampling of allocations on (its default: one sample per 512 KiB allocated, with
// GODEBUG=memprofilerate to change it) where the heap profile is served, and turns it off where it is not.
func profileMemory(served bool) {
	if !served {
		runtime.MemProfileRate = 0
	}
}
