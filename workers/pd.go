package workers

// Prefill/decode disaggregation: one request served by two engines, a prefill
// engine that computes the prompt's KV cache and a decode engine that receives
// it and generates. RunDisaggregated is the protocol-neutral entry; how the
// two legs are sent is each protocol's business (pd_sglang.go: both legs at
// once, joined by a bootstrap room; pd_vllm.go: prefill first, then decode
// with the handoff the prefill engine returned). Everything else, the abort
// rules and the bookkeeping, is shared and lives here.
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
//     prefill leg is aborted at once, Recv returns the context's status, and
//     the decode leg is left to end by itself (it fails once it gives up on
//     the room) or to produce its first item, whichever comes first, and is
//     aborted then; after Handoff.DecodeAbortWait it is aborted anyway, to
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
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// DefaultBootstrapPort is SGLang's default disaggregation bootstrap port.
	DefaultBootstrapPort = 8998
	// DefaultDecodeAbortWait bounds how long a request that failed or was
	// cancelled waits for its decode leg's first item before aborting it.
	DefaultDecodeAbortWait = 30 * time.Second
	// pdAbortTimeout bounds one Abort RPC.
	pdAbortTimeout = 5 * time.Second
)

// Handoff is how the two legs find each other. For SGLang, both legs carry it
// as disaggregated_params; vLLM ignores it (its prefill engine returns the
// handoff itself, as kv_transfer_params_json).
type Handoff struct {
	// Room is SGLang's bootstrap room: a non-negative id unique among the
	// requests in flight.
	Room int32
	// BootstrapHost is the prefill engine's host; empty means the host of
	// the prefill worker's URL.
	BootstrapHost string
	// BootstrapPort is the prefill engine's bootstrap port; 0 means the one
	// it reported (ModelInfo.BootstrapPort), else DefaultBootstrapPort.
	BootstrapPort int
	// DecodeAbortWait bounds the wait for the decode leg's first item before
	// an abort (see the abort rules); 0 means DefaultDecodeAbortWait.
	DecodeAbortWait time.Duration
}

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

// PDStream is a disaggregated request in flight. Recv yields the decode leg's
// chunks and completion, then io.EOF, like any Stream; a failure of either
// leg before the decode leg's first item is returned by the first Recv as a
// *LegError. The stream ends (Done) only when both legs have ended, which
// needs either Recv to reach the end of the decode leg or the caller's
// context to end.
type PDStream interface {
	Stream
	PrefillDone() <-chan struct{} // closed when the prefill leg has ended
	Prefill() PrefillResult       // valid once PrefillDone is closed
	DecodeStarted() bool          // the decode leg has produced its first item
	Done() <-chan struct{}        // closed when both legs ended, aborts sent
	Decode() DecodeResult         // valid once Done is closed
}

// LegError is a failure of one leg of a disaggregated request. status.Code
// works on it: UNAVAILABLE for engine failures (the engine died, reported an
// internal error, ended the stream early), the engine's own code otherwise
// (INVALID_ARGUMENT, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, CANCELED, ...).
type LegError struct {
	Leg    string // "prefill" or "decode"
	Worker string // the worker's URL
	Err    error
}

func (e *LegError) Error() string {
	return fmt.Sprintf("%s leg on worker %s: %s", e.Leg, e.Worker, status.Convert(e.Err).Message())
}

func (e *LegError) Unwrap() error { return e.Err }

// GRPCStatus makes status.Code and status.Convert see the leg's code.
func (e *LegError) GRPCStatus() *status.Status {
	code := status.Code(e.Err)
	switch code {
	case codes.OK, codes.Unknown, codes.Internal, codes.Aborted, codes.DataLoss, codes.Unavailable:
		code = codes.Unavailable
	}
	return status.New(code, e.Error())
}

func legError(leg string, w *Worker, err error) error {
	var le *LegError
	if errors.As(err, &le) {
		return err
	}
	return &LegError{Leg: leg, Worker: w.URL(), Err: err}
}

