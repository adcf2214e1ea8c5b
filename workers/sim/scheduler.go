package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The life of one request: validation, the FIFO queue, admission into the KV
// cache, prefill and decode timing, and the ways it can end.

type reqState int

const (
	stateWaiting reqState = iota
	stateRunning
	stateDone
	stateTransfer // a decode leg waiting for its room or its KV transfer
)

// request is one generation in protocol-neutral terms; the protocol files
// build it from their GenerateRequest.
type request struct {
	id     string
	prompt []uint32
	maxNew int
	stream bool
	sample sampler
	pd     *pdLeg // nil: a regular request
	lp     logprobSpec

	// Guarded by Engine.mu.
	state  reqState
	lease  *lease
	cached int
	// arrivalCached is what the prefix cache held of the prompt when the
	// request was queued: a request admitted with less lost the rest to
	// evictions while it waited (Stats.QueueShrunk).
	arrivalCached int
	// arrivalEvictedAgo is, with debug logging, how long before the
	// request's arrival the first page it lacked was evicted (-1: not
	// lately).
	arrivalEvictedAgo time.Duration
	generated         int
	firstAt           time.Time     // when the first token is due
	admitted          chan struct{} // closed on admission
	aborted           chan struct{} // closed by an Abort RPC
}

// output is one message of a generation stream: incremental tokens with
// running totals, or the completion when final is set.
type output struct {
	tokens                                     []uint32
	promptTokens, completionTokens, cachedToks uint32
	// logprobs are tokens' (or, on the completion, the whole output's)
	// log-probabilities, promptLogprobs the prompt's, when asked for.
	logprobs, promptLogprobs []tokenLogprob
	final                    *completion
}

type completion struct {
	outputIDs    []uint32
	finishReason string  // "stop", "length" or "abort"
	matched      *uint32 // the stop token, when finishReason is "stop"
	// kvTransferJSON is a vLLM prefill leg's kv_transfer_params_json.
	kvTransferJSON string
}

// endKind says why a request left the engine.
type endKind int

const (
	endFinished endKind = iota
	endAborted
	endCancelled
	endFailed
	endClosed
)

func (k endKind) String() string {
	return [...]string{"finished", "aborted", "cancelled", "failed", "closed"}[k]
}

var (
	errAborted = errors.New("sim: request aborted")
	errClosed  = status.Error(codes.Unavailable, "sim: engine shut down")
)

// invalid counts a rejected request and returns INVALID_ARGUMENT.
func (e *Engine) invalid(format string, args ...any) error {
	e.mu.Lock()
	e.counters.rejected++
	e.mu.Unlock()
	return status.Errorf(codes.InvalidArgument, "sim: "+format, args...)
}

// checkPrompt applies the validation both engines perform on token input.
func (e *Engine) checkPrompt(prompt []uint32, maxNew int) error {
	if len(prompt) == 0 {
		return e.invalid("input_ids must not be empty")
	}
	for i, t := range prompt {
		if int64(t) >= int64(e.cfg.VocabSize) {
			return e.invalid("input_ids[%d] = %d is out of vocabulary (size %d)", i, t, e.cfg.VocabSize)
		}
	}
	if len(prompt)+maxNew > e.cfg.MaxContextLength {
		return e.invalid("prompt (%d tokens) + max new tokens (%d) exceeds the context length %d",
			len(prompt), maxNew, e.cfg.MaxContextLength)
	}
	if pages := len(prompt) / e.cfg.PageSize; pages > e.cache.capacity {
		return e.invalid("prompt needs %d KV pages; the cache holds %d", pages, e.cache.capacity)
	}
	return nil
}

