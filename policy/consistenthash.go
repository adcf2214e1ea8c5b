package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/workers"
)

// ErrTargetUnavailable is returned by consistent_hashing when the request
// names a target worker (x-target-worker) that cannot take it: the index is
// not a number, is out of range, or names an unhealthy worker. The request
// fails rather than going elsewhere, because a client that names a worker
// wants that worker.
var ErrTargetUnavailable = errors.New("target worker unavailable")

// ErrInvalidTarget marks the ErrTargetUnavailable errors whose target is not
// a worker index at all (not a non-negative integer), which is the client's
// mistake rather than the fleet's state. Both sentinels match such errors.
var ErrInvalidTarget = errors.New("invalid target worker")

// ConsistentHashing gives sessions affinity without keeping state per
// session. The session key is, in order of precedence:
//
//  1. the target worker (x-target-worker): a 0-based index into the
//     candidates in registration order, or a worker's name (its URL, or
//     url@rank for a data-parallel rank), honoured exactly or refused with
//     ErrTargetUnavailable (branch "target");
//  2. the routing key (x-routing-key), branch "routing_key";
//  3. the implicit key (authorization, x-forwarded-for or cookie), branch
//     "implicit_key";
//  4. none: a random healthy worker, branch "random".
//
// A key goes to the worker owning its hash on a ring with 160 virtual nodes
// per worker URL. Adding a worker to N moves about 1/(N+1) of the keys, all to
// the new worker. An unhealthy owner's keys go to the next healthy worker on
// the ring (branch "failover") and come back when it recovers, because the
// ring is built from URLs, not health. If the caller leaves unhealthy workers
// out of the candidates the result is the same: a missing worker's keys fall
// to its ring successors, as when it is skipped.
//
// Reasons name a key by its hash, never by its value: implicit keys are
// credentials and cookies, which must not reach logs.
type ConsistentHashing struct {
	intn  Intn
	rings *ringCache
}

// NewConsistentHashing returns a consistent_hashing policy drawing its random
// fallback from o.Intn (nil: math/rand/v2).
func NewConsistentHashing(o Options) *ConsistentHashing {
	return &ConsistentHashing{intn: orDefault(o.Intn), rings: newRingCache(ringVnodes)}
}

func (*ConsistentHashing) Name() string { return "consistent_hashing" }

// Forget drops the cached rings that include url. Keys never move because
// of it: the ring of the remaining workers is built again on next use.
func (p *ConsistentHashing) Forget(url string) { p.rings.forget(url) }

// Select places the request by its session key; see ConsistentHashing.
func (p *ConsistentHashing) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	if t := strings.TrimSpace(req.TargetWorker); t != "" {
		return selectTarget(req, t, candidates)
	}
	branch, key := "routing_key", req.RoutingKey
	if key == "" {
		branch, key = "implicit_key", req.ImplicitKey
	}
	if key == "" {
		ws := healthy(req, candidates)
		if len(ws) == 0 {
			return Decision{}, ErrNoHealthyWorker
		}
		return Decision{Worker: ws[p.intn(len(ws))].Worker(), Branch: "random", Reason: "consistent_hashing: no routing key, random"}, nil
	}
	h := keyHash(key)
	var owner workers.View
	for w := range p.rings.view(candidates).walk(h) {
		if owner.IsZero() {
			owner = w
		}
		if !usable(req, w) {
			continue
		}
		if w == owner {
			return Decision{Worker: w.Worker(), Branch: branch,
				Reason: fmt.Sprintf("consistent_hashing: %s %016x owned by this worker", branch, h)}, nil
		}
		return Decision{Worker: w.Worker(), Branch: "failover",
			Reason: fmt.Sprintf("consistent_hashing: %s %016x owned by unhealthy %s, next healthy on ring", branch, h, owner.URL())}, nil
	}
	return Decision{}, ErrNoHealthyWorker
}

// selectTarget honours an explicit worker index or explains why it cannot.
// A target the request excludes (a retry of a request that failed there) is
// unavailable like an unhealthy one: the client asked for that worker only.
func selectTarget(req *Request, t string, candidates []workers.View) (Decision, error) {
	i, err := strconv.Atoi(t)
	if err != nil {
		i = targetByName(t, candidates)
	}
	if i < 0 {
		return Decision{}, fmt.Errorf("%w: %w: x-target-worker %q is not a worker index (%s) nor a worker's name",
			ErrTargetUnavailable, ErrInvalidTarget, t, indexRange(len(candidates)))
	}
	if i >= len(candidates) {
		return Decision{}, fmt.Errorf("%w: %w: x-target-worker %d is out of range (%s)",
			ErrTargetUnavailable, ErrInvalidTarget, i, indexRange(len(candidates)))
	}
	w := candidates[i]
	if !usable(req, w) {
		return Decision{}, fmt.Errorf("%w: x-target-worker %d (%s) is unhealthy or excluded (an earlier attempt failed there, or it accepts a shorter prompt than this one)", ErrTargetUnavailable, i, w.URL())
	}
	return Decision{Worker: w.Worker(), Branch: "target", Reason: fmt.Sprintf("consistent_hashing: x-target-worker %d", i)}, nil
}

// targetByName is the index of the candidate named t (its URL in any form
// the registry accepts, url@rank included), or -1.
func targetByName(t string, candidates []workers.View) int {
	name, err := workers.CanonicalName(t)
	if err != nil {
		return -1
	}
	return slices.IndexFunc(candidates, func(w workers.View) bool { return w.URL() == name })
}

func indexRange(n int) string {
	switch n {
	case 0:
		return "no workers"
	case 1:
		return "1 worker: index 0"
	}
	return fmt.Sprintf("%d workers: indices 0 to %d", n, n-1)
}
