package workers

// KVSubscriptions keeps one KV event stream open to every connected engine in
// the registry and feeds a KVEventHandler with the engines' batches, in order
// and without gaps, so that the router's picture of each engine's cache is
// the engine's own account rather than a guess from routing decisions.
//
// The hard part is knowing when that account can be trusted. Sequence
// numbers tell a lost batch (a gap: the mirror is missing something) from an
// engine restart (numbers go backwards, or a resumed stream sends another
// batch under the last number applied: the cache is empty again) from a
// replayed duplicate; each of these ends in a ResetKVEvents for the worker
// and a fresh start, never in a mirror that silently drifts. An engine
// without events (UNIMPLEMENTED), or one whose stream stays broken, is left
// to the approximate mode the handler falls back to.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// KVSubscriptionConfig configures KVSubscriptions. Start from
// DefaultKVSubscriptionConfig: zero is a value here (no jitter, confirm at
// once), not "use the default".
type KVSubscriptionConfig struct {
	// Handler receives every worker's events. Required.
	Handler KVEventHandler
	// InitialBackoff is the wait before the first new subscription after a
	// stream broke, skipped a sequence number or was refused; each further
	// one doubles it, up to MaxBackoff, until a stream stays healthy for
	// StableAfter. Every new subscription waits: an engine that breaks its
	// streams or skips numbers on purpose gets a few subscriptions a
	// minute, not thousands.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between reconnections. It is also how long a
	// stream may stay broken before the worker's mirror stops being trusted
	// (SetKVEventMode false until the stream is back).
	MaxBackoff time.Duration
	// Jitter spreads each wait uniformly over ±Jitter of it (0.2: ±20%), so
	// that routers restarted together do not reconnect in step. In [0, 1).
	Jitter float64
	// ConfirmAfter is how long a stream must stay open without an error to
	// count as working when no batch arrives (an idle engine sends
	// nothing); a batch confirms it at once.
	ConfirmAfter time.Duration
	// StableAfter is how long a stream must stay open without a gap or an
	// error for the backoff to start over at InitialBackoff. A batch alone
	// does not start it over: an engine that sends one and then skips a
	// number would otherwise be resubscribed at once, forever. Positive.
	StableAfter time.Duration
	// Recheck is how long after an engine answered SubscribeKvEvents with
	// UNIMPLEMENTED (it publishes no events; its cache is approximated)
	// the router asks again, so that an engine restarted with events is
	// mirrored without restarting the router. Positive.
	Recheck time.Duration
	// Logger receives the subscriptions' logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives counts and lag for monitoring; its nil fields are
	// skipped.
	Metrics KVEventMetrics
	// Sources names, by worker URL (as Registry.Get accepts it), the event
	// source of engines that publish their events elsewhere than on their
	// gRPC connection (over ZMQ: ZMQEventSource). Such a worker is followed
	// through its source instead of SubscribeKvEvents.
	Sources map[string]KVEventSource
}

// DefaultKVSubscriptionConfig returns the defaults for handler: backoff from
// 100 ms doubling to 30 s with ±20% jitter, starting over once a stream has
// been healthy for 10 s, a stream confirmed after 1 s, and an engine without
// events asked again after LackingRecheck.
func DefaultKVSubscriptionConfig(handler KVEventHandler) KVSubscriptionConfig {
	return KVSubscriptionConfig{
		Handler:        handler,
		InitialBackoff: 100 * time.Millisecond,
		MaxBackoff:     30 * time.Second,
		Jitter:         0.2,
		ConfirmAfter:   time.Second,
		StableAfter:    10 * time.Second,
		Recheck:        LackingRecheck,
	}
}

// Validate reports the first field that cannot work.
func (c KVSubscriptionConfig) Validate() error {
	switch {
	case c.Handler == nil:
		return errors.New("KV event subscriptions: no Handler")
	case c.InitialBackoff <= 0:
		return fmt.Errorf("KV event subscriptions: InitialBackoff %v must be positive", c.InitialBackoff)
	case c.MaxBackoff < c.InitialBackoff:
		return fmt.Errorf("KV event subscriptions: MaxBackoff %v is below InitialBackoff %v", c.MaxBackoff, c.InitialBackoff)
	case !(c.Jitter >= 0 && c.Jitter < 1):
		return fmt.Errorf("KV event subscriptions: Jitter %v outside [0, 1)", c.Jitter)
	case c.ConfirmAfter < 0:
		return fmt.Errorf("KV event subscriptions: ConfirmAfter %v is negative", c.ConfirmAfter)
	case c.StableAfter <= 0:
		return fmt.Errorf("KV event subscriptions: StableAfter %v must be positive (0 would start the backoff over on every stream)", c.StableAfter)
	case c.Recheck <= 0:
		return fmt.Errorf("KV event subscriptions: Recheck %v must be positive (0 would ask an engine without events again at once)", c.Recheck)
	}
	return nil
}