// generate runs r and sends its outputs; it returns the stream's final status.
func (e *Engine) generate(ctx context.Context, r *request, send func(output) error) error {
	if e.Faults().Unavailable {
		e.mu.Lock()
		e.counters.rejected++
		e.mu.Unlock()
		return status.Error(codes.Unavailable, "sim: injected fault: engine unavailable")
	}
	if e.Faults().UnimplementedGenerate {
		return status.Error(codes.Unimplemented, "sim: injected fault: this engine serves no generation")
	}
	ctx, send = e.misreport(ctx, r, send)
	if e.Faults().AbortOvertakesRequest {
		select {
		case <-e.overtakenBy(r.id):
			e.mu.Lock()
			delete(e.overtaken, r.id)
			e.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if r.pd != nil && !r.pd.prefill {
		if err := e.receiveKV(ctx, r, send); err != nil {
			return err
		}
	} else if err := e.enqueue(r); err != nil {
		return err
	}
	select {
	case <-r.admitted:
	case <-r.aborted:
		return e.interrupted(ctx, r, nil, send, errAborted)
	case <-ctx.Done():
		return e.interrupted(ctx, r, nil, send, ctx.Err())
	case <-e.closed:
		return e.interrupted(ctx, r, nil, send, errClosed)
	}
	e.mu.Lock()
	next, cached := r.firstAt, uint32(r.reportedCachedLocked())
	e.mu.Unlock()

	out := make([]uint32, 0, min(r.maxNew, 256))
	if err := e.sleepUntil(ctx, r, next); err != nil { // prefill
		return e.interrupted(ctx, r, out, send, err)
	}
	if e.Faults().StallBeforeFirstToken {
		return e.interrupted(ctx, r, out, send, e.hold(ctx, r))
	}
	if r.pd != nil && r.pd.prefill {
		return e.finishPrefill(ctx, r, cached, send)
	}
	var matched *uint32
	finish := "length"
	sentPrompt := false // the prompt's log-probabilities went out on a chunk
	for limit := e.outputLimit(r); len(out) < limit; {
		if len(out) > 0 {
			if err := e.sleepUntil(ctx, r, next); err != nil { // decode step
				return e.interrupted(ctx, r, out, send, err)
			}
		}
		tok, stop := r.sample.next(len(out))
		out = append(out, tok)
		step := e.progress(r)
		next = next.Add(step)
		if r.stream {
			sent := tok
			if e.Faults().GarbageStream {
				sent = uint32(e.cfg.VocabSize + len(out) - 1)
			}
			o := output{tokens: []uint32{sent}, promptTokens: uint32(len(r.prompt)),
				completionTokens: uint32(len(out)), cachedToks: cached,
				logprobs: r.lp.outputLogprobs(len(r.prompt), out, len(out)-1, e.cfg.VocabSize)}
			if !sentPrompt {
				o.promptLogprobs, sentPrompt = e.promptLogprobs(r), true
			}
			err := send(o)
			if err != nil {
				e.end(r, endCancelled, nil)
				return err
			}
		}
		if err := e.injectFaults(ctx, r, out); err != nil {
			return e.interrupted(ctx, r, out, send, err)
		}
		if stop && !e.Faults().IgnoreMaxTokens {
			finish, matched = "stop", &tok
			break
		}
	}
	if !e.end(r, endFinished, out) {
		return e.interrupted(ctx, r, out, send, errAborted)
	}
	if !r.stream && e.Faults().GarbageStream {
		out = garbage(e.cfg.VocabSize, len(out))
	}
	fin := output{promptTokens: uint32(len(r.prompt)), completionTokens: uint32(len(out)), cachedToks: cached,
		final: &completion{outputIDs: out, finishReason: finish, matched: matched}}
	if !r.stream {
		fin.logprobs = r.lp.outputLogprobs(len(r.prompt), out, 0, e.cfg.VocabSize)
	}
	if !sentPrompt {
		fin.promptLogprobs = e.promptLogprobs(r)
	}
	return send(fin)
}

// promptLogprobs are r's prompt log-probabilities when asked for, from an
// engine that computed the prompt: a decode leg received its KV cache and
// reports none.
func (e *Engine) promptLogprobs(r *request) []tokenLogprob {
	if r.pd != nil && !r.pd.prefill {
		return nil
	}
	return r.lp.promptLogprobs(r.prompt, e.cfg.VocabSize)
}

// garbage returns n out-of-vocabulary ids, vocab+i at position i
// (Faults.GarbageStream).
func garbage(vocab, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(vocab + i)
	}
	return ids
}

// hold keeps a stalled request (and its KV pages) until it is aborted, the
// client goes away or the engine shuts down, and returns which.
func (e *Engine) hold(ctx context.Context, r *request) error {
	select {
	case <-r.aborted:
		return errAborted
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closed:
		return errClosed
	}
}

// injectFaults applies DropAfterTokens and StallAfterTokens once n tokens
// have been produced.
func (e *Engine) injectFaults(ctx context.Context, r *request, out []uint32) error {
	f := e.Faults()
	if f.DropAfterTokens > 0 && len(out) >= f.DropAfterTokens {
		e.end(r, endFailed, nil)
		return status.Errorf(codes.Unavailable, "sim: injected fault: stream dropped after %d tokens", len(out))
	}
	if f.StallAfterTokens > 0 && len(out) >= f.StallAfterTokens {
		return e.hold(ctx, r)
	}
	return nil
}

// interrupted ends r for cause and produces what the client sees: a
// completion with finish_reason "abort" after an Abort RPC (CANCELLED if the
// client is gone too), the context's status after a cancel, UNAVAILABLE after
// shutdown, or cause itself if it already is a status.
func (e *Engine) interrupted(ctx context.Context, r *request, out []uint32, send func(output) error, cause error) error {
	switch {
	case errors.Is(cause, errAborted):
		if ctx.Err() != nil {
			return status.Error(codes.Canceled, "sim: request aborted")
		}
		e.mu.Lock()
		cached := uint32(r.reportedCachedLocked())
		e.mu.Unlock()
		return send(output{promptTokens: uint32(len(r.prompt)), completionTokens: uint32(len(out)), cachedToks: cached,
			final: &completion{outputIDs: out, finishReason: "abort"}})
	case errors.Is(cause, context.Canceled), errors.Is(cause, context.DeadlineExceeded):
		e.end(r, endCancelled, nil)
		return status.FromContextError(cause).Err()
	case errors.Is(cause, errClosed):
		e.end(r, endClosed, nil)
		return errClosed
	default:
		e.end(r, endFailed, nil)
		return cause
	}
}

// sleepUntil waits until t (scaled delays are already in t), or returns early
// with errAborted, the context's error, or errClosed. With TimeScale 0 it
// never sleeps but still notices those.
func (e *Engine) sleepUntil(ctx context.Context, r *request, t time.Time) error {
	var timer <-chan time.Time
	if e.cfg.TimeScale > 0 {
		d := time.Until(t)
		if d > 0 {
			tm := time.NewTimer(d)
			defer tm.Stop()
			timer = tm.C
		}
	}
	if timer == nil {
		select {
		case <-r.aborted:
			return errAborted
		case <-ctx.Done():
			return ctx.Err()
		case <-e.closed:
			return errClosed
		default:
			return nil
		}
	}
	select {
	case <-r.aborted:
		return errAborted
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closed:
		return errClosed
	case <-timer:
		return nil
	}
}

// scale turns a model duration into a wall-clock one.
func (e *Engine) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * e.cfg.TimeScale)
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// reportedCachedLocked is the cached_tokens r reports: its own cache hit, or
// for a decode leg the prefill engine's.
func (r *request) reportedCachedLocked() int {
	if r.pd != nil && r.pd.remote != nil {
		return r.pd.remote.CachedTokens
	}
	return r.cached
}

