package pd

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// Attempt is one try at serving a request on a decided pair. It holds what
// the pair reserved (the room) until the legs run, and what the router
// measures of a disaggregated request beyond the stream it reads: when the
// prefill leg ended, and which leg a failure belongs to. One per attempt;
// its methods are not for concurrent use, except what Start's callback
// runs.
type Attempt struct {
	d    *Dispatcher
	dec  Pair
	preq *policy.Request
	// started: Start dispatched the legs, which then own the room and
	// the held counts.
	started bool
	// held are the workers' counts taken by Hold, until the legs adopt
	// them.
	held       Holds
	prefillEnd atomic.Int64 // unix nanos when the prefill leg ended; 0 before
}

// NewAttempt prepares an attempt of preq on dec's pair; nothing is sent
// before Start. preq is what the policies observe the legs' outcomes with.
func (d *Dispatcher) NewAttempt(dec Pair, preq *policy.Request) *Attempt {
	return &Attempt{d: d, dec: dec, preq: preq}
}

// Start sends req on the pair (see Dispatch for the stream and the
// observations). onPrefill, when not nil, is called once, from another
// goroutine, with the prefill leg's result as soon as that leg ends (which
// it does before the stream's Done, whatever happened).
func (a *Attempt) Start(ctx context.Context, req *workers.GenerateRequest, onPrefill func(PrefillResult)) (PairStream, error) {
	st, err := a.d.Dispatch(ctx, a.dec, a.preq, req, a.held)
	if err != nil {
		return nil, err
	}
	a.started, a.held = true, Holds{}
	go func() {
		<-st.PrefillDone()
		a.prefillEnd.Store(time.Now().UnixNano())
		if onPrefill != nil {
			onPrefill(st.Prefill())
		}
	}()
	return st, nil
}

// Handoff is the time from the prefill leg's end to at, the decode leg's
// first token: the KV transfer and the decode engine's start, as the client
// waits for them. It is 0 when the prefill leg had not ended by then
// (SGLang's legs overlap).
func (a *Attempt) Handoff(at time.Time) time.Duration {
	end := a.prefillEnd.Load()
	if end == 0 {
		return 0
	}
	return max(at.Sub(time.Unix(0, end)), 0)
}

// Hold counts the attempt in both workers' loads from now on, its
// placement, as a regular request counts from its worker's acquisition:
// the requests placed after it must see its engines taken before its legs
// start. Start hands the counts to the legs, each released as its leg
// ends.
func (a *Attempt) Hold() {
	a.held = Holds{Prefill: a.dec.Prefill.Worker.Acquire(), Decode: a.dec.Decode.Worker.Acquire()}
}

// End closes the attempt: an attempt never started gives its room and its
// held counts back (a started one's legs do as they end). It reports
// whether the legs were started.
func (a *Attempt) End() (started bool) {
	if !a.started {
		a.dec.Release()
		a.held.release()
	}
	return a.started
}
