package draincheck

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
)

type result = clitest.Result

// invoke runs drain-check as a user would, with stdin, an environment and a fake apiserver.
func invoke(t *testing.T, stdin string, env map[string]string, terminal bool, objs []runtime.Object, args ...string) result {
	t.Helper()
	return clitest.Invoke(t, []cli.Verb{NewCmd}, stdin, env, terminal, objs, args...)
}

// invokeAnnouncedOn runs drain-check against objs, its Service a LoadBalancer (VIP 192.0.2.10, health check node
// port), with the announcers' records in dyn.
func invokeAnnouncedOn(t *testing.T, objs []runtime.Object, dyn dynamic.Interface, args ...string) result {
	t.Helper()
	return clitest.InvokeAnnounced(t, []cli.Verb{NewCmd}, objs, dyn, args...)
}

func drillObjects(pinned bool) []runtime.Object { return clitest.DrillObjects(pinned) }

func behindLoadBalancer(objs []runtime.Object) []runtime.Object {
	return clitest.BehindLoadBalancer(objs)
}

func pdbAllowing(allowed int32) runtime.Object { return clitest.PDBAllowing(allowed) }

var (
	fakeAnnouncers = clitest.FakeAnnouncers
	l2Status       = clitest.L2Status
)