// KVEventMetrics are the hooks through which the subscriptions report what
// happens to every worker's stream, for Prometheus or tests. Every field may
// be nil; each is called from the worker's subscription goroutine and must
// not block.
type KVEventMetrics struct {
	// Applied counts n events of one kind handed to the handler.
	Applied func(worker string, kind KVEventKind, n int)
	// Gap counts a skipped sequence number: events were lost, the mirror was
	// reset and the subscription started again.
	Gap func(worker string)
	// Reset counts an engine restart seen on a resumed stream (the numbers
	// went backwards, or another batch came under the number of the last
	// one applied): the mirror was reset.
	Reset func(worker string)
	// Resync counts a fresh start the stream itself asked for (OUT_OF_RANGE,
	// DATA_LOSS, a batch that broke the protocol) or that a resume across
	// several data-parallel ranks needed.
	Resync func(worker string)
	// Duplicate counts a batch seen before on the same stream, skipped.
	Duplicate func(worker string)
	// Failure counts a subscription that failed or a stream that ended,
	// with its gRPC code (UNAVAILABLE for a stream the engine closed).
	Failure func(worker string, code codes.Code)
	// Lag observes, for each batch received, how long ago the engine
	// stamped it (receive time minus the batch's timestamp, never negative);
	// batches without a timestamp are not observed.
	Lag func(worker string, lag time.Duration)
}

// KVEventMode is a worker's standing in the router's cache index.
type KVEventMode string

const (
	// KVModeConnecting: the subscription has not yet seen the stream work;
	// the handler still treats the worker as approximate.
	KVModeConnecting KVEventMode = "connecting"
	// KVModeEvents: the worker's events are the truth (SetKVEventMode true).
	KVModeEvents KVEventMode = "events"
	// KVModeApproximate: the worker publishes no events, or its stream has
	// been broken for longer than MaxBackoff (SetKVEventMode false).
	KVModeApproximate KVEventMode = "approximate"
)

// KVEventStatus is one worker's subscription as an operator sees it.
type KVEventStatus struct {
	Mode KVEventMode
	// Connected: a stream to the engine is open now.
	Connected bool
	// LastSeq is the sequence number of the last batch applied (of any
	// rank), valid when HasLastSeq.
	LastSeq    uint64
	HasLastSeq bool
	// LastBatch is when the last batch was received (zero: none yet).
	LastBatch time.Time
	// Lag is the last batch's receive time minus its timestamp, clamped at
	// 0 (0 also when the engine does not stamp its batches).
	Lag time.Duration
	// Batches applied, and their events by kind.
	Batches                  uint64
	Stored, Removed, Cleared uint64
	// Gaps, Resets, Resyncs, Duplicates and Failures count what
	// KVEventMetrics' hooks of the same names report.
	Gaps, Resets, Resyncs, Duplicates, Failures uint64
	// LastError is the text of the last error the stream ended with, or of
	// the last protocol violation; empty when there was none.
	LastError string
}

// KVSubscriptions follows a registry and keeps exactly one KV event
// subscription per registered, connected worker whose backend is a
// KVEventSource (both engine adapters are), feeding the handler of its
// configuration. Create it with NewKVSubscriptions, run it with Run; Status
// is safe to call from any goroutine at any time.
type KVSubscriptions struct {
	cfg     KVSubscriptionConfig
	log     *slog.Logger
	started atomic.Bool

	// mu guards the maps, and orders Run's reading of the registry with the
	// registry's removal notifications (see reconcileLocked).
	mu    sync.Mutex
	subs  map[*Worker]*kvSub
	byURL map[string]*kvSub
}

// NewKVSubscriptions validates cfg and returns subscriptions that start with
// Run.
func NewKVSubscriptions(cfg KVSubscriptionConfig) (*KVSubscriptions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &KVSubscriptions{
		cfg:   cfg,
		log:   orDiscard(cfg.Logger),
		subs:  map[*Worker]*kvSub{},
		byURL: map[string]*kvSub{},
	}, nil
}

// errRunTwice is Run's answer to a second call.
var errRunTwice = errors.New("KVSubscriptions.Run called more than once")

