package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/tokenize/detok"
	"github.com/kvgate/kvgate/workers"
)

// relay copies one attempt's stream to the client, detokenizing it when the
// router has a tokenizer. It also watches the engine: a first token that does
// not come within the first-token timeout, or a gap between tokens longer
// than the idle timeout, ends the attempt as the worker's failure. (Tokens the
// model cannot have produced are refused by workers.CheckedStream, which the
// placers wrap every stream in.)
type relay struct {
	s      *Pipeline
	j      *Job
	p      *Plan
	ds     *detok.Detokenizer // nil: no tokenizer, ids only
	output []uint32
	// ans shapes the text into content, reasoning and tool calls.
	ans *answer.AttemptShaper
	// lp converts log-probabilities; logprobs are the output's so far, in
	// step with output, and prompt the prompt's once the engine sent them
	// (promptSent: on a chunk already).
	lp         answer.Logprobs
	logprobs   []*kvgatev1.TokenLogprob
	prompt     []*kvgatev1.TokenLogprob
	promptSent bool
	last       workers.Chunk // the engine's latest running totals
	stopped    bool          // a stop string matched here, not in the engine
	// contract is what the request allows the engine to generate; ended
	// is its finish ("length", "stop" with endToken) once the output
	// reached it, overrun that the engine sent tokens past it (dropped
	// here), and early that the relay ended before the engine's
	// completion, so the engine may still be generating.
	contract contract
	ended    string
	endToken *uint32
	overrun  bool
	early    bool
	firstAt  time.Time // when the first token arrived
	lastAt   time.Time // when the latest tokens arrived

	timer *time.Timer // cancels the attempt when the engine goes quiet
	first atomic.Bool // a token has arrived (read by the timer)
}

func (s *Pipeline) newRelay(j *Job, cancel context.CancelCauseFunc, p *Plan) *relay {
	r := &relay{s: s, j: j, p: p, ans: j.Answer.Start(), lp: answer.Logprobs{Token: answer.TokenText(j.Route.Text)}, contract: newContract(j.Sampling)}
	if text := j.Route.Text; text != nil {
		sp := j.Sampling
		r.ds = text.NewStream(detok.Options{
			SkipSpecialTokens: sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens,
			StopStrings:       sp.GetStop(),
			NoStopTrim:        sp.GetNoStopTrim(),
			PromptIDs:         j.InputIDs,
			KeepSpecial:       j.Answer.KeepSpecial(),
		})
	}
	if d := s.cfg.FirstTokenTimeout; d > 0 {
		r.timer = time.AfterFunc(d, func() {
			if !r.first.Load() || s.cfg.StreamIdleTimeout <= 0 {
				cancel(errFirstTokenTimeout)
			} else {
				cancel(errStreamIdle)
			}
		})
	} else if d := s.cfg.StreamIdleTimeout; d > 0 {
		r.timer = time.AfterFunc(d, func() { cancel(errStreamIdle) })
	}
	return r
}

func (r *relay) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// heard stops the engine's silence timer when it has sent tokens. The
// time the relay then spends handing them to the client is not the
// engine's: a client slow to read, whose send blocks, must not make a
// healthy engine's stream look idle, fail it as the worker's fault and
// count it against its breaker (it did, before the client's own bound,
// --stream-send-timeout, existed). listen starts the timer again once the
// relay waits on the engine.
func (r *relay) heard() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// listen re-arms the engine's silence timer as the relay goes back to
// waiting on the engine after tokens: with the idle timeout, or not at all
// when only the first token was timed.
func (r *relay) listen() {
	if r.timer == nil || !r.first.Load() {
		return
	}
	if d := r.s.cfg.StreamIdleTimeout; d > 0 {
		r.timer.Reset(d)
	}
}

