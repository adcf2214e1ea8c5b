package workers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/lograte"
)

// kvSub is one worker's subscription: a loop that opens the engine's event
// stream, checks each batch's sequence number, hands the handler what may be
// applied, and reconnects when the stream breaks.
//
// Sequence numbers. expected holds, per data-parallel rank, the number the
// next batch must carry; it is empty after a fresh start (the handler knows
// nothing of the worker then, or was just reset), and the first batch of a
// rank on a fresh stream sets its baseline. A rank's batch numbered:
//   - as expected is applied;
//   - above it means lost batches (a gap): every rank is reset and the
//     subscription starts again from 0, which an engine reads as "from now",
//     after the backoff;
//   - one below it, as the first batch of that rank on a stream that
//     resumed after a break, is compared with the batch applied under that
//     number (the stream resumed one early to see it; kvsub_restart.go): the
//     same batch is skipped, another means the engine restarted and has
//     numbered past the old position: the mirror is reset and the
//     subscription starts again from 0 at once;
//   - further below it, as the first batch of that rank on a resumed
//     stream, means the engine restarted and numbers afresh: the rank is
//     reset and the batch is its new baseline;
//   - below it otherwise is a duplicate on the same stream, skipped.
//
// A stream that knows the engine restarted and lost the new process's first
// batches says so (KVEventsLostError): that is a reset and a gap at once,
// and the subscription starts again from 0 after the backoff.
//
// A broken stream resumes at the number of the rank's last batch applied,
// so that an engine that kept its history replays what was missed, and
// shows with its first batch whether it is still the process whose batches
// were applied. The request names one start for the whole engine, so with
// several ranks known there is no start that fits them all: every rank is
// reset and the subscription starts again from 0 (a resync).
//
// Backoff. Every subscription after the first waits the backoff, whatever
// ended the last stream (an error, a gap, a refusal), and each wait doubles
// the next, up to MaxBackoff. Only a stream that stays open without a gap or
// an error for StableAfter starts it over: an engine that skips a number on
// every few batches is resubscribed a few times a minute, not at once each
// time. WARN lines are limited to one per kvWarnEvery per worker, the next
// one saying how many were held back.
//
// Mode. The handler treats a worker as approximate until told otherwise.
// The first batch received, or the stream open for ConfirmAfter without an
// error, makes it exact (SetKVEventMode true); a stream broken for longer
// than MaxBackoff makes it approximate again until a stream is confirmed;
// UNIMPLEMENTED makes it approximate for good and ends the subscription.
// kvWarnEvery is the least time between two WARN lines of one worker's
// subscription: an engine that skips numbers or breaks its stream on every
// batch would otherwise write a line per resubscription.
const kvWarnEvery = time.Minute

type kvSub struct {
	url     string
	src     KVEventSource
	handler KVEventHandler
	cfg     *KVSubscriptionConfig
	log     *slog.Logger
	cancel  context.CancelFunc

	// callMu orders every handler call with stop: once stop has returned
	// no handler call starts for this worker.
	callMu  sync.Mutex
	stopped bool

	statMu sync.Mutex
	st     KVEventStatus

	// The rest belongs to run's goroutine, and while a stream is open to
	// it and the stream's receiver, under mu (see stream).
	mu          sync.Mutex
	expected    map[int]uint64
	exact       bool        // what the handler was last told
	brokenSince time.Time   // when the stream last failed; zero while it works
	distrust    *time.Timer // fires MaxBackoff after brokenSince while exact
	backoff     time.Duration
	warn        *lograte.Limiter // one WARN line per kvWarnEvery
	noEvents    bool             // the engine answered UNIMPLEMENTED (logged once)
	groups      prefixGroups     // keeps the events of prefix cache groups
	last        kvMark           // the last batch applied
	probe       kvMark           // the batch a resumed stream must show first
	afresh      kvAfresh         // a restart seen past the old position
}

