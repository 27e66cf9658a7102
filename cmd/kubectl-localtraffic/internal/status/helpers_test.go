package status

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
)

type result = clitest.Result

// invoke runs status as a user would, with stdin, an environment and a fake apiserver.
func invoke(t *testing.T, stdin string, env map[string]string, terminal bool, objs []runtime.Object, args ...string) result {
	t.Helper()
	return clitest.Invoke(t, []cli.Verb{NewCmd}, stdin, env, terminal, objs, args...)
}

// execute runs status with args on env.
func execute(env *cli.Env, args []string) int { return clitest.Execute(env, args, NewCmd) }

// invokeAnnounced runs status against the pinned drill made a LoadBalancer Service (VIP 192.0.2.10, health
// check node port) with the announcers' records in dyn.
func invokeAnnounced(t *testing.T, dyn dynamic.Interface, args ...string) result {
	t.Helper()
	return clitest.InvokeAnnounced(t, []cli.Verb{NewCmd}, drillObjects(true), dyn, args...)
}

// runWith runs status against a fake apiserver holding objs, with no exporter to forward to.
func runWith(t *testing.T, objs []runtime.Object, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(exportersApp(fake.NewClientset(objs...), nil, &out, &errOut), args)
	return result{Code: code, Out: out.String(), ErrOut: errOut.String()}
}

func drillObjects(pinned bool) []runtime.Object { return clitest.DrillObjects(pinned) }

var (
	fakeAnnouncers = clitest.FakeAnnouncers
	l2Status       = clitest.L2Status
)
