// Package policy chooses the worker for each request. Every policy is a small
// type with one Select method over a snapshot of candidate workers; policies
// never dial a worker, they only read the health and load the workers package
// keeps current.
package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/kvgate/kvgate/workers"
)

// Request is what a policy may look at to place a request.
type Request struct {
	RequestID string
	// InputIDs is the prompt as token ids.
	InputIDs []uint32
	// RoutingKey is the client's x-routing-key metadata, if any.
	RoutingKey string
}

// Decision is a policy's answer: the worker, and why it was chosen.
type Decision struct {
	Worker *workers.Worker
	// PredictedCachedTokens is how many prompt tokens the policy expects the
	// worker to find in its KV cache; 0 for cache-blind policies.
	PredictedCachedTokens int
	// Reason says in a few words why this worker won, for logs and responses.
	Reason string
}

// Policy selects one worker among candidates.
type Policy interface {
	Name() string
	// Select returns a decision naming one of the healthy candidates, or
	// ErrNoHealthyWorker when there is none.
	Select(ctx context.Context, req *Request, candidates []*workers.Worker) (Decision, error)
}

// ErrNoHealthyWorker is returned by Select when no candidate is healthy.
var ErrNoHealthyWorker = errors.New("no healthy worker")

// Intn returns a uniform random integer in [0, n). Policies take one so tests
// can make them deterministic.
type Intn func(n int) int

// Options configures the policies built by New.
type Options struct {
	// Intn is the random source; nil means math/rand/v2's IntN.
	Intn Intn
}

// constructors maps each --policy name to its constructor.
var constructors = map[string]func(Options) Policy{
	"random":       func(o Options) Policy { return NewRandom(o.Intn) },
	"round_robin":  func(Options) Policy { return NewRoundRobin() },
	"power_of_two": func(o Options) Policy { return NewPowerOfTwo(o.Intn) },
}

// Names lists the policies New accepts, sorted.
func Names() []string {
	names := make([]string, 0, len(constructors))
	for n := range constructors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds the policy called name.
func New(name string, opts Options) (Policy, error) {
	c, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q (available: %s)", name, strings.Join(Names(), ", "))
	}
	return c(opts), nil
}

// healthy returns the candidates that may receive requests. Policies filter
// even though the server passes healthy workers, because health can change
// between the snapshot and the selection and a stale verdict is cheap to
// re-check.
func healthy(candidates []*workers.Worker) []*workers.Worker {
	out := make([]*workers.Worker, 0, len(candidates))
	for _, w := range candidates {
		if w.Healthy() {
			out = append(out, w)
		}
	}
	return out
}

func orDefault(f Intn) Intn {
	if f == nil {
		return rand.IntN
	}
	return f
}
