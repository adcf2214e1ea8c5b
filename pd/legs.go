package pd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// PrefillResult is how the prefill leg ended: its failure (a *LegError, nil
// when it completed), the prefill engine's token report, and the time from
// the leg's start to its end.
type PrefillResult struct {
	Err                        error
	PromptTokens, CachedTokens uint32
	Duration                   time.Duration
}

// DecodeResult is how the decode leg ended: its failure or the reason it was
// aborted (nil when it completed), and the decode engine's completion report.
type DecodeResult struct {
	Err                                          error
	PromptTokens, CompletionTokens, CachedTokens uint32
	OutputIDs                                    []uint32
}

// PairStream is a disaggregated request in flight. Recv yields the decode leg's
// chunks and completion, then io.EOF, like any workers.Stream; a failure of either
// leg before the decode leg's first item is returned by the first Recv as a
// *LegError. The stream ends (Done) only when both legs have ended, which
// needs either Recv to reach the end of the decode leg or the caller's
// context to end.
type PairStream interface {
	workers.Stream
	PrefillDone() <-chan struct{} // closed when the prefill leg has ended
	Prefill() PrefillResult       // valid once PrefillDone is closed
	DecodeStarted() bool          // the decode leg has produced its first item
	Done() <-chan struct{}        // closed when both legs ended, aborts sent
	Decode() DecodeResult         // valid once Done is closed
}

// LegError is a failure of one leg of a disaggregated request, saying which
// leg and worker failed so that the router blames the right one. Err is what
// the engine answered: its own status when it is about the request
// (INVALID_ARGUMENT, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ...) or the
// caller's cancellation, relayed unchanged; a fault.Unavailable wrapping it
// when the engine itself failed (it died, reported an internal error, ended
// the stream early), which another pair may not repeat.
type LegError struct {
	Leg    string // "prefill" or "decode"
	Worker string // the worker's URL
	Err    error
}

func (e *LegError) Error() string {
	return fmt.Sprintf("%s leg on worker %s: %s", e.Leg, e.Worker, status.Convert(e.Err).Message())
}

func (e *LegError) Unwrap() error { return e.Err }

// legError wraps err, the engine's answer on one leg, in a *LegError (once).
func legError(leg string, w *workers.Worker, err error) error {
	var le *LegError
	if errors.As(err, &le) {
		return err
	}
	return &LegError{Leg: leg, Worker: w.URL(), Err: engineFault(err)}
}

// engineFault says whether an engine's answer is the engine's failure: an
// error that is neither a fault, nor the caller's cancellation, nor a status
// about the request becomes a fault.Unavailable carrying the engine's
// message and its status as the cause.
func engineFault(err error) error {
	if _, ok := fault.As(err); ok || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	switch st := status.Convert(err); st.Code() {
	case codes.OK, codes.Unknown, codes.Internal, codes.Aborted, codes.DataLoss, codes.Unavailable:
		return &fault.Error{Kind: fault.Unavailable, Msg: st.Message(), Err: err}
	}
	return err
}

// leg is one engine's half of the request.
type leg struct {
	name string
	w    *workers.Worker
	id   string

	// Set by start, before any other goroutine uses the leg.
	cancel  context.CancelFunc
	release func()
	st      workers.Stream

	abortOnce, endOnce sync.Once
	done               chan struct{}
}

// newLeg counts the leg in w's load at once, not when it starts: the legs
// start in goroutines (the decode leg of a sequential pair only after the
// prefill), and a request bound late must not leave its engines looking
// free meanwhile, or the requests waiting behind it are bound to them too.
// held, when not nil, is the count the placement took on w, which the leg
// adopts: taking another read one request as two until the placement let
// go of its own, and a placement in that moment found an engine with room
// full.
func newLeg(name string, w *workers.Worker, id string, held func()) *leg {
	if held == nil {
		held = w.Acquire()
	}
	return &leg{name: name, w: w, id: id, done: make(chan struct{}), release: held}
}

// start sends the leg's request on a context the caller's cancellation does
// not reach. On error the caller must still end the leg.
func (l *leg) start(ctx context.Context, req *workers.GenerateRequest) error {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	st, err := l.w.Backend().Generate(lctx, req)
	if err != nil {
		return legError(l.name, l.w, err)
	}
	l.st = st
	return nil
}

