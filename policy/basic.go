package policy

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/kvgate/kvgate/workers"
)

// Random picks a healthy worker uniformly at random.
type Random struct{ intn Intn }

// NewRandom returns a Random policy drawing from intn (nil: math/rand/v2).
func NewRandom(intn Intn) *Random { return &Random{intn: orDefault(intn)} }

func (*Random) Name() string { return "random" }

func (p *Random) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	ws := healthy(req, candidates)
	if len(ws) == 0 {
		return Decision{}, ErrNoHealthyWorker
	}
	return Decision{Worker: ws[p.intn(len(ws))].Worker(), Branch: "random", Reason: "random"}, nil
}

// RoundRobin cycles through the healthy workers in registration order.
type RoundRobin struct{ next atomic.Uint64 }

// NewRoundRobin returns a RoundRobin policy starting at the first worker.
func NewRoundRobin() *RoundRobin { return &RoundRobin{} }

func (*RoundRobin) Name() string { return "round_robin" }

func (p *RoundRobin) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	ws := healthy(req, candidates)
	if len(ws) == 0 {
		return Decision{}, ErrNoHealthyWorker
	}
	n := p.next.Load()
	if !req.DryRun {
		n = p.next.Add(1) - 1
	}
	return Decision{Worker: ws[n%uint64(len(ws))].Worker(), Branch: "round_robin", Reason: "round_robin"}, nil
}

// PowerOfTwo samples two distinct healthy workers at random and takes the less
// loaded one: nearly as good as always taking the least loaded worker, without
// herding every concurrent request onto the same one.
type PowerOfTwo struct{ intn Intn }

// NewPowerOfTwo returns a PowerOfTwo policy drawing from intn (nil: math/rand/v2).
func NewPowerOfTwo(intn Intn) *PowerOfTwo { return &PowerOfTwo{intn: orDefault(intn)} }

func (*PowerOfTwo) Name() string { return "power_of_two" }

func (p *PowerOfTwo) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	ws := healthy(req, candidates)
	switch len(ws) {
	case 0:
		return Decision{}, ErrNoHealthyWorker
	case 1:
		return Decision{Worker: ws[0].Worker(), Branch: "power_of_two", Reason: "power_of_two: only healthy worker"}, nil
	}
	i := p.intn(len(ws))
	j := p.intn(len(ws) - 1)
	if j >= i {
		j++
	}
	a, b := ws[i], ws[j]
	la, lb := a.Load(), b.Load()
	if lb < la {
		a, b, la, lb = b, a, lb, la
	}
	return Decision{Worker: a.Worker(), Branch: "power_of_two", Reason: fmt.Sprintf("power_of_two: load %d vs %d (%s)", la, lb, b.URL())}, nil
}
