//go:build !linux

package arrivals

import (
	"errors"
	"fmt"
)

// AF_PACKET exists only on Linux; elsewhere the meter is StatusFailed and observes nothing.
type osMeter struct{}

func openOS(Config) (*osMeter, error) {
	return nil, fmt.Errorf("arrivals meter: AF_PACKET sockets: %w", errors.ErrUnsupported)
}

func (*osMeter) apply(int, familySpec) (FilterLevel, error) { return 0, errors.ErrUnsupported }
func (*osMeter) stats(int) (uint64, uint64, error)          { return 0, 0, errors.ErrUnsupported }
func (*osMeter) stop()                                      {}
func (*osMeter) close()                                     {}
func (*Meter) run()                                         {}

func (*osMeter) linkName(int32) (string, error) { return "", errors.ErrUnsupported }
