package audit

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/cli"
	"github.com/localtraffic/localtraffic-exporter/cmd/kubectl-localtraffic/internal/clitest"
)

type result = clitest.Result

// invoke runs audit as a user would, with stdin, an environment and (for live mode) a fake apiserver.
func invoke(t *testing.T, stdin string, env map[string]string, terminal bool, objs []runtime.Object, args ...string) result {
	t.Helper()
	return clitest.Invoke(t, []cli.Verb{NewCmd}, stdin, env, terminal, objs, args...)
}

func drillObjects(pinned bool) []runtime.Object { return clitest.DrillObjects(pinned) }