// run forwards chunks until the worker's completion, or until a stop string
// matches, and returns the completion (worker not yet filled in). Any error
// means the request did not complete: a stream that ends without a
// completion is an error, never a half-empty success.
func (r *relay) run(es workers.Stream) (*kvgatev1.GenerateComplete, error) {
	for {
		c, err := es.Recv()
		if errors.Is(err, io.EOF) {
			return nil, fault.Newf(fault.Unavailable, "worker ended the stream without a completion")
		}
		if err != nil {
			return nil, err
		}
		r.last = c
		r.gotPrompt(c.PromptLogprobs)
		if c.Final != nil {
			return r.complete(c.Final)
		}
		if len(c.TokenIDs) > 0 {
			r.heard()
		}
		if err := r.send(c.TokenIDs, c.Logprobs); err != nil {
			return nil, err
		}
		if len(c.TokenIDs) > 0 {
			r.listen()
		}
		if r.stopped {
			if err := r.flushText(); err != nil {
				return nil, err
			}
			r.early = true
			return r.completion("", nil, c.PromptTokens, c.CachedTokens), nil
		}
		if r.ended != "" {
			return r.afterEnd(es, c)
		}
	}
}

// afterEnd finishes a stream whose output reached the request's end
// (max_new_tokens or a stop id) at chunk c. An engine that keeps the
// contract sends its completion next, which is used as usual; one that
// sends more tokens (dropped) ignored it, and the answer is complete
// without it: the pipeline aborts the engine's generation. A stream that
// fails here has delivered every token the request allows, so the client
// gets its completion all the same.
func (r *relay) afterEnd(es workers.Stream, c workers.Chunk) (*kvgatev1.GenerateComplete, error) {
	if !r.overrun {
		next, err := es.Recv()
		if err == nil && next.Final != nil {
			r.last = next
			return r.complete(next.Final)
		}
		r.overrun = err == nil
	}
	r.early = true
	if err := r.flushText(); err != nil {
		return nil, err
	}
	return r.completion(r.ended, r.endToken, c.PromptTokens, c.CachedTokens), nil
}

// gotPrompt keeps the prompt's log-probabilities the first time the engine
// sends them.
func (r *relay) gotPrompt(lps []workers.Logprob) {
	if len(lps) > 0 && r.prompt == nil {
		r.prompt = r.lp.Convert(lps)
	}
}

// send relays new tokens and their log-probabilities (lps, one per id, or
// none).
func (r *relay) send(ids []uint32, engineLps []workers.Logprob) error {
	if len(ids) == 0 || r.stopped {
		return nil
	}
	if r.ended != "" {
		r.overrun = true
		return nil
	}
	keep, finish, matched := r.contract.end(len(r.output), ids)
	if keep < len(ids) {
		r.overrun = true
		ids = ids[:keep]
		if len(engineLps) > keep {
			engineLps = engineLps[:keep]
		}
	}
	if finish != "" {
		r.ended, r.endToken = finish, matched
	}
	if len(ids) == 0 {
		return nil
	}
	now := time.Now()
	if len(r.output) == 0 {
		r.first.Store(true)
		r.firstAt = now
		r.s.metrics.ttft.Observe(r.firstAt.Sub(r.j.Start).Seconds())
		if r.j.Span != nil {
			r.j.Span.AddEvent("first_token")
		}
		r.p.Run.FirstToken(r.firstAt)
	} else {
		// Engines may send several tokens in one chunk: each counts the
		// gap divided among them, as a client reading tokens would see.
		gap := now.Sub(r.lastAt).Seconds() / float64(len(ids))
		for range ids {
			r.s.metrics.itl.Observe(gap)
		}
	}
	r.lastAt = now
	index := len(r.output)
	r.output = append(r.output, ids...)
	var lps []*kvgatev1.TokenLogprob
	if len(engineLps) == len(ids) {
		lps = r.lp.Convert(engineLps)
		r.logprobs = append(r.logprobs, lps...)
	}
	var out answer.Shaped
	if r.ds != nil {
		d, stopped, err := r.ds.Push(ids)
		if err != nil {
			return errRouterBug{fmt.Errorf("detokenizing the worker's output: %w", err)}
		}
		r.stopped = stopped
		out = r.ans.Push(d)
	}
	if !r.j.Stream {
		return nil
	}
	c := r.chunk(out)
	c.TokenIds, c.Index, c.Logprobs = ids, uint32(index), lps
	return r.j.Send(c, nil)
}

// chunk is a stream message carrying what the answer released, and the
// prompt's log-probabilities if no chunk carried them yet.
func (r *relay) chunk(out answer.Shaped) *kvgatev1.GenerateChunk {
	c := &kvgatev1.GenerateChunk{
		Index:             uint32(len(r.output)),
		Text:              out.Content,
		ReasoningContent:  out.Reasoning,
		ToolCalls:         out.Calls,
		MalformedToolCall: out.Malformed,
	}
	if r.prompt != nil && !r.promptSent {
		c.PromptLogprobs, r.promptSent = r.prompt, true
	}
	return c
}