// RunDisaggregated starts req as a disaggregated request: prefill on one
// worker, decode on the other, both speaking the same protocol. It returns at
// once; the legs run in the background and the first Recv waits for the
// decode leg's first item or a failure. Errors returned here are the caller's
// (nil workers, mismatched or unsupported protocols), before anything was
// sent.
func RunDisaggregated(ctx context.Context, prefill, decode *Worker, req *GenerateRequest, h Handoff) (PDStream, error) {
	if prefill == nil || decode == nil || req == nil {
		return nil, status.Error(codes.Internal, "disaggregated request needs a prefill worker, a decode worker and a request")
	}
	if prefill.Protocol() != decode.Protocol() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"prefill worker %s speaks %s but decode worker %s speaks %s: a disaggregated pair must speak one protocol",
			prefill.URL(), prefill.Protocol(), decode.URL(), decode.Protocol())
	}
	var run func(context.Context, *pdStream, *GenerateRequest, Handoff)
	switch prefill.Protocol() {
	case ProtocolSGLang:
		run = runSGLang
	case ProtocolVLLM:
		run = runVLLM
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "no disaggregated protocol for %s workers", prefill.Protocol())
	}
	if h.BootstrapHost == "" {
		if _, target, err := ParseAddress(prefill.URL()); err == nil {
			h.BootstrapHost, _, _ = net.SplitHostPort(target)
		}
	}
	if h.BootstrapPort == 0 {
		h.BootstrapPort = prefill.Info().BootstrapPort
	}
	if h.BootstrapPort == 0 {
		h.BootstrapPort = DefaultBootstrapPort
	}
	if h.DecodeAbortWait <= 0 {
		h.DecodeAbortWait = DefaultDecodeAbortWait
	}
	s := &pdStream{
		prefill:    newLeg("prefill", prefill, req.RequestID),
		decode:     newLeg("decode", decode, req.RequestID),
		abortWait:  h.DecodeAbortWait,
		ready:      make(chan struct{}),
		done:       make(chan struct{}),
		ctx:        ctx,
		wantPrompt: wantLogprobs(req.Logprobs) != nil && req.Logprobs.Prompt,
	}
	go func() {
		<-s.prefill.done
		<-s.decode.done
		close(s.done)
	}()
	go run(ctx, s, req, h)
	return s, nil
}

// leg is one engine's half of the request.
type leg struct {
	name string
	w    *Worker
	id   string

	// Set by start, before any other goroutine uses the leg.
	cancel  context.CancelFunc
	release func()
	st      Stream

	abortOnce, endOnce sync.Once
	done               chan struct{}
}

func newLeg(name string, w *Worker, id string) *leg {
	return &leg{name: name, w: w, id: id, done: make(chan struct{})}
}

// start sends the leg's request on a context the caller's cancellation does
// not reach. On error the caller must still end the leg.
func (l *leg) start(ctx context.Context, req *GenerateRequest) error {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.release = cancel, l.w.Acquire()
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

// pdStream implements PDStream. The coordinator goroutine (runSGLang,
// runVLLM) sets err or first and closes ready; after that only Recv touches
// them.
type pdStream struct {
	prefill, decode *leg
	abortWait       time.Duration

	ready   chan struct{}
	err     error  // the request's failure, sticky
	first   *Chunk // the decode leg's first item, not yet returned
	eof     bool
	started atomic.Bool
	gone    atomic.Pointer[error] // set by watch when the caller went away

	mu         sync.Mutex
	prefillRes PrefillResult
	decodeRes  DecodeResult
	decodeSet  bool
	// promptLogprobs are the prefill leg's, set before it ends.
	promptLogprobs []Logprob

	// The prompt's log-probabilities: asked for, and handed on (Recv only).
	ctx                    context.Context // the caller's
	wantPrompt, promptSent bool

	done chan struct{}
}

func (s *pdStream) PrefillDone() <-chan struct{} { return s.prefill.done }
func (s *pdStream) DecodeStarted() bool          { return s.started.Load() }
func (s *pdStream) Done() <-chan struct{}        { return s.done }

func (s *pdStream) Prefill() PrefillResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prefillRes
}

