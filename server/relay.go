package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/parse"
	"github.com/kvgate/kvgate/tokenize/detok"
	"github.com/kvgate/kvgate/workers"
)

// relay copies one attempt's stream to the client, detokenizing it when the
// router has a tokenizer. It also watches the engine: a first token that does
// not come within the first-token timeout, or a gap between tokens longer
// than the idle timeout, ends the attempt as the worker's failure. (Tokens the
// model cannot have produced are refused by workers.CheckedStream, which the
// dispatchers wrap every stream in.)
type relay struct {
	s      *Server
	j      *job
	p      placement
	ds     *detok.Stream // nil: no tokenizer, ids only
	output []uint32
	text   strings.Builder
	// rp splits Chat's text into reasoning (kept in reasoning) and
	// content (text); nil: the text is raw.
	rp        *parse.Reasoning
	reasoning strings.Builder
	last      workers.Chunk // the engine's latest running totals
	stopped   bool          // a stop string matched here, not in the engine
	firstAt   time.Time     // when the first token arrived
	lastAt    time.Time     // when the latest tokens arrived

	timer *time.Timer // cancels the attempt when the engine goes quiet
	first atomic.Bool // a token has arrived (read by the timer)
}

func (s *Server) newRelay(j *job, cancel context.CancelCauseFunc, p placement) *relay {
	r := &relay{s: s, j: j, p: p}
	if j.reasoning != nil {
		r.rp = j.reasoning()
	}
	if text := j.route.Text; text != nil {
		sp := j.sampling
		r.ds = text.NewStream(detok.Options{
			SkipSpecialTokens: sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens,
			StopStrings:       sp.GetStop(),
			NoStopTrim:        sp.GetNoStopTrim(),
			PromptIDs:         j.inputIDs,
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

// heard resets the engine's silence timer after it sent something.
func (r *relay) heard() {
	if r.timer == nil {
		return
	}
	if d := r.s.cfg.StreamIdleTimeout; d > 0 {
		r.timer.Reset(d)
	} else {
		r.timer.Stop() // only the first token was timed
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
			return nil, status.Error(codes.Unavailable, "worker ended the stream without a completion")
		}
		if err != nil {
			return nil, err
		}
		r.last = c
		if c.Final != nil {
			return r.complete(c.Final)
		}
		if len(c.TokenIDs) > 0 {
			r.heard()
		}
		if err := r.send(c.TokenIDs); err != nil {
			return nil, err
		}
		if r.stopped {
			if err := r.flushText(); err != nil {
				return nil, err
			}
			return r.completion("", nil, c.PromptTokens, c.CachedTokens), nil
		}
	}
}

func (r *relay) send(ids []uint32) error {
	if len(ids) == 0 || r.stopped {
		return nil
	}
	now := time.Now()
	if len(r.output) == 0 {
		r.first.Store(true)
		r.firstAt = now
		r.s.metrics.ttft.Observe(r.firstAt.Sub(r.j.start).Seconds())
		if r.j.span != nil {
			r.j.span.AddEvent("first_token")
		}
		if pp, ok := r.p.(*pair); ok {
			pp.firstToken(r.firstAt, r.j.start)
		}
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
	delta, reasoning := "", ""
	if r.ds != nil {
		d, stopped, err := r.ds.Push(ids)
		if err != nil {
			return errRouterBug{fmt.Errorf("detokenizing the worker's output: %w", err)}
		}
		r.stopped = stopped
		reasoning, delta = r.split(d)
	}
	if !r.j.stream {
		return nil
	}
	return r.j.send(&kvgatev1.GenerateChunk{TokenIds: ids, Index: uint32(index), Text: delta, ReasoningContent: reasoning}, nil)
}

// split passes a text delta through the reasoning parser, if any, and
// records what it releases.
func (r *relay) split(delta string) (reasoning, content string) {
	content = delta
	if r.rp != nil {
		reasoning, content = r.rp.Push(delta)
	}
	r.reasoning.WriteString(reasoning)
	r.text.WriteString(content)
	return reasoning, content
}

// flushText releases what the detokenizer (unless a stop string ended the
// text) and the reasoning parser still hold, as a last chunk when streaming.
func (r *relay) flushText() error {
	if r.ds == nil {
		return nil
	}
	tail := ""
	if !r.stopped {
		tail = r.ds.Finish()
	}
	reasoning, content := r.split(tail)
	if r.rp != nil {
		rr, cc := r.rp.Flush()
		r.reasoning.WriteString(rr)
		r.text.WriteString(cc)
		reasoning, content = reasoning+rr, content+cc
	}
	if !r.j.stream || (reasoning == "" && content == "") {
		return nil
	}
	return r.j.send(&kvgatev1.GenerateChunk{Index: uint32(len(r.output)), Text: content, ReasoningContent: reasoning}, nil)
}

// complete turns the worker's completion into ours. Engines list every output
// token in the completion; tokens there that never arrived as chunks are sent
// as a last chunk, so a streaming client always receives the whole output.
func (r *relay) complete(f *workers.Completion) (*kvgatev1.GenerateComplete, error) {
	if n := len(r.output); len(f.OutputIDs) > n {
		if err := r.send(f.OutputIDs[len(r.output):]); err != nil {
			return nil, err
		}
	}
	if err := r.flushText(); err != nil {
		return nil, err
	}
	if r.stopped {
		return r.completion("", nil, f.PromptTokens, f.CachedTokens), nil
	}
	c := r.completion(f.FinishReason, f.MatchedStopTokenID, f.PromptTokens, f.CachedTokens)
	c.Usage.CompletionTokens = f.CompletionTokens
	return c, nil
}

// completion assembles the final message; finish "" means a stop string
// matched in the router.
func (r *relay) completion(finish string, stopToken *uint32, prompt, cached uint32) *kvgatev1.GenerateComplete {
	c := &kvgatev1.GenerateComplete{
		OutputIds:          r.output,
		FinishReason:       finishReason(finish),
		MatchedStopTokenId: stopToken,
		Text:               r.text.String(),
		ReasoningContent:   r.reasoning.String(),
		Usage: &kvgatev1.Usage{
			PromptTokens:     prompt,
			CompletionTokens: uint32(len(r.output)),
			CachedTokens:     cached,
		},
	}
	if r.stopped {
		c.FinishReason = kvgatev1.FinishReason_FINISH_REASON_STOP
		if str, _ := r.ds.Matched(); str != "" {
			c.MatchedStopString = &str
		}
	}
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