// reused is what r reuses of cached, the tokens of its prompt found
// cached: all but the page of its last token (see pageCache.reused), and
// when it asks for the prompt's log-probabilities only what comes before
// the first position it wants them for, whole pages: SGLang stops its
// match at logprob_start_len, and vLLM, which reports them for the whole
// prompt, does not read its prefix cache for such a request.
func (e *Engine) reused(r *request, cached int) int {
	cached = e.cache.reused(r.prompt, cached)
	if r.lp.prompt {
		ps := e.cfg.PageSize
		cached = min(cached, r.lp.promptStart/ps*ps)
	}
	return cached
}

// enqueue registers r and admits what can run.
func (e *Engine) enqueue(r *request) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.registerLocked(r); err != nil {
		return err
	}
	e.queueLocked(r)
	return nil
}

// registerLocked makes r known to the engine (for Abort and load reports)
// without queueing it.
func (e *Engine) registerLocked(r *request) error {
	select {
	case <-e.closed:
		return errClosed
	default:
	}
	if r.id == "" {
		e.nextAnonID++
		r.id = fmt.Sprintf("sim-%d", e.nextAnonID)
	}
	if _, dup := e.reqs[r.id]; dup {
		e.counters.rejected++
		return status.Errorf(codes.AlreadyExists, "sim: request %q is already running", r.id)
	}
	r.state = stateWaiting
	r.admitted = make(chan struct{})
	r.aborted = make(chan struct{})
	e.reqs[r.id] = r
	e.counters.requests++
	return nil
}

// queueLocked puts a registered r at the back of the queue and admits what
// can run.
func (e *Engine) queueLocked(r *request) {
	r.state = stateWaiting
	r.arrivalCached = e.reused(r, e.cache.match(r.prompt))
	if e.debugTruth() {
		r.arrivalEvictedAgo = e.evictedAgoLocked(r.prompt)
	}
	if e.running >= e.cfg.MaxRunning {
		e.counters.queuedFull++
	}
	e.queue = append(e.queue, r)
	e.admitLocked()
	e.publishLocked()
}

