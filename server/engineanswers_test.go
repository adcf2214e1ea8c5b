package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// What the router believes of an engine's answers: what it saw, over what it
// is told. Each engine here misreports in one way a real engine does.

// call is one request as the tests below send it: Generate with token ids,
// or Chat, streaming or not.
type call struct {
	name   string
	chat   bool
	stream bool
}

var answerCalls = []call{
	{"generate/stream", false, true},
	{"generate/unary", false, false},
	{"chat/stream", true, true},
	{"chat/unary", true, false},
}

// run sends c with sampling sp and returns what the client received.
func (c call) run(ctx context.Context, t *testing.T, f *fleet, sp *kvgatev1.SamplingParams) (result, error) {
	t.Helper()
	if c.chat {
		return f.chat(ctx, t, &kvgatev1.ChatRequest{Stream: c.stream, SamplingParams: sp,
			Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "Tell me about KV caches."}}})
	}
	return f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 24), Stream: c.stream, SamplingParams: sp})
}

// streamedIDs are the token ids of a result's chunks.
func (r result) streamedIDs() []uint32 {
	var ids []uint32
	for _, c := range r.chunks {
		ids = append(ids, c.TokenIds...)
	}
	return ids
}

// TestUsageCountsWhatWasRelayed: an engine whose completion reports
// completion_tokens 0 (and, streaming, no output_ids) still bills the
// tokens the client received.
func TestUsageCountsWhatWasRelayed(t *testing.T) {
	for _, proto := range protocols {
		f := startFleet(t, fleetOptions{protocol: proto, workers: 1, text: true,
			sim: func(_ int, c *sim.Config) { c.Faults.UsageZero = true }})
		for _, c := range answerCalls {
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				r, err := c.run(testutil.Context(t, 10*time.Second), t, f, &kvgatev1.SamplingParams{MaxNewTokens: u32(12), IgnoreEos: true})
				if err != nil {
					t.Fatal(err)
				}
				got := r.complete.GetUsage().GetCompletionTokens()
				if got != 12 || len(r.complete.OutputIds) != 12 {
					t.Fatalf("usage.completion_tokens = %d with %d output ids; want 12, what was relayed", got, len(r.complete.OutputIds))
				}
				if c.stream && len(r.streamedIDs()) != 12 {
					t.Fatalf("streamed %d ids, want 12", len(r.streamedIDs()))
				}
			})
		}
	}
}

// TestTokenizerVocabularyGuardsEnginesThatReportNone: an engine whose
// GetModelInfo has no vocab_size is held to the tokenizer's. A prompt id
// beyond it is the client's mistake, refused before any engine sees it;
// ListWorkers shows the size in force.
func TestTokenizerVocabularyGuardsEnginesThatReportNone(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1, text: true,
				sim: func(_ int, c *sim.Config) { c.Faults.ModelInfoMinimal = true }})
			vocab := f.text.Tokenizer().VocabSize()
			ids := prompt(1, 8)
			ids[5] = uint32(vocab)
			_, err := f.generate(testutil.Context(t, 10*time.Second), t, &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4)}})
			want := fmt.Sprintf("input_ids[5] is %d; token ids must be below", vocab)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) ||
				!strings.Contains(status.Convert(err).Message(), fmt.Sprint(vocab)) {
				t.Fatalf("err = %v; want INVALID_ARGUMENT naming input_ids[5] and the limit %d", err, vocab)
			}
			if n := f.sims[0].Engine().Stats().Rejected; n != 0 {
				t.Fatalf("the engine rejected %d requests; the router must refuse them first", n)
			}
			ws, err := f.admin.ListWorkers(testutil.Context(t, 10*time.Second), &kvgatev1.ListWorkersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got := ws.Workers[0].GetVocabSize(); got != uint32(vocab) {
				t.Fatalf("ListWorkers vocab_size = %d, want the tokenizer's %d", got, vocab)
			}
		})
	}
}

