package pd

// The two legs of a disaggregated request. What each leg's request carries is
// the protocol's (workers.Disaggregator); sending the legs, the abort rules
// and the bookkeeping are shared and live here.
//
// The abort rules:
//
//   - Each leg runs on a context of its own (the caller's values, not its
//     cancellation), so the router decides when a leg is aborted. An abort is
//     an Abort RPC for the request id followed by cancelling the leg's stream.
//   - The decode leg is never aborted before it has produced its first item:
//     until then it may be in the middle of receiving the KV cache, and an
//     abort can break the transfer and leak the decode engine's memory.
//   - The caller goes away (ctx ends) before the decode leg's first item: the
//     prefill leg is aborted at once, Recv returns the context's error, and
//     the decode leg is left to end by itself (it fails once it gives up on
//     the room) or to produce its first item, whichever comes first, and is
//     aborted then; after Legs.DecodeAbortWait it is aborted anyway, to
//     bound what the router holds.
//   - The prefill leg fails before the decode leg's first item: Recv returns
//     the prefill failure, and the decode leg is handled as above.
//   - The decode leg fails before its first item: the prefill leg is aborted
//     and Recv returns the decode failure.
//   - After the decode leg's first item, the caller going away aborts both
//     legs (a prefill leg still running included); a prefill failure then is
//     only reported through Prefill, since the decode engine already has
//     what it needed.
//
// Each leg counts as one request in flight on its worker (Worker.Acquire)
// from its start until it ended.
//
// Log-probabilities: the prefill leg asks for the prompt's only and the
// decode leg for the output's only, since the decode engine receives the
// prompt's KV cache instead of computing it. The prefill leg's prompt
// log-probabilities are handed to the caller on the first item Recv returns
// after the prefill leg ended, so a disaggregated request answers like a
// single-engine one. When the decode leg's completion comes first (SGLang
// runs both legs at once), Recv waits for the prefill leg's end before
// returning it, bounded by the caller's context; a prefill leg that failed,
// or a caller that went away meanwhile, leaves the completion without
// prompt log-probabilities.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

const (
	// DefaultDecodeAbortWait bounds how long a request that failed or was
	// cancelled waits for its decode leg's first item before aborting it.
	DefaultDecodeAbortWait = 30 * time.Second
	// pdAbortTimeout bounds one Abort RPC.
	pdAbortTimeout = 5 * time.Second
)

// Legs is what Run needs to know beyond the pair and the request.
type Legs struct {
	// Room is the bootstrap room reserved for the request.
	Room int32
	// BootstrapPorts overrides the bootstrap ports the prefill engines
	// report; nil overrides none.
	BootstrapPorts *BootstrapPorts
	// DecodeAbortWait bounds the wait for the decode leg's first item
	// before an abort (see the abort rules); 0 means DefaultDecodeAbortWait.
	DecodeAbortWait time.Duration
	// Held are the two workers' in-flight counts the caller took when it
	// placed the request; the legs adopt them (when Run returns no error)
	// instead of counting the request a second time.
	Held Holds
}

// Holds are a placement's in-flight counts on its prefill and decode
// workers: Worker.Acquire's releases. A nil one is taken by the leg.
type Holds struct {
	Prefill, Decode func()
}

// release ends both counts (each release is idempotent).
func (h Holds) release() {
	for _, r := range []func(){h.Prefill, h.Decode} {
		if r != nil {
			r()
		}
	}
}

