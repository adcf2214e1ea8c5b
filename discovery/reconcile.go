package discovery

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kvgate/kvgate/workers"
)

// maxOps bounds the joins and drains running at once: a fleet of hundreds
// of pods appearing together is added in waves, not with hundreds of
// connection attempts at the same moment.
const maxOps = 16

// member is one worker address the loop knows: what the pods ask for there
// and what the fleet holds from discovery.
type member struct {
	want   target // meaningful when wanted
	wanted bool
	in     target // meaningful when joined
	joined bool
	// busy: a join or drain of this address is running; the loop starts
	// nothing else for it until that ends.
	busy bool
	// A refused join is retried at retryAt, after failures refusals in a
	// row; lastErr is logged once, not at every retry.
	failures int
	retryAt  time.Time
	lastErr  string
}

// result is what a join (or drain) reports back to the loop.
type result struct {
	addr string
	join bool
	t    target
	w    *workers.Worker
	cut  int
	err  error
}

// reconciler is the loop's state; only the loop's goroutine touches it.
type reconciler struct {
	fleet   Registrar
	cfg     Config
	log     *slog.Logger
	members map[string]*member
	notes   map[string]string // by pod: why a selected pod cannot join
	busy    int
	done    chan result
	ops     sync.WaitGroup
}

func newReconciler(fleet Registrar, cfg Config, log *slog.Logger) *reconciler {
	return &reconciler{fleet: fleet, cfg: cfg, log: log, members: map[string]*member{}, notes: map[string]string{},
		done: make(chan result)}
}

// run reconciles on every wake-up (an informer event, a finished operation,
// a retry falling due) until ctx ends, then waits for the operations it
// started, which end with ctx.
func (r *reconciler) run(ctx context.Context, w *watches) error {
	defer r.ops.Wait()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		want, notes := w.desired(r.cfg)
		r.logNotes(notes)
		if next := r.reconcile(ctx, want, time.Now()); !next.IsZero() {
			retry.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.kick:
		case res := <-r.done:
			r.finish(res, time.Now())
		case <-retry.C:
		}
	}
}

// reconcile starts what closes the gap between want and the fleet, and
// returns when the earliest postponed retry falls due (zero: none).
func (r *reconciler) reconcile(ctx context.Context, want map[string]target, now time.Time) (next time.Time) {
	for addr, t := range want {
		m := r.members[addr]
		if m == nil {
			m = &member{}
			r.members[addr] = m
		}
		m.want, m.wanted = t, true
	}
	for addr, m := range r.members {
		if _, ok := want[addr]; !ok {
			m.wanted = false
		}
		switch {
		case m.busy:
		case m.joined && (!m.wanted || !m.in.sameWorker(m.want)):
			if r.busy < maxOps {
				r.start(ctx, addr, m, false)
			}
		case m.joined:
		case !m.wanted:
			delete(r.members, addr) // nothing asked for, nothing held
		case now.Before(m.retryAt):
			if next.IsZero() || m.retryAt.Before(next) {
				next = m.retryAt
			}
		case r.busy < maxOps:
			r.start(ctx, addr, m, true)
		}
	}
	return next
}

// start runs a join (of m.want) or a drain (of m.in) in its own goroutine,
// so that a slow engine or a long drain holds up only its own address.
func (r *reconciler) start(ctx context.Context, addr string, m *member, join bool) {
	m.busy = true
	r.busy++
	t := m.in
	if join {
		t = m.want
	} else {
		reason := "the pod is gone, not Ready, or no longer selected"
		if m.wanted {
			reason = "the pod's role or bootstrap port changed"
		}
		r.log.Info("pod leaving the fleet: draining its worker", "pod", t.pod, "worker", addr, "why", reason)
	}
	r.ops.Go(func() {
		res := result{addr: addr, join: join, t: t}
		if join {
			res.w, res.err = r.fleet.AddWorker(ctx, addr, t.role, workers.ProtocolUnknown, t.bootstrap)
		} else {
			res.w, res.cut, res.err = r.fleet.RemoveWorker(ctx, addr, r.cfg.Drain)
		}
		select {
		case r.done <- res:
		case <-ctx.Done():
		}
	})
}

// finish records an operation's outcome.
func (r *reconciler) finish(res result, now time.Time) {
	r.busy--
	m := r.members[res.addr]
	m.busy = false
	switch {
	case !res.join:
		m.joined = false
		switch {
		case errors.Is(res.err, workers.ErrWorkerNotFound):
			r.log.Info("pod's worker was already gone from the fleet (removed through Admin?)", "pod", res.t.pod, "worker", res.addr)
		case res.err != nil:
			r.log.Warn("pod's worker not removed", "pod", res.t.pod, "worker", res.addr, "error", res.err)
		default:
			r.log.Info("pod left the fleet", "pod", res.t.pod, "worker", res.addr, "cut_requests", res.cut)
		}
	case res.err != nil:
		m.failures++
		wait := r.cfg.RetryMax
		if m.failures < 32 {
			wait = min(r.cfg.RetryMin<<(m.failures-1), r.cfg.RetryMax)
		}
		m.retryAt = now.Add(wait)
		if msg := res.err.Error(); msg != m.lastErr {
			m.lastErr = msg
			r.log.Warn("pod not added to the fleet; retrying with backoff", "pod", res.t.pod, "worker", res.addr, "role", res.t.role.String(),
				"error", res.err, "next_attempt_in", wait)
		}
	default:
		m.joined, m.in = true, res.t
		if m.failures > 0 {
			r.log.Info("pod added after being refused", "pod", res.t.pod, "attempts", m.failures+1)
		}
		m.failures, m.lastErr, m.retryAt = 0, "", time.Time{}
		r.log.Info("pod joined the fleet", "pod", res.t.pod, "worker", res.addr, "role", res.t.role.String(),
			"bootstrap_port", res.t.bootstrap, "connected", res.w.Connected())
	}
}

// logNotes logs each pod's note when it appears or changes, not on every
// pass.
func (r *reconciler) logNotes(notes map[string]string) {
	for pod, note := range notes {
		if r.notes[pod] != note {
			r.log.Warn("selected pod cannot join the fleet", "pod", pod, "why", note)
		}
	}
	r.notes = notes
}
