package router

import (
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers"
)

// DefaultMaxWorkers bounds the engines in a fleet (--max-workers): each
// engine costs the router a connection, health and load loops and a KV
// event subscription, so a fleet that grows without bound (a script adding
// dead workers in a loop) grows the router's goroutines and memory with it.
// 256 engines is beyond the fleets one router fronts today; raise it for
// more.
const DefaultMaxWorkers = 256

// fleetLimits holds what bounds the fleet's growth at run time: how many
// engines it may have, and which hosts Admin.AddWorker may dial.
type fleetLimits struct {
	max   int
	allow *server.WorkerAllow

	mu      sync.Mutex
	pending int // engines being added, not registered yet
}

// newFleetLimits applies the defaults: DefaultMaxWorkers, and without
// allow patterns the hosts of the workers given at start-up (any port), so
// that an operator can re-add a removed engine or add one beside it on the
// same host, and nothing else.
func newFleetLimits(cfg Config) (*fleetLimits, error) {
	l := &fleetLimits{max: cfg.MaxWorkers}
	if l.max == 0 {
		l.max = DefaultMaxWorkers
	}
	if l.max < 0 {
		return nil, fmt.Errorf("--max-workers is %d; it must be > 0", l.max)
	}
	if n := len(cfg.WorkerURLs) + len(cfg.DecodeURLs); n > l.max {
		return nil, fmt.Errorf("%d workers given, more than --max-workers (%d); raise --max-workers", n, l.max)
	}
	patterns := cfg.AdminWorkerAllow
	if patterns == nil {
		for _, u := range append(append([]string(nil), cfg.WorkerURLs...), cfg.DecodeURLs...) {
			u, _, _ = strings.Cut(u, "@") // a prefill URL's @BOOTSTRAP_PORT
			if a, err := workers.ParseWorkerAddress(u); err == nil {
				if host, _, err := net.SplitHostPort(a.Target); err == nil {
					patterns = append(patterns, host)
				}
			}
		}
	}
	var err error
	if l.allow, err = server.ParseWorkerAllow(patterns); err != nil {
		return nil, err
	}
	return l, nil
}

// allowed returns an error wrapping server.ErrWorkerNotAllowed unless addr's
// host is allowed.
func (l *fleetLimits) allowed(addr string) error {
	a, err := workers.ParseWorkerAddress(addr)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(a.Target)
	if err != nil {
		return err
	}
	if !l.allow.Allows(host) {
		return fmt.Errorf("%w: %s is not among the hosts --admin-worker-allow allows (%s)", server.ErrWorkerNotAllowed, host, l.allow)
	}
	return nil
}

// reserve takes a place for one more engine, or fails with
// server.ErrTooManyWorkers when the fleet (with the engines being added)
// is full. release gives the place back once the engine is registered or
// has failed to join.
func (l *fleetLimits) reserve(reg *workers.Registry) (release func(), err error) {
	// The snapshot is read under the lock: an engine whose place was
	// released is registered already, so it is counted once, never zero
	// times.
	l.mu.Lock()
	defer l.mu.Unlock()
	engines := map[string]bool{}
	for _, w := range reg.Snapshot() {
		engines[w.Endpoint()] = true
	}
	if n := len(engines) + l.pending; n >= l.max {
		return nil, fmt.Errorf("%w: the fleet has %d engines, the most --max-workers allows; remove one first or raise --max-workers",
			server.ErrTooManyWorkers, n)
	}
	l.pending++
	return func() {
		l.mu.Lock()
		l.pending--
		l.mu.Unlock()
	}, nil
}