// TestOutOfVocabularyOutputIsTheWorkersFault: an id outside the vocabulary
// is a broken engine, never INTERNAL. Before the first token another worker
// takes over and the breaker counts the failure; after it, the stream ends
// UNAVAILABLE.
func TestOutOfVocabularyOutputIsTheWorkersFault(t *testing.T) {
	for _, proto := range protocols {
		for _, c := range answerCalls {
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				// Worker 0 is broken; round robin gives it the first request.
				f := startFleet(t, fleetOptions{protocol: proto, workers: 2, text: true,
					sim: func(i int, c *sim.Config) {
						c.Faults.ModelInfoMinimal = true
						c.Faults.EmitOOV = i == 0
					},
					// One failure opens a breaker: the one this request
					// causes must count.
					config: func(c *router.Config) { c.Breaker.FailureThreshold = 1 }})
				r, err := c.run(testutil.Context(t, 10*time.Second), t, f, &kvgatev1.SamplingParams{MaxNewTokens: u32(6), IgnoreEos: true})
				if err != nil || r.complete == nil {
					t.Fatalf("err = %v; want the request served by the healthy worker", err)
				}
				if got, want := r.complete.Worker, f.workerURL(1); got != want {
					t.Fatalf("served by %s, want %s", got, want)
				}
				w, _ := f.reg.Get(f.workerURL(0))
				if st := w.Breaker().State(); st != workers.BreakerOpen {
					t.Fatalf("the broken worker's breaker is %s; its failure must count (threshold 1: open)", st)
				}
			})
		}
	}
	for _, proto := range protocols {
		t.Run(proto+"/after the first token", func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1, text: true,
				sim: func(_ int, c *sim.Config) {
					c.Faults.ModelInfoMinimal = true
					c.Faults.EmitOOV, c.Faults.EmitOOVAfter = true, 3
				}})
			r, err := answerCalls[0].run(testutil.Context(t, 10*time.Second), t, f, &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true})
			if status.Code(err) != codes.Unavailable || len(r.streamedIDs()) != 3 {
				t.Fatalf("err = %v after %d tokens; want UNAVAILABLE after 3", err, len(r.streamedIDs()))
			}
		})
	}
}

// TestRouterEnforcesMaxNewTokens: an engine that generates past
// max_new_tokens is cut there: the client gets exactly the limit, finish
// "length", usage that says so, and the engine is told to stop.
func TestRouterEnforcesMaxNewTokens(t *testing.T) {
	for _, proto := range protocols {
		f := startFleet(t, fleetOptions{protocol: proto, workers: 1, text: true,
			sim: func(_ int, c *sim.Config) { c.Faults.IgnoreMaxTokens = true }})
		for _, c := range answerCalls {
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				r, err := c.run(testutil.Context(t, 10*time.Second), t, f, &kvgatev1.SamplingParams{MaxNewTokens: u32(5), IgnoreEos: true})
				if err != nil {
					t.Fatal(err)
				}
				done := r.complete
				if len(done.OutputIds) != 5 || done.Usage.CompletionTokens != 5 || done.FinishReason != kvgatev1.FinishReason_FINISH_REASON_LENGTH {
					t.Fatalf("%d output ids, usage %d, finish %v; want 5, 5, length", len(done.OutputIds), done.Usage.CompletionTokens, done.FinishReason)
				}
				if c.stream && len(r.streamedIDs()) != 5 {
					t.Fatalf("streamed %d ids, want 5", len(r.streamedIDs()))
				}
			})
		}
	}
}

// TestRouterEnforcesStopTokenIDs: an engine that ignores stop_token_ids is
// cut at the first one, which ends the output as the engine would have.
func TestRouterEnforcesStopTokenIDs(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1, text: true})
			sp := &kvgatev1.SamplingParams{MaxNewTokens: u32(16), IgnoreEos: true, Seed: i32(3)}
			free := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 24), SamplingParams: sp}).complete.OutputIds
			// From now on the engine ignores stop_token_ids (and the
			// limit), as one that drops them.
			stop := free[4]
			f.sims[0].Engine().SetFaults(sim.Faults{IgnoreMaxTokens: true})
			sp.StopTokenIds = []uint32{stop}
			for _, stream := range []bool{true, false} {
				got := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 24), SamplingParams: sp, Stream: stream}).complete
				want := free[:slices.Index(free, stop)+1]
				if !slices.Equal(got.OutputIds, want) || got.FinishReason != kvgatev1.FinishReason_FINISH_REASON_STOP ||
					got.GetMatchedStopTokenId() != stop || got.Usage.CompletionTokens != uint32(len(want)) {
					t.Fatalf("stream %v: output %v, finish %v, matched %d, usage %d; want %v ending at the stop id %d",
						stream, got.OutputIds, got.FinishReason, got.GetMatchedStopTokenId(), got.Usage.CompletionTokens, want, stop)
				}
			}
		})
	}
}

