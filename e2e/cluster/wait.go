package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// permanent wraps an error that ends waitFor early.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

func stopWaiting(err error) error { return permanent{err} }

// pollInterval is how often the harness's own waits poll.
const pollInterval = 200 * time.Millisecond

// waitFor polls cond every pollInterval until it returns nil, returns a stopWaiting error, or timeout passes; the
// error then carries cond's last error.
func waitFor(ctx context.Context, timeout time.Duration, cond func() error) error {
	return Eventually(ctx, timeout, pollInterval, cond)
}

// Eventually polls cond every interval until it returns nil or timeout (or ctx) ends, and then returns cond's
// last error. Tests use it to wait for the cluster to converge; it is not a timing assertion.
func Eventually(ctx context.Context, timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		last = cond()
		if last == nil {
			return nil
		}
		var p permanent
		if errors.As(last, &p) {
			return p.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}
