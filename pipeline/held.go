package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/internal/stackroom"
	"github.com/kvgate/kvgate/workers"
)

// An engine may ignore Abort (and the cancellation of its stream): a request
// the router gave up on keeps running there, holding a slot and KV pages. So
// the router does not believe an Abort; it believes the engine's stream. A
// whole-request attempt's engine stream is opened on a context of its own
// that the client's going away does not cancel, and the attempt's worker
// keeps counting the request in flight until that stream ends: at once for
// an engine that honours Abort (its stream ends with finish "abort"), at its
// natural end for one that does not. A stream that does not end within
// --abort-confirm-timeout of the attempt's end is cut and the request
// released, so that an engine which never ends a stream cannot pin the
// count for ever.

// heldStream relays an engine stream to one attempt while the stream may
// outlive it. A pump goroutine reads the engine; Recv returns what it read,
// or gives up when the attempt's context ends, as a gRPC stream on that
// context would.
type heldStream struct {
	attempt   context.Context
	msgs      chan received
	abandoned chan struct{} // closed when the attempt is over
	done      chan struct{} // closed when the engine's stream has ended
	// ended is set once the engine's stream ended or sent its
	// completion: nothing more runs on the engine.
	ended atomic.Bool
	stop  context.CancelFunc // cuts the engine's stream
}

type received struct {
	c   workers.Chunk
	err error
}

// engineContext is the context an attempt's engine stream runs on: actx's
// values (trace context), not its cancellation; the client's deadline, if
// any, is passed on extended by the confirmation bound.
func (s *Pipeline) engineContext(actx context.Context) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(actx)
	if dl, ok := actx.Deadline(); ok {
		return context.WithDeadline(base, dl.Add(s.cfg.AbortConfirmTimeout))
	}
	return context.WithCancel(base)
}

func holdStream(actx context.Context, st workers.Stream, stop context.CancelFunc) *heldStream {
	h := &heldStream{attempt: actx, msgs: make(chan received), abandoned: make(chan struct{}),
		done: make(chan struct{}), stop: stop}
	go h.pump(st)
	return h
}

func (h *heldStream) pump(st workers.Stream) {
	// A fresh goroutine: its stack would grow, copied, deep inside the
	// gRPC client's Recv.
	stackroom.Reserve16K()
	defer close(h.done)
	for {
		c, err := st.Recv()
		if err != nil || c.Final != nil {
			h.ended.Store(true)
		}
		select {
		case h.msgs <- received{c, err}:
		case <-h.abandoned: // nobody reads any more: drain to the end
		}
		if err != nil {
			return
		}
	}
}

func (h *heldStream) Recv() (workers.Chunk, error) {
	select {
	case m := <-h.msgs:
		return m.c, m.err
	case <-h.attempt.Done():
		return workers.Chunk{}, h.attempt.Err()
	}
}

// release gives back the attempt's place on its worker (free) once the
// engine's stream has ended, or after bound; a server shutdown (stopped)
// ends the wait too. Called once, when the attempt is over.
func (h *heldStream) release(free func(), bound time.Duration, stopped <-chan struct{}) {
	close(h.abandoned)
	if h.ended.Load() || bound <= 0 {
		h.stop()
		free()
		return
	}
	go func() {
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-h.done:
		case <-t.C:
		case <-stopped:
		}
		h.stop()
		free()
	}()
}

// abortResendFirst is how long after an Abort the engine's stream may run
// on before the Abort is sent again; each later resend waits twice as long.
const abortResendFirst = 250 * time.Millisecond

// reabort sends the attempt's Abort again while the engine's stream runs
// on. An Abort that overtakes its request (the client left as the request
// was being sent) finds nothing on the engine, which answers it as one for
// a finished request, SGLang and vLLM alike; the request then runs to its
// end while the router waits for it, up to --abort-confirm-timeout. Sent
// again, it finds the request. The resends stop when the stream ends, which
// the release's bound or a shutdown forces (heldStream.release), or when
// one fails, which cuts the stream.
func (h *heldStream) reabort(again func() error) {
	if h.ended.Load() {
		return
	}
	go func() {
		wait := abortResendFirst
		for {
			t := time.NewTimer(wait)
			select {
			case <-h.done:
				t.Stop()
				return
			case <-t.C:
			}
			if err := again(); err != nil {
				h.stop()
				return
			}
			wait *= 2
		}
	}()
}
