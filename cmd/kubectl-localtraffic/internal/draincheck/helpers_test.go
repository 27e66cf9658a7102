package draincheck

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/fake"

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
	var out, errOut bytes.Buffer
	env := clitest.Env("", fake.NewClientset(clitest.AnnouncedLoadBalancer(objs)...), &out, &errOut)
	env.Dynamic = func(*genericclioptions.ConfigFlags) (dynamic.Interface, error) { return dyn, nil }
	code := clitest.Execute(env, args, NewCmd)
	return result{Code: code, Out: out.String(), ErrOut: errOut.String()}
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