// end releases the leg: its stream, its in-flight count, and marks it ended.
func (l *leg) end() {
	l.endOnce.Do(func() {
		if l.cancel != nil {
			l.cancel()
		}
		if l.release != nil {
			l.release()
		}
		close(l.done)
	})
}

func (l *leg) ended() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// abort asks the engine to drop the leg's request, then cancels its stream.
// A leg that has ended, or was never started, is left alone. Whoever reads
// the leg's stream sees the cancellation and ends the leg.
func (l *leg) abort() {
	l.abortOnce.Do(func() {
		if l.ended() || l.cancel == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), pdAbortTimeout)
		_ = l.w.Backend().Abort(ctx, l.id) // best effort: the cancellation follows
		cancel()
		l.cancel()
	})
}

// stream implements PairStream. The coordinator goroutine (runConcurrent,
// runSequential) sets err or first and closes ready; after that only Recv touches
// them.
type stream struct {
	prefill, decode *leg
	abortWait       time.Duration

	ready   chan struct{}
	err     error          // the request's failure, sticky
	first   *workers.Chunk // the decode leg's first item, not yet returned
	eof     bool
	started atomic.Bool
	gone    atomic.Pointer[error] // set by watch when the caller went away

	mu         sync.Mutex
	prefillRes PrefillResult
	decodeRes  DecodeResult
	decodeSet  bool
	// promptLogprobs are the prefill leg's, set before it ends.
	promptLogprobs []workers.Logprob

	// The prompt's log-probabilities: asked for, and handed on (Recv only).
	ctx                    context.Context // the caller's
	wantPrompt, promptSent bool

	done chan struct{}
}

func (s *stream) PrefillDone() <-chan struct{} { return s.prefill.done }
func (s *stream) DecodeStarted() bool          { return s.started.Load() }
func (s *stream) Done() <-chan struct{}        { return s.done }

func (s *stream) Prefill() PrefillResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prefillRes
}

func (s *stream) Decode() DecodeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.decodeRes
}

func (s *stream) Recv() (workers.Chunk, error) {
	<-s.ready
	switch {
	case s.err != nil:
		return workers.Chunk{}, s.err
	case s.first != nil:
		c := *s.first
		s.first = nil
		s.mergePrompt(&c)
		s.seen(c)
		return c, nil
	case s.eof:
		return workers.Chunk{}, io.EOF
	}
	c, err := s.decode.st.Recv()
	if g := s.gone.Load(); g != nil {
		// The caller went away and watch aborts the leg: whatever the
		// engine answered to the abort (SGLang and vLLM may complete with
		// finish_reason "abort"), the request ended with the caller. The
		// leg is aborted here too (once, whoever comes first): ending it
		// before watch gets to it would cancel the stream without the
		// Abort RPC.
		s.err = *g
		s.decode.abort()
		s.endDecode(DecodeResult{Err: s.err})
		return workers.Chunk{}, s.err
	}
	if err != nil {
		s.err = legError("decode", s.decode.w, err)
		s.endDecode(DecodeResult{Err: s.err})
		return workers.Chunk{}, s.err
	}
	s.mergePrompt(&c)
	s.seen(c)
	return c, nil
}

// mergePrompt hands the prefill leg's prompt log-probabilities on with c,
// once: on a chunk if the prefill leg has ended by then, on the completion
// after waiting for the prefill leg's end (or the caller's). The decode
// leg's own, which it was not asked for, never reach here.
func (s *stream) mergePrompt(c *workers.Chunk) {
	if !s.wantPrompt || s.promptSent {
		return
	}
	if c.Final == nil && !s.prefill.ended() {
		return
	}
	if c.Final != nil {
		select {
		case <-s.prefill.done:
		case <-s.ctx.Done():
			s.promptSent = true
			return
		}
	}
	s.promptSent = true
	s.mu.Lock()
	lps := s.promptLogprobs
	s.mu.Unlock()
	if c.Final != nil {
		c.Final.PromptLogprobs = lps
	} else {
		c.PromptLogprobs = lps
	}
}

// seen ends the decode leg once its completion has been read: the engine's
// stream is read to its end (io.EOF follows the completion at once) and the
// leg released, so the caller need not call Recv again for the legs to end.
func (s *stream) seen(c workers.Chunk) {
	if c.Final == nil {
		return
	}
	_, _ = s.decode.st.Recv()
	s.eof = true
	f := c.Final
	s.endDecode(DecodeResult{PromptTokens: f.PromptTokens, CompletionTokens: f.CompletionTokens,
		CachedTokens: f.CachedTokens, OutputIDs: f.OutputIDs})
}