func newKVSub(s *KVSubscriptions, url string, src KVEventSource, cancel context.CancelFunc) *kvSub {
	return &kvSub{
		url:      url,
		src:      src,
		handler:  s.cfg.Handler,
		cfg:      &s.cfg,
		log:      s.log.With("worker", url),
		cancel:   cancel,
		st:       KVEventStatus{Mode: KVModeConnecting},
		expected: map[int]uint64{},
		backoff:  s.cfg.InitialBackoff,
		warn:     lograte.New(kvWarnEvery),
		groups:   prefixGroups{log: s.log.With("worker", url)},
	}
}

// stop ends the subscription: no handler call starts after it returns, and
// the goroutine returns soon. It is idempotent.
func (k *kvSub) stop() {
	k.callMu.Lock()
	k.stopped = true
	k.callMu.Unlock()
	k.cancel()
}

func (k *kvSub) isStopped() bool {
	k.callMu.Lock()
	defer k.callMu.Unlock()
	return k.stopped
}

// call runs f on the handler unless the subscription was stopped, and
// reports whether it ran.
func (k *kvSub) call(f func(h KVEventHandler)) bool {
	k.callMu.Lock()
	defer k.callMu.Unlock()
	if k.stopped {
		return false
	}
	f(k.handler)
	return true
}

func (k *kvSub) status() KVEventStatus {
	k.statMu.Lock()
	defer k.statMu.Unlock()
	return k.st
}

func (k *kvSub) update(f func(st *KVEventStatus)) {
	k.statMu.Lock()
	f(&k.st)
	k.statMu.Unlock()
}

// kvNext is what the subscription does once a stream has ended.
type kvNext int

const (
	kvBackOff  kvNext = iota // wait (backoff), then subscribe again
	kvAtOnce                 // subscribe again now (restartedPast)
	kvRecheck                // the engine has no events: ask again after Recheck
	kvFinished               // stop: ctx ended
)

// run subscribes until ctx ends. An engine without events is asked again
// only every Recheck.
func (k *kvSub) run(ctx context.Context) {
	defer k.stopDistrust()
	var start uint64
	for {
		next, how := k.stream(ctx, start)
		switch how {
		case kvFinished:
			return
		case kvRecheck:
			if !k.recheckLater(ctx) {
				return
			}
		case kvAtOnce:
		default:
			if !k.sleep(ctx) {
				return
			}
		}
		start = next
	}
}

// recheckLater waits Recheck after an engine showed it has no events; the
// backoff starts over for the subscription that follows. It returns false
// if ctx ended first.
func (k *kvSub) recheckLater(ctx context.Context) bool {
	k.stopDistrust()
	t := time.NewTimer(k.cfg.Recheck)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		k.backoff = k.cfg.InitialBackoff
		return true
	}
}

// kvEnd is how a stream's receiver ended: the error Recv returned, or a
// batch that ended the stream (a skipped number, or a restart seen past the
// old position).
type kvEnd struct {
	err      error
	verdict  kvVerdict
	progress bool // a valid batch arrived on the stream
}

// kvVerdict is what a batch means for its stream.
type kvVerdict int

const (
	kvGoOn      kvVerdict = iota // applied or skipped: receive the next
	kvGap                        // numbers skipped: start again from 0 after the backoff
	kvRestarted                  // restartedPast: start again from 0 at once
)

