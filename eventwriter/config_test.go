package eventwriter

import (
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

func parse(t *testing.T, env map[string]string, args ...string) (Config, error) {
	t.Helper()
	var c Config
	app := kingpin.New("t", "").Terminate(nil)
	c.RegisterFlags(app, func(k string) string { return env[k] })
	if _, err := app.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return c, c.Validate()
}

var podEnv = map[string]string{"POD_NAMESPACE": "localtraffic-system", "POD_NAME": "localtraffic-exporter-x7k2p"}

// Off by default, and off nothing is checked: an exporter without the pod's downward API still starts.
func TestConfigOffByDefault(t *testing.T) {
	c, err := parse(t, nil)
	if err != nil || c.Enabled {
		t.Fatalf("default: %+v, %v", c, err)
	}
}

// On, the defaults come from the pod: its namespace for the Lease and the peers' Service, its name as identity.
func TestConfigDefaultsFromThePod(t *testing.T) {
	c, err := parse(t, podEnv, "--events.write")
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseNamespace != "localtraffic-system" || c.LeaseName != "localtraffic-exporter-events" || c.Identity != "localtraffic-exporter-x7k2p" ||
		c.PeersNamespace != "localtraffic-system" || c.PeersService != "localtraffic-exporter" || c.PeersScheme != "https" ||
		c.TokenFile != DefaultTokenFile || c.Poll != 10*time.Second || c.PeerTimeout != 3*time.Second || c.Rate != 0.5 || c.Burst != 20 {
		t.Errorf("defaults = %+v", c)
	}
}

func TestConfigRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--events.write"}, "--events.peers-service"},
		{map[string]string{"POD_NAME": "p"}, []string{"--events.write", "--events.peers-service=a/b"}, "--events.lease-namespace"},
		{map[string]string{"POD_NAMESPACE": "n"}, []string{"--events.write"}, "--events.identity"},
		{podEnv, []string{"--events.write", "--events.peers-service=svc"}, "namespace/name"},
		{podEnv, []string{"--events.write", "--events.rate=0"}, "--events.rate"},
		{podEnv, []string{"--events.write", "--events.burst=0"}, "--events.burst"},
		{podEnv, []string{"--events.write", "--events.poll-interval=0s"}, "--events.poll-interval"},
		{podEnv, []string{"--events.write", "--events.peer-timeout=0s"}, "--events.peer-timeout"},
		{podEnv, []string{"--events.write", "--events.peers-ca-file=/nonexistent/ca.pem"}, "--events.peers-ca-file"},
	} {
		_, err := parse(t, c.env, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one naming %s", c.args, err, c.want)
		}
	}
}