// Run subscribes to the events of every worker in reg now and later, until
// ctx ends; then it closes every stream, waits for every subscription
// goroutine to return and returns nil. It may be called once.
//
// A worker is followed for as long as it is registered: when it is removed
// or replaced (a Join placeholder by its connected worker, say), its stream
// is closed, and a replacement gets a subscription of its own from scratch.
// Once the registry's notification of a removal has reached the
// subscriptions (before Registry.Remove or Replace returns), no handler call
// for the removed worker starts, and any under way has returned. The
// handler must not add, remove or replace workers.
//
// Each subscription goroutine carries the pprof label kv_events_worker (the
// worker's URL), so goroutine dumps say which engine a stream belongs to.
// Goroutines started on its behalf inherit the label: the stream's own, and
// those gRPC starts when the subscription's call is what reconnects the
// worker's channel (which then live as long as the connection).
func (s *KVSubscriptions) Run(ctx context.Context, reg *Registry) error {
	if !s.started.CompareAndSwap(false, true) {
		return errRunTwice
	}
	var wg sync.WaitGroup
	wake := make(chan struct{}, 1)
	stopWatch := reg.Watch(func(c Change) {
		// Stop removed workers here, on the writer's goroutine, so that
		// no event for a worker reaches the handler after the registry
		// has said it is gone. Starting new ones is Run's job.
		var gone []*kvSub
		s.mu.Lock()
		for _, w := range c.Removed {
			k := s.subs[w]
			switch {
			case k == nil && w.group != nil:
				s.rankRemovedLocked(w)
			case k == nil:
			case w.group != nil && s.handOverLocked(w, k, reg.Current()):
				// The engine's other ranks keep its stream.
			default:
				gone = append(gone, k)
			}
		}
		s.mu.Unlock()
		for _, k := range gone {
			k.stop() // waits for a handler call under way
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer func() {
		stopWatch()
		s.mu.Lock()
		for _, k := range s.subs {
			k.stop()
		}
		s.mu.Unlock()
		wg.Wait()
	}()
	for {
		s.mu.Lock()
		s.reconcileLocked(ctx, reg, &wg)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}

// reconcileLocked makes the running subscriptions match reg's current
// snapshot: it forgets those of workers that left (or were stopped by a
// removal and came back: they start afresh) and starts one for every
// eligible worker without one. A subscription that gave up for good
// (UNIMPLEMENTED) stays, so that it is not retried while its worker is
// registered.
//
// Reading the snapshot with s.mu held makes removals race-free: a removal
// published before the read is absent from it, and one published after it
// finds, in Run's watcher, the subscription started here.
func (s *KVSubscriptions) reconcileLocked(ctx context.Context, reg *Registry, wg *sync.WaitGroup) {
	snap := reg.Current()
	present := make(map[*Worker]bool, len(snap.Workers))
	for _, w := range snap.Workers {
		present[w] = true
	}
	for w, k := range s.subs {
		if present[w] && !k.isStopped() {
			continue
		}
		k.stop()
		delete(s.subs, w)
		maps.DeleteFunc(s.byURL, func(_ string, v *kvSub) bool { return v == k })
	}
	if ctx.Err() != nil {
		return
	}
	// An engine's rank targets share one subscription (see kvsub_dp.go).
	covered := map[*dpGroup]bool{}
	for w := range s.subs {
		if w.group != nil {
			covered[w.group] = true
		}
	}
	for _, w := range snap.Workers {
		if _, ok := s.subs[w]; ok || !w.Connected() {
			continue
		}
		src, url, handler, ok := s.eventSource(w, present, covered)
		if !ok {
			continue
		}
		kctx, cancel := context.WithCancel(ctx)
		k := newKVSub(s, url, src, cancel)
		k.handler = handler
		s.subs[w], s.byURL[k.url] = k, k
		if w.group != nil {
			for _, m := range w.group.members {
				s.byURL[m.url] = k
			}
		}
		wg.Go(func() {
			defer cancel()
			pprof.Do(kctx, pprof.Labels("kv_events_worker", k.url), k.run)
		})
	}
}

// Status returns the subscription of the registered worker at url (as
// Registry.Get accepts it), or false when there is none: the worker is not
// registered, not connected, or its backend has no events.
func (s *KVSubscriptions) Status(url string) (KVEventStatus, bool) {
	if u, err := CanonicalName(url); err == nil {
		url = u
	}
	s.mu.Lock()
	k := s.byURL[url]
	s.mu.Unlock()
	if k == nil {
		return KVEventStatus{}, false
	}
	return k.status(), true
}