// stream opens one stream from start and follows it until it ends; it
// returns the start of the next subscription and when to open it.
//
// A receiver goroutine calls Recv and handles each batch itself, before it
// asks for the next one; this goroutine meanwhile waits for the
// confirmation, stability and distrust timers (Recv blocks, and they must
// fire while it does) and for the receiver's end. k.mu orders the two: the
// receiver holds it while it handles a batch, this goroutine while it
// handles a timer. Handing each batch from a receiving goroutine to this
// one instead cost a goroutine wake-up per batch (on a machine whose
// processors are often idle, each wake-up also starts an idle thread
// spinning), and nothing is gained by it: a batch is
// applied as soon as it is decoded, in the stream's order, and the next
// one is received once it has been.
func (k *kvSub) stream(ctx context.Context, start uint64) (uint64, kvNext) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := k.src.SubscribeKVEvents(sctx, start)
	if err != nil {
		return k.failed(ctx, start, err, false)
	}
	k.update(func(s *KVEventStatus) { s.Connected = true })
	defer k.update(func(s *KVEventStatus) { s.Connected = false })

	ended := make(chan kvEnd, 1)
	received := make(chan struct{})
	go func() {
		defer close(received)
		ended <- k.receive(st)
	}()
	defer func() {
		cancel() // ends a Recv under way
		<-received
	}()

	confirm := time.NewTimer(k.cfg.ConfirmAfter)
	defer confirm.Stop()
	stable := time.NewTimer(k.cfg.StableAfter)
	defer stable.Stop()
	for {
		// The receiver's confirm stops the distrust timer; a channel read
		// here before that never fires after it.
		k.mu.Lock()
		distrust := k.distrustC()
		k.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, kvFinished
		case <-confirm.C:
			k.mu.Lock()
			k.confirm()
			k.mu.Unlock()
		case <-stable.C:
			k.mu.Lock()
			k.backoff = k.cfg.InitialBackoff
			k.mu.Unlock()
		case <-distrust:
			k.mu.Lock()
			// Unless a batch confirmed the stream since the timer fired.
			if k.distrustC() == distrust {
				k.distrustNow()
			}
			k.mu.Unlock()
		case e := <-ended:
			// The receiver has returned: what follows is this
			// goroutine's alone.
			<-received
			if lost := (*KVEventsLostError)(nil); errors.As(e.err, &lost) {
				k.lostAcrossRestart(lost)
				return 0, kvBackOff
			}
			if e.err != nil {
				return k.failed(ctx, start, e.err, e.progress)
			}
			if e.verdict == kvRestarted {
				return 0, kvAtOnce
			}
			return 0, kvBackOff // a gap
		}
	}
}

// receive receives st's batches and handles each, in order, before it
// receives the next, until Recv fails or a batch shows a gap.
func (k *kvSub) receive(st KVEventStream) kvEnd {
	seen := map[int]bool{} // ranks with a batch on this stream
	progress := false
	for {
		b, err := st.Recv()
		if err != nil {
			return kvEnd{err: err, progress: progress}
		}
		at := time.Now()
		progress = true
		k.mu.Lock()
		v := k.batch(b, at, seen)
		k.mu.Unlock()
		if v != kvGoOn {
			return kvEnd{verdict: v, progress: true}
		}
	}
}

// batch applies, skips or refuses one batch received at at, following the
// rules in kvSub's comment, and says whether the stream goes on.
func (k *kvSub) batch(b *KVEventBatch, at time.Time, seen map[int]bool) kvVerdict {
	lag := time.Duration(0)
	if !b.Timestamp.IsZero() {
		lag = max(at.Sub(b.Timestamp), 0)
		if k.cfg.Metrics.Lag != nil {
			k.cfg.Metrics.Lag(k.url, lag)
		}
	}
	k.update(func(s *KVEventStatus) { s.LastBatch, s.Lag = at, lag })

	if b.LoadOnly {
		// A heartbeat: the stream is alive; there is nothing to apply.
		k.confirm()
		return kvGoOn
	}
	rank := b.DPRank
	first := !seen[rank]
	seen[rank] = true
	next, known := k.expected[rank]
	var same, probed bool
	if first {
		same, probed = k.sameAsApplied(b)
	}
	v := kvGoOn
	switch {
	case probed && same:
		// The batch applied last, sent again: the engine kept its numbering.
	case probed:
		if !k.restartedPast(b) {
			v = kvRestarted
		}
	case !known || b.Seq == next:
		if first {
			k.startedAfresh(b)
		}
		k.apply(b)
	case b.Seq > next:
		k.warn.Warn(k.log, "KV events lost: sequence gap; resetting the worker's cache mirror and subscribing afresh after the backoff",
			"rank", rank, "expected", next, "received", b.Seq, "backoff", k.backoff)
		k.update(func(s *KVEventStatus) { s.Gaps++ })
		if k.cfg.Metrics.Gap != nil {
			k.cfg.Metrics.Gap(k.url)
		}
		k.forget()
		v = kvGap
	case first:
		// Only a resumed stream can open below the expected number: the
		// engine restarted and counts again from its start.
		k.log.Info("engine restarted (KV event numbers went backwards); resetting the worker's cache mirror",
			"rank", rank, "expected", next, "received", b.Seq)
		k.update(func(s *KVEventStatus) { s.Resets++ })
		if k.cfg.Metrics.Reset != nil {
			k.cfg.Metrics.Reset(k.url)
		}
		k.call(func(h KVEventHandler) { h.ResetKVEvents(k.url, rank) })
		k.apply(b)
	default:
		k.log.Debug("duplicate KV event batch skipped", "rank", rank, "expected", next, "received", b.Seq)
		k.update(func(s *KVEventStatus) { s.Duplicates++ })
		if k.cfg.Metrics.Duplicate != nil {
			k.cfg.Metrics.Duplicate(k.url)
		}
	}
	k.confirm()
	return v
}

