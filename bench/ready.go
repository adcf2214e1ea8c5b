package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errExited is why untilServes gave up when the process it waited for
// ended first.
var errExited = errors.New("exited before it served a request")

// untilServes sends probe until one succeeds, exited is closed (the child
// process that is to serve has ended: waiting longer would not help), or
// timeout passes, and says which. Each probe has at most 30 s of its own,
// so that one call the process accepted and never answered does not use
// the whole wait. It is how every benchmark rig waits for a router,
// relay or engine it has just started.
func untilServes(ctx context.Context, timeout time.Duration, exited <-chan struct{}, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		err := probe(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%w (the last try: %v)", errExited, err)
		case <-ctx.Done():
			return fmt.Errorf("served no request within %s: %w", timeout, err)
		case <-tick.C:
		}
	}
}