// fail makes err the request's answer.
func (s *stream) fail(err error) {
	s.err = err
	close(s.ready)
}

// endPrefill records the prefill leg's result and ends it.
func (s *stream) endPrefill(r PrefillResult) {
	s.mu.Lock()
	s.prefillRes = r
	s.mu.Unlock()
	s.prefill.end()
}

// endDecode records the decode leg's result, unless one is recorded already,
// and ends it.
func (s *stream) endDecode(r DecodeResult) {
	s.setDecode(r)
	s.decode.end()
}

// setDecode records the decode leg's result unless one is recorded already.
func (s *stream) setDecode(r DecodeResult) {
	s.mu.Lock()
	if !s.decodeSet {
		s.decodeRes, s.decodeSet = r, true
	}
	s.mu.Unlock()
}

// drainPrefill reads the prefill leg to its end, records its result and
// returns the kv_transfer_params_json of its completion.
func (s *stream) drainPrefill(started time.Time) (kvParams string) {
	var r PrefillResult
	var prompt []workers.Logprob // the prompt's log-probabilities, when the leg sent them
	for {
		c, err := s.prefill.st.Recv()
		if err != nil {
			r.Err = legError("prefill", s.prefill.w, err)
			break
		}
		r.PromptTokens, r.CachedTokens = c.PromptTokens, c.CachedTokens
		if c.PromptLogprobs != nil {
			prompt = c.PromptLogprobs
		} else if c.Final != nil && c.Final.PromptLogprobs != nil {
			prompt = c.Final.PromptLogprobs
		}
		if c.Final != nil {
			kvParams = c.Final.KVTransferParamsJSON
			_, _ = s.prefill.st.Recv() // io.EOF: releases the call
			break
		}
	}
	r.Duration = time.Since(started)
	s.mu.Lock()
	s.promptLogprobs = prompt // read once the leg has ended (mergePrompt)
	s.mu.Unlock()
	s.endPrefill(r)
	return kvParams
}

type firstItem struct {
	c   workers.Chunk
	err error
}

// awaitDecode waits for the started decode leg's first item and settles the
// request: streaming, or failed by whichever leg failed first. With
// watchPrefill, a prefill failure before that item fails the request.
func (s *stream) awaitDecode(ctx context.Context, watchPrefill bool) {
	first := make(chan firstItem, 1)
	go func() {
		c, err := s.decode.st.Recv()
		first <- firstItem{c, err}
	}()
	var prefillEnded <-chan struct{}
	if watchPrefill {
		prefillEnded = s.prefill.done
	}
	for {
		select {
		case f := <-first:
			if f.err != nil {
				err := legError("decode", s.decode.w, f.err)
				s.endDecode(DecodeResult{Err: err})
				s.fail(err)
				s.prefill.abort()
				return
			}
			s.started.Store(true)
			s.first = &f.c
			close(s.ready)
			s.watch(ctx)
			return
		case <-prefillEnded:
			if err := s.Prefill().Err; err != nil {
				s.fail(err)
				s.abortDecodeLater(first, err)
				return
			}
			prefillEnded = nil
		case <-ctx.Done():
			err := ctx.Err()
			s.fail(err)
			s.prefill.abort()
			s.abortDecodeLater(first, err)
			return
		}
	}
}

// abortDecodeLater applies the first-item rule to a decode leg the request no
// longer needs: it is aborted once it has produced its first item, or after
// abortWait; one that ends by itself is only released.
func (s *stream) abortDecodeLater(first <-chan firstItem, cause error) {
	t := time.NewTimer(s.abortWait)
	defer t.Stop()
	select {
	case f := <-first:
		if f.err != nil {
			s.endDecode(DecodeResult{Err: legError("decode", s.decode.w, f.err)})
			return
		}
		s.started.Store(true)
	case <-t.C:
	}
	s.decode.abort()
	s.endDecode(DecodeResult{Err: cause})
}

// watch aborts both legs if the caller goes away after the decode leg's
// first item; it returns when both legs have ended.
func (s *stream) watch(ctx context.Context) {
	select {
	case <-ctx.Done():
		err := ctx.Err()
		s.gone.Store(&err)
		if !s.decode.ended() {
			s.setDecode(DecodeResult{Err: err})
			s.decode.abort()
			s.decode.end()
		}
		s.prefill.abort()
	case <-s.done:
	}
}