// TestIgnoredAbortKeepsTheRequestCounted: a request the client cancels is
// aborted, but an engine that ignores Abort keeps generating it, and the
// worker counts it in flight until the engine's stream ends; one whose
// stream never ends is released after --abort-confirm-timeout.
func TestIgnoredAbortKeepsTheRequestCounted(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto+"/until the engine finishes", func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1, sim: func(_ int, c *sim.Config) {
				c.Faults.IgnoreAbort = true
				c.TimeScale, c.DecodeMsPerToken = 1, 20 // 100 tokens: 2 s
			}})
			eng := f.sims[0].Engine()
			w, _ := f.reg.Get(f.workerURL(0))
			cancelAfterFirstToken(t, f, 100)
			// The release is the signal: by then the engine must have
			// run the request to its end, long after the Abort.
			waitIdle(t, w)
			if st := eng.Stats(); st.Completed != 1 || st.Aborted != 0 || st.AbortCalls < 1 {
				t.Fatalf("released when the engine had %d completed, %d aborted, %d Abort calls; want the request aborted (the Abort sent again while it ran on) and run to its end first",
					st.Completed, st.Aborted, st.AbortCalls)
			}
		})
		t.Run(proto+"/a stream that never ends", func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1,
				sim:    func(_ int, c *sim.Config) { c.Faults.IgnoreAbort, c.Faults.StallAfterTokens = true, 1 },
				config: func(c *router.Config) { c.Reliability.AbortConfirmTimeout = 300 * time.Millisecond }})
			w, _ := f.reg.Get(f.workerURL(0))
			start := time.Now()
			cancelAfterFirstToken(t, f, 100)
			waitIdle(t, w)
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Fatalf("released after %v, before the bound", d)
			}
			if eng := f.sims[0].Engine(); eng.Stats().Running != 1 {
				t.Fatal("the stalled request ended on the engine; the bound was not what released it")
			}
		})
	}
}

// TestAbortThatOvertookItsRequestIsSentAgain: a client that leaves as its
// request is sent gets an Abort that can reach the engine before the
// request does; the engine finds nothing to abort and says so as it would
// for a finished request. The router sends the Abort again while the
// engine's stream runs on, so the request ends there and its place on the
// worker is given back long before --abort-confirm-timeout (1m here).
func TestAbortThatOvertookItsRequestIsSentAgain(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1, sim: func(_ int, c *sim.Config) {
				c.Faults.AbortOvertakesRequest, c.Faults.StallBeforeFirstToken = true, true
			}})
			w, _ := f.reg.Get(f.workerURL(0))
			ctx, cancel := context.WithCancel(context.Background())
			if _, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(1, 40), Stream: true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8)}}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the request on the worker", func() bool { return w.InFlight() == 1 })
			cancel()
			waitIdle(t, w)
			st := f.sims[0].Engine().Stats()
			if st.Aborted != 1 || st.AbortCalls < 2 {
				t.Fatalf("released with the engine at %d aborted, %d Abort calls; want the request aborted by a second Abort", st.Aborted, st.AbortCalls)
			}
		})
	}
}

// waitIdle waits for w to have nothing in flight.
func waitIdle(t *testing.T, w *workers.Worker) {
	t.Helper()
	testutil.Receive(t, w.Idle(), "worker "+w.URL()+" to have nothing in flight")
}

// cancelAfterFirstToken starts a streaming Generate of n tokens, reads its
// first chunk and cancels it.
func cancelAfterFirstToken(t *testing.T, f *fleet, n uint32) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(1, 40), Stream: true,
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(n), IgnoreEos: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
}

// TestMaxNewTokensAbortsOnlyAnEngineThatOverruns: the router aborts an
// engine that generates past max_new_tokens, and never one that stops there
// (its completion follows the last token).
func TestMaxNewTokensAbortsOnlyAnEngineThatOverruns(t *testing.T) {
	for _, proto := range protocols {
		for _, overrun := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/overrun=%v", proto, overrun), func(t *testing.T) {
				f := startFleet(t, fleetOptions{protocol: proto, workers: 1, sim: func(_ int, c *sim.Config) {
					c.Faults.IgnoreMaxTokens = overrun
					c.TimeScale, c.DecodeMsPerToken = 1, 20 // 5 tokens asked, 18 generated: 360 ms
				}})
				done := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 24), Stream: true,
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(5), IgnoreEos: true}}).complete
				if len(done.OutputIds) != 5 {
					t.Fatalf("%d output ids, want 5", len(done.OutputIds))
				}
				w, _ := f.reg.Get(f.workerURL(0))
				waitIdle(t, w) // the engine's stream has ended
				st := f.sims[0].Engine().Stats()
				if overrun && (st.AbortCalls != 1 || st.Aborted != 1) {
					t.Fatalf("%d Abort calls, %d aborted; want the overrunning request aborted", st.AbortCalls, st.Aborted)
				}
				if !overrun && (st.AbortCalls != 0 || st.Completed != 1) {
					t.Fatalf("%d Abort calls, %d completed; want no Abort for an engine that stopped at the limit", st.AbortCalls, st.Completed)
				}
			})
		}
	}
}