// Run starts req as a disaggregated request: prefill on one worker, decode
// on the other, both speaking the same protocol. It returns at once; the
// legs run in the background and the first Recv waits for the decode leg's
// first item or a failure. Errors returned here come before anything was
// sent: a pair whose protocols differ or cannot disaggregate is a
// fault.Precondition; nil arguments are a bug.
func Run(ctx context.Context, prefill, decode *workers.Worker, req *workers.GenerateRequest, l Legs) (PairStream, error) {
	if prefill == nil || decode == nil || req == nil {
		return nil, errors.New("disaggregated request needs a prefill worker, a decode worker and a request")
	}
	if prefill.Protocol() != decode.Protocol() {
		return nil, fault.Newf(fault.Precondition,
			"prefill worker %s speaks %s but decode worker %s speaks %s: a disaggregated pair must speak one protocol",
			prefill.URL(), prefill.Protocol(), decode.URL(), decode.Protocol())
	}
	split, err := workers.DisaggregatorOf(prefill.Protocol())
	if err != nil {
		return nil, err
	}
	h := l.BootstrapPorts.handoff(prefill, l.Room)
	abortWait := l.DecodeAbortWait
	if abortWait <= 0 {
		abortWait = DefaultDecodeAbortWait
	}
	s := &stream{
		prefill:    newLeg("prefill", prefill, req.RequestID, l.Held.Prefill),
		decode:     newLeg("decode", decode, req.RequestID, l.Held.Decode),
		abortWait:  abortWait,
		ready:      make(chan struct{}),
		done:       make(chan struct{}),
		ctx:        ctx,
		wantPrompt: req.Logprobs != nil && req.Logprobs.Prompt,
	}
	go func() {
		<-s.prefill.done
		<-s.decode.done
		close(s.done)
	}()
	if split.Sequential() {
		go s.runSequential(ctx, split, req, h)
	} else {
		go s.runConcurrent(ctx, split, req, h)
	}
	return s, nil
}

// runConcurrent sends both legs at once (SGLang): the decode engine only
// starts receiving once both sides have registered the room, so neither may
// wait for the other. The decode leg is streamed to the caller; the prefill
// leg is drained in the background.
func (s *stream) runConcurrent(ctx context.Context, split workers.Disaggregator, req *workers.GenerateRequest, h workers.Handoff) {
	started := time.Now()
	var perr, derr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		perr = s.prefill.start(ctx, split.PrefillLeg(req, h))
	}()
	go func() {
		defer wg.Done()
		dr, err := split.DecodeLeg(req, h, "")
		if err != nil {
			derr = legError("decode", s.decode.w, err)
			return
		}
		derr = s.decode.start(ctx, dr)
	}()
	wg.Wait()

	if derr != nil {
		// Nothing was decoded, so the prefill leg has nobody to hand its
		// cache to.
		s.endDecode(DecodeResult{Err: derr})
		s.fail(derr)
		if perr != nil {
			s.endPrefill(PrefillResult{Err: perr, Duration: time.Since(started)})
			return
		}
		s.prefill.abort()
		s.drainPrefill(started)
		return
	}
	if perr != nil {
		// The decode leg is running: awaitDecode sees the prefill failure
		// and applies the first-item rule to it.
		s.endPrefill(PrefillResult{Err: perr, Duration: time.Since(started)})
	} else {
		go s.drainPrefill(started)
	}
	s.awaitDecode(ctx, true)
}

// runSequential sends the prefill leg, waits for its completion and sends
// the decode leg with the handoff the prefill engine returned (vLLM). The
// prefill result is final (Prefill, PrefillDone) before the decode leg
// starts.
func (s *stream) runSequential(ctx context.Context, split workers.Disaggregator, req *workers.GenerateRequest, h workers.Handoff) {
	started := time.Now()
	if err := s.prefill.start(ctx, split.PrefillLeg(req, h)); err != nil {
		s.endPrefill(PrefillResult{Err: err, Duration: time.Since(started)})
		s.decode.end()
		s.fail(err)
		return
	}
	kvc := make(chan string, 1)
	go func() { kvc <- s.drainPrefill(started) }()
	var kv string
	select {
	case kv = <-kvc:
	case <-ctx.Done():
		// The decode leg was never sent, so nothing waits on the prefill
		// engine's cache but the prefill leg itself.
		s.fail(ctx.Err())
		s.decode.end()
		s.prefill.abort()
		return
	}
	if err := s.Prefill().Err; err != nil {
		s.decode.end()
		s.fail(err)
		return
	}
	dr, err := split.DecodeLeg(req, h, kv)
	if err != nil {
		// The prefill engine's completion cannot be handed on: its fault.
		s.decode.end()
		s.fail(legError("prefill", s.prefill.w, err))
		return
	}
	if err := s.decode.start(ctx, dr); err != nil {
		s.endDecode(DecodeResult{Err: err})
		s.fail(err)
		return
	}
	s.awaitDecode(ctx, false)
}
