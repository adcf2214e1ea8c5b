package workers

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
)

// RPC names an optional engine call whose support the router tracks per
// worker. Real engines implement parts of their protocol (an Embed that
// answers UNIMPLEMENTED, or an empty vector), and a part an engine lacks is
// no failure of the engine: it must never open the breaker Generate
// depends on, and requests needing it go to workers that have it.
type RPC string

// The optional RPCs tracked.
const (
	// RPCEmbed is the engines' Embed call.
	RPCEmbed RPC = "Embed"
	// RPCGetLoads is the engines' GetLoads, which the load monitor polls.
	RPCGetLoads RPC = "GetLoads"
)

// LackingRecheck is how long a worker that showed it lacks an RPC is left
// out of that RPC's placements. After it, one request tries the worker
// again, so an engine upgraded in place (or restarted with an embedding
// model) serves the RPC without a restart of the router; the cost is one
// refused call per RPC per worker per period, never counted against it.
const LackingRecheck = 5 * time.Minute

// ErrBadEmbedding is wrapped by the error of an Embed call whose answer no
// client may get (no vector, a vector contradicting its dimension, values
// that are not finite): the engine does not really implement Embed.
var ErrBadEmbedding = errors.New("the engine's Embed answer is unusable")

// Lacks reports whether an engine answer err shows that the engine does not
// implement rpc: UNIMPLEMENTED, or for Embed an unusable vector.
func Lacks(rpc RPC, err error) bool {
	if Unimplemented(err) {
		return true
	}
	return rpc == RPCEmbed && errors.Is(err, ErrBadEmbedding)
}

// Unimplemented reports whether err says a call is not implemented: the
// engine's UNIMPLEMENTED, or an Unsupported fault (an adapter's for an RPC its
// protocol lacks, such as TensorRT-LLM's GetLoads, or a placement that found
// no worker implementing the call). The router's failure classification and
// the capability tracking both read it, so they cannot disagree.
func Unimplemented(err error) bool {
	if status.Code(err) == codes.Unimplemented {
		return true
	}
	k, ok := fault.KindOf(err)
	return ok && k == fault.Unsupported
}

// capabilities are the RPCs a worker showed it lacks, each until its
// recheck time. The map stays empty for an engine implementing everything,
// and holds at most one entry per RPC.
type capabilities struct {
	mu      sync.Mutex
	lacking map[RPC]lack
	now     func() time.Time // nil: time.Now; tests set a fake clock
	// probe is the health check the monitor judges the worker by
	// (ProbeAuto until its first check).
	probe HealthProbe
}

func (c *capabilities) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

type lack struct {
	until time.Time
	why   string
}

// MarkLacking records that the worker lacks rpc, as err showed, until
// LackingRecheck has passed. It returns true when the worker was not
// already marked (the first time it showed it), for logs and metrics.
func (w *Worker) MarkLacking(rpc RPC, err error) bool {
	c := &w.caps
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	_, already := c.lacking[rpc]
	if already && now.Before(c.lacking[rpc].until) {
		return false
	}
	if c.lacking == nil {
		c.lacking = make(map[RPC]lack, 1)
	}
	c.lacking[rpc] = lack{until: now.Add(LackingRecheck), why: status.Convert(err).Message()}
	return true
}

// Implements reports whether the worker may be given rpc: it has not shown
// that it lacks it, or it showed so more than LackingRecheck ago.
func (w *Worker) Implements(rpc RPC) bool {
	c := &w.caps
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.lacking[rpc]
	return !ok || !c.clock().Before(l.until)
}

// LackWhy is the engine's answer that showed the worker lacks rpc, while
// it is left out of it; "" otherwise.
func (w *Worker) LackWhy(rpc RPC) string {
	c := &w.caps
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.lacking[rpc]; ok && c.clock().Before(l.until) {
		return l.why
	}
	return ""
}

// Lacking describes the RPCs the worker is left out of, each with the
// engine's answer that showed it ("Embed: UNIMPLEMENTED: ..."), for
// Admin and error messages. nil: none.
func (w *Worker) Lacking() []string {
	c := &w.caps
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	now := c.clock()
	for rpc, l := range c.lacking {
		if now.Before(l.until) {
			out = append(out, fmt.Sprintf("%s: %s", rpc, l.why))
		}
	}
	return out
}

// HealthCheckInUse is the check the health monitor judges the worker by:
// "engine", "model-info", "grpc-health" or "none", as --health-check
// names them; "auto" until the first check has chosen one.
func (w *Worker) HealthCheckInUse() string {
	c := &w.caps
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probe.String()
}

func (w *Worker) setHealthCheckInUse(p HealthProbe) {
	c := &w.caps
	c.mu.Lock()
	c.probe = p
	c.mu.Unlock()
}
