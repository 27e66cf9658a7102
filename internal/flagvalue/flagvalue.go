// Package flagvalue defines the exporter's duration and integer flags for the packages that register their own
// flags. kingpin's Duration and Int flags report only the value's error ("time: invalid duration"), so the one
// line the exporter prints for a bad command line would not say which flag is wrong; these name it.
package flagvalue

import (
	"fmt"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

// Duration defines --name on app, a duration defaulting to def, parsed into target.
func Duration(app *kingpin.Application, name, help, def string, target *time.Duration) {
	app.Flag(name, help).Default(def).SetValue(&parsed[time.Duration]{flag: name, target: target, parse: time.ParseDuration})
}

// Int defines --name on app, an integer defaulting to def, parsed into target.
func Int(app *kingpin.Application, name, help, def string, target *int) {
	app.Flag(name, help).Default(def).SetValue(&parsed[int]{flag: name, target: target, parse: strconv.Atoi})
}

// parsed is a kingpin.Value parsed by parse, whose errors name the flag.
type parsed[T any] struct {
	flag   string
	target *T
	parse  func(string) (T, error)
}

func (v *parsed[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", v.flag, s, err)
	}
	*v.target = x
	return nil
}

func (v *parsed[T]) String() string { return fmt.Sprint(*v.target) }
