package ciliumsvc

import (
	"fmt"
	"path/filepath"

	"github.com/alecthomas/kingpin/v2"
)

// Config is the command line of the Cilium reader, registered by RegisterFlags: where the Cilium agent's API
// socket is, if it is read at all.
type Config struct {
	// Socket is the agent's unix socket; "" (the default): Cilium's service table is not read.
	Socket string
}

// RegisterFlags defines the Cilium reader's flags on app.
func (c *Config) RegisterFlags(app *kingpin.Application) {
	app.Flag("dataplane.cilium-socket", "Where Cilium replaces kube-proxy: the Cilium agent's API socket ("+DefaultSocket+
		"), whose service table then decides what the node does with each Service (GET requests only; the socket grants read and write access to the whole agent API). Empty: not read.").
		Default("").StringVar(&c.Socket)
}

// Validate checks the parsed flags. Its errors are one line naming the flag.
func (c *Config) Validate() error {
	if c.Socket != "" && !filepath.IsAbs(c.Socket) {
		return fmt.Errorf("bad --dataplane.cilium-socket %q: want an absolute path, or empty for none", c.Socket)
	}
	return nil
}

// Read says whether Cilium's service table is read (--dataplane.cilium-socket set).
func (c Config) Read() bool { return c.Socket != "" }