// flushText releases what the detokenizer (unless a stop string ended the
// text) and the answer's parsers still hold, as a last chunk when
// streaming.
func (r *relay) flushText() error {
	if r.ds == nil {
		return nil
	}
	tail := ""
	if !r.stopped {
		tail = r.ds.Finish()
	}
	out := r.ans.Finish(tail)
	if !r.j.Stream || out.Empty() {
		return nil
	}
	return r.j.Send(r.chunk(out), nil)
}

// complete turns the worker's completion into ours. Engines list every output
// token in the completion; tokens there that never arrived as chunks are sent
// as a last chunk, so a streaming client always receives the whole output.
func (r *relay) complete(f *workers.Completion) (*kvgatev1.GenerateComplete, error) {
	r.gotPrompt(f.PromptLogprobs)
	if n := len(r.output); len(f.OutputIDs) > n {
		var lps []workers.Logprob
		if len(f.Logprobs) == len(f.OutputIDs) && len(r.logprobs) == n {
			lps = f.Logprobs[n:]
		}
		if err := r.send(f.OutputIDs[n:], lps); err != nil {
			return nil, err
		}
	}
	if len(r.logprobs) < len(r.output) && len(f.Logprobs) == len(f.OutputIDs) && len(f.OutputIDs) == len(r.output) {
		// The engine streamed the tokens without their log-probabilities
		// and listed them all at the end.
		r.logprobs = r.lp.Convert(f.Logprobs)
	}
	if err := r.flushText(); err != nil {
		return nil, err
	}
	if r.stopped {
		return r.completion("", nil, f.PromptTokens, f.CachedTokens), nil
	}
	if r.overrun {
		// The engine generated past the request's end; the answer ends
		// where the request said.
		return r.completion(r.ended, r.endToken, f.PromptTokens, f.CachedTokens), nil
	}
	// Usage counts the tokens relayed (r.output), never the engine's
	// completion_tokens: engines report 0 in a last message without
	// output_ids, or count tokens they never sent. Every token an engine
	// generates reaches the router, in a chunk or in the completion's
	// output_ids (CheckedStream holds the two to agree), so a larger
	// figure of the engine's is one nothing backs, and is not billed.
	return r.completion(f.FinishReason, f.MatchedStopTokenID, f.PromptTokens, f.CachedTokens), nil
}

// completion assembles the final message; finish "" means a stop string
// matched in the router.
func (r *relay) completion(finish string, stopToken *uint32, prompt, cached uint32) *kvgatev1.GenerateComplete {
	c := &kvgatev1.GenerateComplete{
		OutputIds:          r.output,
		FinishReason:       finishReason(finish),
		MatchedStopTokenId: stopToken,
		PromptLogprobs:     r.prompt,
		Usage: &kvgatev1.Usage{
			PromptTokens:     prompt,
			CompletionTokens: uint32(len(r.output)),
			CachedTokens:     cached,
		},
	}
	if len(r.logprobs) == len(r.output) {
		c.Logprobs = r.logprobs
	}
	if r.stopped {
		c.FinishReason = kvgatev1.FinishReason_FINISH_REASON_STOP
		if str, _ := r.ds.Matched(); str != "" {
			c.MatchedStopString = &str
		}
	}
	r.ans.Fill(c)
	return c
}

func finishReason(s string) kvgatev1.FinishReason {
	switch s {
	case "stop":
		return kvgatev1.FinishReason_FINISH_REASON_STOP
	case "length":
		return kvgatev1.FinishReason_FINISH_REASON_LENGTH
	case "abort":
		return kvgatev1.FinishReason_FINISH_REASON_ABORT
	}
	return kvgatev1.FinishReason_FINISH_REASON_UNSPECIFIED
}

// finishName is a finish reason as engines and clients spell it ("stop",
// "length", "abort", "unspecified"): the enum's name without its prefix.
func finishName(f kvgatev1.FinishReason) string {
	return strings.ToLower(strings.TrimPrefix(f.String(), "FINISH_REASON_"))
}