func (s *pdStream) Decode() DecodeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.decodeRes
}

func (s *pdStream) Recv() (Chunk, error) {
	<-s.ready
	switch {
	case s.err != nil:
		return Chunk{}, s.err
	case s.first != nil:
		c := *s.first
		s.first = nil
		s.mergePrompt(&c)
		s.seen(c)
		return c, nil
	case s.eof:
		return Chunk{}, io.EOF
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
		return Chunk{}, s.err
	}
	if err != nil {
		s.err = legError("decode", s.decode.w, err)
		s.endDecode(DecodeResult{Err: s.err})
		return Chunk{}, s.err
	}
	s.mergePrompt(&c)
	s.seen(c)
	return c, nil
}

// mergePrompt hands the prefill leg's prompt log-probabilities on with c,
// once: on a chunk if the prefill leg has ended by then, on the completion
// after waiting for the prefill leg's end (or the caller's). The decode
// leg's own, which it was not asked for, never reach here.
func (s *pdStream) mergePrompt(c *Chunk) {
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

// legLogprobs is what a leg asks for of want: the prompt's for the prefill
// leg, the output's for the decode leg.
func legLogprobs(want *LogprobRequest, prefill bool) *LogprobRequest {
	want = wantLogprobs(want)
	switch {
	case want == nil:
		return nil
	case prefill && want.Prompt:
		return &LogprobRequest{Prompt: true, TopK: want.TopK}
	case !prefill && want.Output:
		return &LogprobRequest{Output: true, TopK: want.TopK}
	}
	return nil
}

// seen ends the decode leg once its completion has been read: the engine's
// stream is read to its end (io.EOF follows the completion at once) and the
// leg released, so the caller need not call Recv again for the legs to end.
func (s *pdStream) seen(c Chunk) {
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
func (s *pdStream) fail(err error) {
	s.err = err
	close(s.ready)
}

// endPrefill records the prefill leg's result and ends it.
func (s *pdStream) endPrefill(r PrefillResult) {
	s.mu.Lock()
	s.prefillRes = r
	s.mu.Unlock()
	s.prefill.end()
}

// endDecode records the decode leg's result, unless one is recorded already,
// and ends it.
func (s *pdStream) endDecode(r DecodeResult) {
	s.setDecode(r)
	s.decode.end()
}

// setDecode records the decode leg's result unless one is recorded already.
func (s *pdStream) setDecode(r DecodeResult) {
	s.mu.Lock()
	if !s.decodeSet {
		s.decodeRes, s.decodeSet = r, true
	}
	s.mu.Unlock()
}

// drainPrefill reads the prefill leg to its end, records its result and
// returns the kv_transfer_params_json of its completion.
func (s *pdStream) drainPrefill(started time.Time) (kvParams string) {
	var r PrefillResult
	var prompt []Logprob // the prompt's log-probabilities, when the leg sent them
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
	c   Chunk
	err error
}

// awaitDecode waits for the started decode leg's first item and settles the
// request: streaming, or failed by whichever leg failed first. With
// watchPrefill, a prefill failure before that item fails the request.
func (s *pdStream) awaitDecode(ctx context.Context, watchPrefill bool) {
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
			err := clientGone(ctx)
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
func (s *pdStream) abortDecodeLater(first <-chan firstItem, cause error) {
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
func (s *pdStream) watch(ctx context.Context) {
	select {
	case <-ctx.Done():
		err := clientGone(ctx)
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

func clientGone(ctx context.Context) error {
	return status.FromContextError(ctx.Err()).Err()
}