// admitLocked starts queued requests in FIFO order while they fit.
func (e *Engine) admitLocked() {
	for len(e.queue) > 0 && e.running < e.cfg.MaxRunning {
		r := e.queue[0]
		l, cached, ok := e.cache.acquire(r.prompt)
		if !ok {
			return
		}
		e.queue = e.queue[1:]
		cached = e.reused(r, cached)
		r.lease, r.cached = l, cached
		r.state = stateRunning
		e.running++
		e.counters.promptTokens += uint64(len(r.prompt))
		e.counters.cachedPromptTokens += uint64(cached)
		switch {
		case cached < r.arrivalCached:
			e.counters.queueShrunk++
			e.log.Debug("prefix evicted while queued", "request_id", r.id, "cached_at_arrival", r.arrivalCached, "cached_tokens", cached)
		case cached > r.arrivalCached:
			e.counters.queueGrown++
		}

		if r.pd != nil && r.pd.remote != nil {
			// A decode leg's KV came from the prefill engine: no prefill.
			r.firstAt = time.Now().Add(e.scale(e.cfg.RequestOverhead))
		} else {
			prefill := e.scale(time.Duration(float64(len(r.prompt)-cached) / e.cfg.PrefillTokensPerSec * float64(time.Second)))
			start := time.Now()
			if e.prefillFreeAt.After(start) {
				start = e.prefillFreeAt
			}
			e.prefillFreeAt = start.Add(prefill)
			r.firstAt = e.prefillFreeAt.Add(e.scale(e.cfg.RequestOverhead))
			if k := e.cfg.StepsBeforeFirstToken; k > 0 {
				r.firstAt = r.firstAt.Add(e.scale(msDuration(k * e.stepMsLocked())))
			}
		}
		close(r.admitted)
		e.log.Debug("admitted", "request_id", r.id, "prompt_tokens", len(r.prompt), "cached_tokens", cached, "cached_at_arrival", r.arrivalCached,
			"lacked_page_evicted_ms_before_arrival", float64(r.arrivalEvictedAgo)/float64(time.Millisecond), "running", e.running)
	}
}

// progress records one generated token and returns the next decode step.
func (e *Engine) progress(r *request) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	r.generated++
	e.counters.generatedTokens++
	return e.scale(msDuration(e.stepMsLocked()))
}

// stepMsLocked is a decode step's length in milliseconds at the running
// batch, unscaled.
func (e *Engine) stepMsLocked() float64 {
	return e.cfg.DecodeMsPerToken + e.cfg.DecodeMsPerRunning*float64(e.running)
}

// end removes r from the engine and frees its pages. It reports false if r
// had already ended (an Abort got there first).
func (e *Engine) end(r *request, kind endKind, out []uint32) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.endLocked(r, kind, out)
}

func (e *Engine) endLocked(r *request, kind endKind, out []uint32) bool {
	switch r.state {
	case stateDone:
		return false
	case stateWaiting:
		if i := slices.Index(e.queue, r); i >= 0 {
			e.queue = slices.Delete(e.queue, i, i+1)
		}
	case stateRunning:
		e.cache.release(r.lease)
		r.lease = nil
		e.running--
	case stateTransfer: // holds nothing yet
	}
	r.state = stateDone
	delete(e.reqs, r.id)
	switch kind {
	case endFinished:
		e.counters.completed++
		if len(out) > 1 {
			e.cache.insert(append(slices.Clip(r.prompt), out[:len(out)-1]...))
		}
	case endAborted:
		e.counters.aborted++
	case endCancelled:
		e.counters.cancelled++
	case endFailed:
		e.counters.failed++
	}
	e.log.Debug("ended", "request_id", r.id, "kind", kind, "output_tokens", len(out))
	e.admitLocked()
	e.publishLocked()
	return true
}

// abort ends the requests with the given ids that are waiting or running,
// and reports how many it ended. Their Generate streams then complete with
// finish_reason "abort". One call is one Abort RPC in Stats.AbortCalls.
func (e *Engine) abort(ids ...string) int {
	if e.Faults().IgnoreAbort {
		e.mu.Lock()
		e.counters.abortCalls++
		e.mu.Unlock()
		return 0
	}
	n := 0
	for _, r := range e.ranks {
		n += r.abort(ids...)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counters.abortCalls++
	for _, id := range ids {
		r, ok := e.reqs[id]
		if !ok {
			e.overtakeLocked(id)
			continue
		}
		e.endLocked(r, endAborted, nil)
		close(r.aborted)
		n++
	}
	return n
}

// overtakenBy returns a channel closed once an Abort has named id while the
// engine did not know it (Faults.AbortOvertakesRequest).
func (e *Engine) overtakenBy(id string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.overtakenLocked(id)
}

// overtakenLocked is id's channel of overtaken, made on first use.
func (e *Engine) overtakenLocked(id string) chan struct{} {
	ch, ok := e.overtaken[id]
	if !ok {
		ch = make(chan struct{})
		e.overtaken[id] = ch
	}
	return ch
}

// overtakeLocked records an Abort of id, which the engine does not know.
func (e *Engine) overtakeLocked(id string) {
	if !e.Faults().AbortOvertakesRequest {
		return
	}
	ch := e.overtakenLocked(id)
	select {
	case <-ch:
	default:
		close(ch)
	}
}