// apply hands b to the handler and counts it.
func (k *kvSub) apply(b *KVEventBatch) {
	sum := kvDigest(b) // before the filter changes b
	k.groups.filter(b)
	if !k.call(func(h KVEventHandler) { h.ApplyKVEvents(k.url, b) }) {
		return
	}
	k.expected[b.DPRank] = b.Seq + 1
	k.last = kvMark{rank: b.DPRank, seq: b.Seq, sum: sum, ok: true}
	var n [KVCleared + 1]int
	for _, e := range b.Events {
		if e.Kind <= KVCleared {
			n[e.Kind]++
		}
	}
	k.update(func(s *KVEventStatus) {
		s.Batches++
		s.Stored += uint64(n[KVStored])
		s.Removed += uint64(n[KVRemoved])
		s.Cleared += uint64(n[KVCleared])
		s.LastSeq, s.HasLastSeq = b.Seq, true
	})
	if k.cfg.Metrics.Applied != nil {
		for kind := KVStored; kind <= KVCleared; kind++ {
			if n[kind] > 0 {
				k.cfg.Metrics.Applied(k.url, kind, n[kind])
			}
		}
	}
}

// forget resets every rank the handler has heard of, before a fresh start.
func (k *kvSub) forget() {
	for _, rank := range slices.Sorted(maps.Keys(k.expected)) {
		k.call(func(h KVEventHandler) { h.ResetKVEvents(k.url, rank) })
	}
	clear(k.expected)
	k.last, k.probe, k.afresh = kvMark{}, kvMark{}, kvAfresh{}
}

// failed handles a stream (or a subscription) that ended with err and
// returns where and when to subscribe next.
func (k *kvSub) failed(ctx context.Context, start uint64, err error, progress bool) (uint64, kvNext) {
	if ctx.Err() != nil {
		return 0, kvFinished // closed by us: the worker left, or Run ended
	}
	code, text := kvStreamError(err)
	k.update(func(s *KVEventStatus) { s.Failures++; s.LastError = text })
	if k.cfg.Metrics.Failure != nil {
		k.cfg.Metrics.Failure(k.url, code)
	}
	wasWorking := k.brokenSince.IsZero()
	k.broken()

	switch code {
	case codes.Unimplemented:
		if !k.noEvents {
			k.noEvents = true
			k.log.Info("engine publishes no KV events; its cache is approximated from routing decisions, and its events are asked for again rarely",
				"err", err, "recheck_after", k.cfg.Recheck)
		} else {
			k.log.Debug("engine still publishes no KV events", "err", err)
		}
		k.forget()
		if k.exact || k.status().Mode != KVModeApproximate {
			k.setMode(false, KVModeApproximate)
		}
		return 0, kvRecheck
	case codes.OutOfRange, codes.DataLoss:
		k.warn.Warn(k.log, "KV event stream cannot continue; resetting the worker's cache mirror and subscribing afresh after the backoff",
			"code", code, "err", err, "backoff", k.backoff)
		k.resync()
		return 0, kvBackOff
	}

	if wasWorking {
		k.warn.Warn(k.log, "KV event stream broken; reconnecting after the backoff", "code", code, "err", err, "backoff", k.backoff)
	} else {
		k.log.Debug("KV event stream still broken", "code", code, "err", err)
	}
	switch len(k.expected) {
	case 0:
		return 0, kvBackOff
	case 1:
		for rank, next := range k.expected {
			return k.resumeAt(rank, next), kvBackOff
		}
	}
	// One start cannot resume several ranks' numbering.
	k.resync()
	return 0, kvBackOff
}

