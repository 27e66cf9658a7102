package flagvalue

import (
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

// TestErrorsNameTheFlag: a value that does not parse is an error naming the flag and the value; a good one and
// the default land in the target.
func TestErrorsNameTheFlag(t *testing.T) {
	app := kingpin.New("t", "").Terminate(nil)
	var d time.Duration
	var n int
	Duration(app, "probe.timeout", "help", "5s", &d)
	Int(app, "probe.concurrency", "help", "8", &n)
	if _, err := app.Parse(nil); err != nil || d != 5*time.Second || n != 8 {
		t.Fatalf("defaults: %v, %v, error %v; want 5s, 8", d, n, err)
	}
	if _, err := app.Parse([]string{"--probe.timeout=1.5s", "--probe.concurrency=2"}); err != nil || d != 1500*time.Millisecond || n != 2 {
		t.Fatalf("good values: %v, %v, error %v; want 1.5s, 2", d, n, err)
	}
	for args, want := range map[string]string{
		"--probe.timeout=5":        `--probe.timeout "5": time: missing unit in duration "5"`,
		"--probe.concurrency=many": `--probe.concurrency "many": strconv.Atoi: parsing "many": invalid syntax`,
	} {
		if _, err := app.Parse([]string{args}); err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}
}
