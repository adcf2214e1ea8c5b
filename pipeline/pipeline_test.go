package pipeline

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// The pipeline's rules for one request, checked against a table of one model
// whose placer is scripted: each placement gets the next worker of the
// script, whose engine stream plays the steps given. No router, gRPC server
// or engine is built; what is checked is what the pipeline returns (a fault
// saying what happened, which the front's edge turns into a status; an
// engine's refusal with its code; the context's error), what the client was
// sent, and how many attempts were placed.
func TestPipelineRules(t *testing.T) {
	fail := func(c codes.Code, msg string) step { return step{err: status.Error(c, msg)} }
	tests := []struct {
		name   string
		stream bool
		// firstToken is --first-token-timeout (0: the default);
		// noRetries sets --retry-max-retries to 0.
		firstToken time.Duration
		noRetries  bool
		// attempts are the engine streams of the workers placed, in order.
		attempts [][]step
		// cancelOnChunk: the client leaves once it has a chunk.
		cancelOnChunk bool
		// slowClient: the client takes this long to take each chunk.
		slowClient time.Duration

		// raw is what the pipeline returns, before the edge: a fault
		// of a kind ("fault: unavailable"), the engine's own status
		// ("engine"), or the context's error ("context").
		raw string
		// engineCode is the code of an engine's refusal (raw "engine"),
		// which the client is owed.
		engineCode codes.Code
		wantMsg    string // a part of the message
		wantOutput []uint32
		wantWorker string // the completion's worker
		wantPlaced int
		wantChunks int
	}{
		{
			name:       "success: the completion carries every token and the worker",
			attempts:   [][]step{{tokens(1, 2), tokens(3), final()}},
			wantOutput: []uint32{1, 2, 3}, wantWorker: "w0", wantPlaced: 1,
		},
		{
			name:       "a worker failing before the first token is retried on another",
			attempts:   [][]step{{fail(codes.Unavailable, "engine down")}, {tokens(7), final()}},
			wantOutput: []uint32{7}, wantWorker: "w1", wantPlaced: 2,
		},
		{
			name:       "tokens never delivered (not streaming) do not prevent a retry",
			attempts:   [][]step{{tokens(1, 2), fail(codes.Unavailable, "engine down")}, {tokens(5), final()}},
			wantOutput: []uint32{5}, wantWorker: "w1", wantPlaced: 2,
		},
		{
			name:       "a streaming client that has a token is not retried",
			stream:     true,
			attempts:   [][]step{{tokens(1), fail(codes.Unavailable, "engine down")}, {tokens(9), final()}},
			raw:        "fault: unavailable",
			wantMsg:    "worker w0 failed after 1 tokens: engine down",
			wantPlaced: 1, wantChunks: 1,
		},
		{
			name:       "a client error the engine reports is not retried",
			attempts:   [][]step{{fail(codes.InvalidArgument, "prompt too long")}, {tokens(9), final()}},
			raw:        "engine",
			engineCode: codes.InvalidArgument, wantMsg: "worker w0: prompt too long",
			wantPlaced: 1,
		},
		{
			name:          "a client that leaves ends the request as cancelled, not retried",
			stream:        true,
			cancelOnChunk: true,
			attempts:      [][]step{{tokens(1), stall()}, {tokens(9), final()}},
			raw:           "context",
			wantPlaced:    1, wantChunks: 1,
		},
		{
			name:       "an engine silent past the idle timeout after a token fails as the worker's, not retried once delivered",
			stream:     true,
			attempts:   [][]step{{tokens(1), stall()}, {tokens(9), final()}},
			raw:        "fault: unavailable",
			wantMsg:    "worker w0 failed after 1 tokens: no token within --stream-idle-timeout",
			wantPlaced: 1, wantChunks: 1,
		},
		{
			name:       "a client slow to take its chunks, past the idle timeout, does not make the engine idle",
			stream:     true,
			slowClient: 2 * DefaultReliability().StreamIdleTimeout,
			attempts:   [][]step{{tokens(1), tokens(2), final()}},
			wantOutput: []uint32{1, 2}, wantWorker: "w0", wantPlaced: 1, wantChunks: 2,
		},
		{
			name:       "a worker silent past the first-token timeout is retried on another",
			firstToken: 5 * time.Second,
			attempts:   [][]step{{stall()}, {tokens(4), final()}},
			wantOutput: []uint32{4}, wantWorker: "w1", wantPlaced: 2,
		},
		{
			name:       "the first-token timeout with no retry left is UNAVAILABLE saying so",
			firstToken: 5 * time.Second,
			noRetries:  true,
			attempts:   [][]step{{stall()}, {tokens(4), final()}},
			raw:        "fault: unavailable",
			wantMsg:    "worker w0 failed before the first token: no first token within --first-token-timeout; not retried: 0 retries is the limit",
			wantPlaced: 1,
		},
		{
			name:     "a retry with nowhere to go says why in the words of the placement",
			attempts: [][]step{{fail(codes.Unavailable, "engine down")}, {nowhere()}},
			raw:      "fault: unavailable",
			wantMsg: "worker w0 failed before the first token: engine down; not retried: " +
				"no healthy worker: 1 registered, 0 passing health checks, 0 with an open circuit breaker, none available",
			wantPlaced: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rel := DefaultReliability()
				if tt.firstToken > 0 {
					rel.FirstTokenTimeout = tt.firstToken
				}
				if tt.noRetries {
					rel.Retry.MaxRetries = 0
				}
				p := New(Config{Reliability: rel})
				placer := &scriptedPlacer{scripts: tt.attempts}
				r := oneModel(t, placer)

				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				sink := &sink{}
				switch {
				case tt.cancelOnChunk:
					sink.onChunk = cancel
				case tt.slowClient > 0:
					sink.onChunk = func() { time.Sleep(tt.slowClient) } // the bubble's clock
				}
				j := &Job{ID: "req", Route: r, InputIDs: []uint32{10, 11, 12}, Sampling: &kvgatev1.SamplingParams{},
					Stream: tt.stream, Start: time.Now(), Send: sink.send}
				j.Task = &generation{s: p, j: j}

				raw := p.Run(ctx, j)
				if got := rawKind(raw); got != tt.raw {
					t.Errorf("the pipeline returned %q (%v); want %q", got, raw, tt.raw)
				}
				if raw != nil && !strings.Contains(raw.Error(), tt.wantMsg) {
					t.Fatalf("the pipeline returned %q; want it to contain %q", raw, tt.wantMsg)
				}
				if tt.raw == "engine" && status.Code(raw) != tt.engineCode {
					t.Errorf("the engine's refusal carries %v; want %v", status.Code(raw), tt.engineCode)
				}
				if got := len(placer.placed); got != tt.wantPlaced {
					t.Errorf("%d attempts placed; want %d", got, tt.wantPlaced)
				}
				for i, pl := range placer.placed {
					if want := placer.urls()[:i]; !slices.Equal(pl.excluded, want) {
						t.Errorf("attempt %d excluded %v; want %v (the workers that failed before it)", i, pl.excluded, want)
					}
					if pl.run.ends != 1 {
						t.Errorf("attempt %d ended %d times; want once", i, pl.run.ends)
					}
				}
				if len(sink.chunks) != tt.wantChunks {
					t.Errorf("%d chunks sent; want %d", len(sink.chunks), tt.wantChunks)
				}
				if tt.raw != "" {
					if sink.done != nil {
						t.Errorf("a failed request sent a completion: %v", sink.done)
					}
					return
				}
				if sink.done == nil {
					t.Fatal("no completion sent")
				}
				if !slices.Equal(sink.done.OutputIds, tt.wantOutput) || sink.done.Worker != tt.wantWorker {
					t.Errorf("completion %v from %q; want %v from %q", sink.done.OutputIds, sink.done.Worker, tt.wantOutput, tt.wantWorker)
				}
			})
		})
	}
}

