// Package flagtest is test support for the rooms that register their own flags: it parses a command line with
// one room's flags alone, as the exporter parses them among its others. Neither binary imports it.
package flagtest

import (
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// Config is a room's flags: registered on the exporter's application, checked once parsed.
type Config interface {
	RegisterFlags(*kingpin.Application)
	Validate() error
}

// Parse parses args with T's flags alone and returns T with Validate's answer. A command line kingpin itself
// refuses (an unknown flag) fails the test: the rooms' tests are about their values.
func Parse[T any, P interface {
	*T
	Config
}](t testing.TB, args ...string) (T, error) {
	t.Helper()
	var c T
	app := kingpin.New("t", "").Terminate(nil)
	P(&c).RegisterFlags(app)
	if _, err := app.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return c, P(&c).Validate()
}