// resync counts a deliberate fresh start and forgets every rank.
func (k *kvSub) resync() {
	k.update(func(s *KVEventStatus) { s.Resyncs++ })
	if k.cfg.Metrics.Resync != nil {
		k.cfg.Metrics.Resync(k.url)
	}
	k.forget()
}

// confirm records that the stream works: the handler is told the worker's
// events are the truth. The backoff goes on: only StableAfter of health
// starts it over (see stream).
func (k *kvSub) confirm() {
	k.brokenSince = time.Time{}
	k.stopDistrust()
	k.noEvents = false
	if !k.exact {
		k.log.Info("KV events flowing; the worker's cache is mirrored from its events")
		k.setMode(true, KVModeEvents)
	}
}

// broken records that the stream failed, and arms the distrust timer.
func (k *kvSub) broken() {
	if !k.brokenSince.IsZero() {
		return
	}
	k.brokenSince = time.Now()
	if k.exact {
		k.distrust = time.NewTimer(k.cfg.MaxBackoff)
	}
}

func (k *kvSub) distrustC() <-chan time.Time {
	if k.distrust == nil {
		return nil
	}
	return k.distrust.C
}

func (k *kvSub) stopDistrust() {
	if k.distrust != nil {
		k.distrust.Stop()
		k.distrust = nil
	}
}

// distrustNow runs when the stream has been broken for MaxBackoff: the
// mirror may be missing anything since, so routing for the worker goes back
// to approximate until a stream is confirmed.
func (k *kvSub) distrustNow() {
	k.distrust = nil
	if k.exact {
		k.log.Warn("KV event stream broken for too long; the worker's cache is approximated until it is back",
			"since", k.brokenSince)
		k.setMode(false, KVModeApproximate)
	}
}

func (k *kvSub) setMode(exact bool, mode KVEventMode) {
	k.exact = exact
	k.call(func(h KVEventHandler) { h.SetKVEventMode(k.url, exact) })
	k.update(func(s *KVEventStatus) { s.Mode = mode })
}

// sleep waits the current backoff, jittered, and doubles it for next time.
// It returns false if ctx ended first.
func (k *kvSub) sleep(ctx context.Context) bool {
	d := k.backoff
	if j := k.cfg.Jitter; j > 0 {
		d += time.Duration((2*rand.Float64() - 1) * j * float64(d))
	}
	k.backoff = min(2*k.backoff, k.cfg.MaxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-k.distrustC():
			k.distrustNow()
		}
	}
}

// kvStreamError is the gRPC code and the text of the error a KV event
// stream ended with. An engine that closes the stream without an error
// status (io.EOF) counts as UNAVAILABLE: the stream is gone and another must
// be opened. What the router itself found wrong with the stream (a batch
// that breaks the protocol, a ZMQ connection lost) is a fault, given the
// code an engine would have ended the stream with, so that the failures
// metric and the resync decision read one code whatever the source.
func kvStreamError(err error) (codes.Code, string) {
	if errors.Is(err, io.EOF) {
		return codes.Unavailable, "the engine closed the KV event stream"
	}
	if k, ok := fault.KindOf(err); ok {
		switch k {
		case fault.Corrupt:
			return codes.DataLoss, err.Error()
		case fault.Unavailable:
			return codes.Unavailable, err.Error()
		case fault.Unsupported:
			return codes.Unimplemented, err.Error()
		}
		return codes.Internal, err.Error()
	}
	return status.Code(err), err.Error()
}