// rawKind says what an error the pipeline returned is, in the terms of
// the table's raw column.
func rawKind(err error) string {
	if err == nil {
		return ""
	}
	if k, ok := fault.KindOf(err); ok {
		return "fault: " + k.String()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "context"
	}
	if _, ok := status.FromError(err); ok {
		return "engine"
	}
	return "unknown"
}

// oneModel is a table of one model, served by placer.
func oneModel(t *testing.T, placer Placer) *Route {
	t.Helper()
	table := modeltable.New(modeltable.OneModel, func(*Route) Placer { return placer })
	r, _, err := table.Ensure("", func() (modeltable.Spec, error) {
		return modeltable.Spec{Policies: map[workers.Role]policy.Policy{workers.RoleRegular: policy.NewRoundRobin()}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A step is one thing a scripted engine stream does.
type step struct {
	ids   []uint32 // a chunk of these tokens
	final bool     // the completion, listing every token sent
	err   error    // the stream fails with err
	stall bool     // nothing until the attempt is over
	// nowhere: the placement finds no worker (the only one is failing its
	// health checks), as the first step of a script.
	nowhere bool
}

func tokens(ids ...uint32) step { return step{ids: ids} }
func final() step               { return step{final: true} }
func stall() step               { return step{stall: true} }
func nowhere() step             { return step{nowhere: true} }

// scriptedPlacer is the placer of the table's one model: placement n runs
// on worker "w<n>", whose stream plays scripts[n].
type scriptedPlacer struct {
	scripts [][]step
	mu      sync.Mutex
	placed  []*placement
}

type placement struct {
	excluded []string
	run      *scriptedRun
}

func (sp *scriptedPlacer) PolicyName() string { return "scripted" }
func (sp *scriptedPlacer) Embeddings() error  { return nil }

func (sp *scriptedPlacer) urls() []string {
	out := make([]string, len(sp.placed))
	for i := range sp.placed {
		out[i] = sp.placed[i].run.w.URL()
	}
	return out
}

func (sp *scriptedPlacer) Place(_ context.Context, j *Job, _ bool) (*Plan, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := len(sp.placed)
	if n == len(sp.scripts) {
		return nil, errors.New("the script has no worker left")
	}
	w := workers.NewWorker("w"+string(rune('0'+n)), workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	if steps := sp.scripts[n]; len(steps) > 0 && steps[0].nowhere {
		w.SetHealthy(false)
		return nil, CheckCandidates(workers.RoleRegular, []*workers.Worker{w}, j)
	}
	r := &scriptedRun{w: w, steps: sp.scripts[n]}
	sp.placed = append(sp.placed, &placement{excluded: slices.Clone(j.excluded()), run: r})
	// The scripted streams end with the attempt's context, as PD's legs
	// do, so the pipeline sends no Abort to an engine that is not there.
	return &Plan{Legs: []Leg{{Role: "regular", Worker: w, Policy: "scripted"}}, SelfAborting: true, Run: r}, nil
}

// scriptedRun is a plan's run whose stream plays steps.
type scriptedRun struct {
	w     *workers.Worker
	steps []step
	ends  int
}

func (r *scriptedRun) Start(ctx context.Context, _ *workers.GenerateRequest) (workers.Stream, error) {
	return &scriptedStream{ctx: ctx, steps: r.steps}, nil
}
func (r *scriptedRun) FirstToken(time.Time)        {}
func (r *scriptedRun) End(policy.Outcome)          { r.ends++ }
func (r *scriptedRun) Aborted(error, func() error) {}

type scriptedStream struct {
	ctx   context.Context
	steps []step
	sent  []uint32
}

func (s *scriptedStream) Recv() (workers.Chunk, error) {
	if err := s.ctx.Err(); err != nil {
		// As a gRPC stream: its context's end ends it, whatever it had
		// yet to send.
		return workers.Chunk{}, status.FromContextError(err).Err()
	}
	if len(s.steps) == 0 {
		return workers.Chunk{}, io.EOF
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	switch {
	case st.stall:
		<-s.ctx.Done()
		return workers.Chunk{}, status.FromContextError(s.ctx.Err()).Err()
	case st.err != nil:
		return workers.Chunk{}, st.err
	case st.final:
		return workers.Chunk{Final: &workers.Completion{OutputIDs: s.sent, FinishReason: "stop", PromptTokens: 3}}, nil
	}
	s.sent = append(s.sent, st.ids...)
	return workers.Chunk{TokenIDs: st.ids, PromptTokens: 3}, nil
}

// sink is the client's end of a job: what the pipeline sent it.
type sink struct {
	chunks  []*kvgatev1.GenerateChunk
	done    *kvgatev1.GenerateComplete
	onChunk func()
}

func (s *sink) send(c *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error {
	if done != nil {
		s.done = done
		return nil
	}
	s.chunks = append(s.chunks, c)
	if s.onChunk != nil {
		s.onChunk()
	}
	return nil
}
