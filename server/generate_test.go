package server_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// protocols are the engine protocols the simulator speaks; pdProtocols
// those with prefill/decode disaggregation (TensorRT-LLM's is not driven
// by kvgate).
var (
	protocols   = []string{"sglang", "vllm", "trtllm"}
	pdProtocols = []string{"sglang", "vllm"}
)

func TestGenerateStreamsTokensInOrderThenCompletes(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 3})
			r := f.mustGenerate(t, &kvgatev1.GenerateRequest{
				RequestId:      "order-1",
				InputIds:       prompt(100, 50),
				Stream:         true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(40), IgnoreEos: true},
			})
			var streamed []uint32
			for _, c := range r.chunks {
				if int(c.Index) != len(streamed) {
					t.Fatalf("chunk index %d, but %d tokens came before it", c.Index, len(streamed))
				}
				streamed = append(streamed, c.TokenIds...)
			}
			c := r.complete
			if len(streamed) != 40 || !slices.Equal(streamed, c.OutputIds) {
				t.Fatalf("streamed %d tokens %v, completion has %v", len(streamed), streamed, c.OutputIds)
			}
			if c.FinishReason != kvgatev1.FinishReason_FINISH_REASON_LENGTH {
				t.Errorf("finish_reason = %v, want LENGTH", c.FinishReason)
			}
			if c.Usage.GetPromptTokens() != 50 || c.Usage.GetCompletionTokens() != 40 {
				t.Errorf("usage = %v, want 50 prompt and 40 completion tokens", c.Usage)
			}
			if !strings.HasPrefix(c.Worker, "grpc://127.0.0.1:") {
				t.Errorf("worker = %q, want a grpc:// URL", c.Worker)
			}
			for _, id := range r.ids {
				if id != "order-1" {
					t.Fatalf("message carries request_id %q, want order-1", id)
				}
			}
		})
	}
}

func TestNonStreamingSendsOnlyTheCompletion(t *testing.T) {
	f := startFleet(t, fleetOptions{})
	r := f.mustGenerate(t, &kvgatev1.GenerateRequest{
		InputIds:       prompt(7, 20),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(12), IgnoreEos: true},
	})
	if len(r.chunks) != 0 || len(r.complete.OutputIds) != 12 {
		t.Fatalf("got %d chunks and %d output ids, want 0 and 12", len(r.chunks), len(r.complete.OutputIds))
	}
	if !strings.HasPrefix(r.ids[0], "kvg-") {
		t.Errorf("generated request_id = %q, want kvg- prefix", r.ids[0])
	}
}

func TestStopTokenEndsGenerationAndIsReported(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1})
			req := &kvgatev1.GenerateRequest{
				InputIds:       prompt(500, 30),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(30), IgnoreEos: true, Seed: i32(3)},
			}
			first := f.mustGenerate(t, req).complete.OutputIds
			stop := first[4]
			req.SamplingParams.StopTokenIds = []uint32{stop}
			c := f.mustGenerate(t, req).complete
			want := first[:slices.Index(first, stop)+1]
			if !slices.Equal(c.OutputIds, want) {
				t.Fatalf("output %v, want %v (up to and including stop token %d)", c.OutputIds, want, stop)
			}
			if c.FinishReason != kvgatev1.FinishReason_FINISH_REASON_STOP || c.GetMatchedStopTokenId() != stop {
				t.Fatalf("finish %v matched %v, want STOP matched %d", c.FinishReason, c.MatchedStopTokenId, stop)
			}
		})
	}
}

func TestRepeatedPromptIsCachedOnTheSameWorker(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 2, policy: "round_robin",
				sim: func(_ int, c *sim.Config) { c.PageSize = 16 }})
			req := &kvgatev1.GenerateRequest{InputIds: prompt(1000, 100), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4)}}
			first := f.mustGenerate(t, req).complete
			second := f.mustGenerate(t, req).complete
			third := f.mustGenerate(t, req).complete
			if first.Worker != third.Worker || first.Worker == second.Worker {
				t.Fatalf("round_robin placed the calls on %s, %s, %s", first.Worker, second.Worker, third.Worker)
			}
			if first.Usage.CachedTokens != 0 || second.Usage.CachedTokens != 0 {
				t.Fatalf("cold workers reported cached tokens: %d, %d", first.Usage.CachedTokens, second.Usage.CachedTokens)
			}
			if got := third.Usage.CachedTokens; got != 96 {
				t.Fatalf("repeat on the same worker: cached_tokens = %d, want 96 (six whole 16-token pages of 100)", got)
			}
		})
	}
}

func TestRoundRobinAlternates(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 3, policy: "round_robin"})
	var got []string
	for i := range 6 {
		got = append(got, f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i), 5),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}}).complete.Worker)
	}
	for i, w := range got {
		if want := f.workerURL(i % 3); w != want {
			t.Fatalf("call %d went to %s, want %s (all: %v)", i, w, want, got)
		}
	}
}

// TestPowerOfTwoAvoidsLoadedWorker holds a request open on worker 0 (its engine
// stalls after the first token) and checks that new requests then all go to
// the idle worker 1.
func TestPowerOfTwoAvoidsLoadedWorker(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, policy: "power_of_two", sim: func(i int, c *sim.Config) {
		if i == 0 {
			c.Faults.StallAfterTokens = 1
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := 0
	for attempt := 0; held < 1 && attempt < 200; attempt++ {
		st, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(9, 10), Stream: true,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil { // first token: the request is placed
			t.Fatal(err)
		}
		if w, _ := f.reg.Get(f.workerURL(0)); w.InFlight() > held {
			held++
			continue
		}
		for { // served by worker 1: drain it
			if _, err := st.Recv(); err != nil {
				break
			}
		}
	}
	if held < 1 {
		t.Fatalf("could not place a request on worker 0 in 200 attempts")
	}
	for i := range 20 {
		c := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i), 10),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}}).complete
		if c.Worker != f.workerURL(1) {
			t.Fatalf("request %d went to the loaded worker %s", i, c.Worker)
		}
	}
}

func TestCancelSendsAbortToTheWorker(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, workers: 1,
				sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 2 }})
			ctx, cancel := context.WithCancel(context.Background())
			st, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{RequestId: "to-cancel", InputIds: prompt(1, 40), Stream: true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100), IgnoreEos: true}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			cancel()
			eng := f.sims[0].Engine()
			testutil.Eventually(t, "the engine to receive Abort and free the request", func() bool {
				s := eng.Stats()
				return s.AbortCalls == 1 && s.Running == 0
			})
			w, _ := f.reg.Get(f.workerURL(0))
			testutil.Eventually(t, "the router to release the request", func() bool { return w.InFlight() == 0 })
		})
	}
}

func TestDeadlineIsPassedOnAndAborts(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 1 }})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), Stream: true,
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(50), IgnoreEos: true}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v, want DEADLINE_EXCEEDED", err)
	}
	eng := f.sims[0].Engine()
	testutil.Eventually(t, "the stalled request to be freed on the engine", func() bool { return eng.Stats().Running == 0 })
}

func TestWorkerFailures(t *testing.T) {
	tests := []struct {
		name       string
		faults     sim.Faults
		wantTokens int // chunks received before the error
	}{
		{"unavailable before the first token", sim.Faults{Unavailable: true}, 0},
		{"stream dropped after 3 tokens", sim.Faults{DropAfterTokens: 3}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1, sim: func(_ int, c *sim.Config) { c.Faults = tc.faults }})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), Stream: true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(20), IgnoreEos: true}})
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("err = %v, want UNAVAILABLE", err)
			}
			if r.complete != nil {
				t.Fatal("a failed request also got a completion")
			}
			n := 0
			for _, c := range r.chunks {
				n += len(c.TokenIds)
			}
			if n != tc.wantTokens {
				t.Fatalf("received %d tokens before the error, want %d", n, tc.wantTokens)
			}
			if !strings.Contains(status.Convert(err).Message(), f.workerURL(0)) {
				t.Errorf("error %q does not name the worker", err)
			}
		})
	}
}

func TestBadInputIsRejectedWithTheFieldAndLimit(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, sim: func(_ int, c *sim.Config) {
		c.VocabSize = 1000
		c.EOSTokenID = 999
		c.MaxContextLength = 256
	}})
	nan := float32(math.NaN())
	tests := []struct {
		name string
		req  *kvgatev1.GenerateRequest
		want []string // substrings of the message
	}{
		{"empty prompt", &kvgatev1.GenerateRequest{}, []string{"input_ids", "empty"}},
		{"token outside vocabulary", &kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 1000}}, []string{"input_ids[2]", "1000", "vocab_size 1000"}},
		{"prompt alone fills the context", &kvgatev1.GenerateRequest{InputIds: prompt(0, 256)}, []string{"prompt", "256"}},
		{"prompt plus max_new_tokens beyond context", &kvgatev1.GenerateRequest{InputIds: prompt(0, 200),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100)}}, []string{"max_new_tokens", "300", "256"}},
		{"NaN temperature", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{Temperature: &nan}}, []string{"temperature", "finite"}},
		{"negative temperature", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{Temperature: f32(-0.5)}}, []string{"temperature", "-0.5", "[0, +inf)"}},
		{"top_p zero", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{TopP: f32(0)}}, []string{"top_p", "(0, 1]"}},
		{"top_p above one", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{TopP: f32(1.5)}}, []string{"top_p", "1.5"}},
		{"top_k below -1", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{TopK: i32(-2)}}, []string{"top_k", "-2"}},
		{"negative frequency penalty out of range", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{FrequencyPenalty: f32(-3)}}, []string{"frequency_penalty", "[-2, 2]"}},
		{"infinite presence penalty", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{PresencePenalty: f32(float32(math.Inf(1)))}}, []string{"presence_penalty"}},
		{"negative repetition penalty", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{RepetitionPenalty: f32(-1)}}, []string{"repetition_penalty"}},
		{"negative min_p", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{MinP: f32(-0.1)}}, []string{"min_p"}},
		{"zero max_new_tokens", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(0)}}, []string{"max_new_tokens"}},
		{"min above max", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(5), MinNewTokens: 9}}, []string{"min_new_tokens", "9", "5"}},
		{"request id too long", &kvgatev1.GenerateRequest{RequestId: strings.Repeat("x", 300), InputIds: prompt(0, 4)}, []string{"request_id", "256"}},
		{"prompt plus min_new_tokens beyond context, max unset", &kvgatev1.GenerateRequest{InputIds: prompt(0, 200),
			SamplingParams: &kvgatev1.SamplingParams{MinNewTokens: 100}}, []string{"min_new_tokens", "300", "256"}},
		{"empty stop string", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{Stop: []string{"ok", ""}}}, []string{"stop[1]", "empty"}},
		{"too many stop strings", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{Stop: slices.Repeat([]string{"x"}, 65)}}, []string{"stop", "65", "64"}},
		{"stop string too long", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{Stop: []string{strings.Repeat("x", 1025)}}}, []string{"stop[0]", "1025", "1024"}},
		{"stop token outside vocabulary", &kvgatev1.GenerateRequest{InputIds: prompt(0, 4),
			SamplingParams: &kvgatev1.SamplingParams{StopTokenIds: []uint32{5, 4000}}}, []string{"stop_token_ids[1]", "4000", "vocab_size 1000"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := f.generate(ctx, t, tc.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want INVALID_ARGUMENT", err)
			}
			msg := status.Convert(err).Message()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not mention %q", msg, w)
				}
			}
		})
	}
	for i := range f.sims {
		if n := f.sims[i].Engine().Stats().Requests; n != 0 {
			t.Errorf("sim %d received %d requests; invalid requests must not reach a worker", i, n)
		}
	}
}

// TestPromptLongerThanTheCacheIsRefusedByTheRouter: an SGLang engine whose
// KV cache holds fewer tokens than its context accepts prompts up to the
// cache's size less one (its max_req_input_len); the router refuses a longer
// one itself, naming the field and the limit, before any engine sees it, and
// routes one that fits.
func TestPromptLongerThanTheCacheIsRefusedByTheRouter(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, sim: func(_ int, c *sim.Config) {
		c.MaxContextLength, c.KVCapacityTokens = 4096, 1024
	}})
	ctx := testutil.Context(t, 10*time.Second)
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(0, 1500)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a 1,500-token prompt for engines that hold 1,024 tokens: err = %v, want INVALID_ARGUMENT", err)
	}
	for _, w := range []string{"input_ids", "1500", "at most 1023", "max_req_input_len"} {
		if msg := status.Convert(err).Message(); !strings.Contains(msg, w) {
			t.Errorf("message %q does not mention %q", msg, w)
		}
	}
	for i := range f.sims {
		if n := f.sims[i].Engine().Stats().Requests; n != 0 {
			t.Errorf("sim %d received %d requests; a prompt no engine accepts must not reach one", i, n)
		}
	}
	r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(0, 1000),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
	if err != nil || r.complete == nil || len(r.complete.GetOutputIds()) != 4 {
		t.Fatalf("a 1,000-token prompt that fits: %v, %v; want a completion of 4 tokens", r, err)
	}
}

// TestPromptsGoOnlyToEnginesThatHoldThem: in a fleet of two SGLang engines
// with 1,024-token KV caches and one with 4,096, of two running slots each,
// eight 1,500-token prompts at once all complete on the larger engine: the
// requests beyond its slots wait in the router for it, though the smaller
// engines have room (with --late-binding-avoid-full as well, where a queue
// that did not know would bind them to a place they cannot take). Explain
// names that engine, and a prompt longer than every engine accepts is
// refused naming the largest limit.
func TestPromptsGoOnlyToEnginesThatHoldThem(t *testing.T) {
	for _, avoidFull := range []bool{false, true} {
		t.Run(fmt.Sprintf("avoid full %v", avoidFull), func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 3, policy: "cache_aware",
				sim: func(i int, c *sim.Config) {
					c.MaxContextLength, c.KVCapacityTokens, c.MaxRunning, c.TimeScale = 8192, 1024, 2, 0.2
					if i == 2 {
						c.KVCapacityTokens = 4096
					}
				},
				config: func(rc *router.Config) { rc.Admission.AvoidFullEngines = avoidFull }})
			ctx := testutil.Context(t, 30*time.Second)
			ex, err := f.admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{
				Generate: &kvgatev1.GenerateRequest{InputIds: prompt(99, 1500)}}})
			if want := "grpc://" + f.sims[2].Addr(); err != nil || ex.GetWorker() != want {
				t.Fatalf("Explain of a 1,500-token prompt: %v, %v; want worker %s, the one engine that accepts it", ex.GetWorker(), err, want)
			}
			if want := "left out for their limits: grpc://" + f.sims[0].Addr() + ", grpc://" + f.sims[1].Addr(); !strings.Contains(ex.GetReason(), want) ||
				!strings.Contains(ex.GetReason(), "at most 1023") {
				t.Errorf("Explain's reason %q; want it to say %q, and their limit", ex.GetReason(), want)
			}
			f.generateAll(ctx, t, 8, func(i int) *kvgatev1.GenerateRequest {
				return &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i), 1500),
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}}
			})
			ws, err := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range ws.GetWorkers() {
				input, capacity := uint32(1023), uint32(1024)
				if i == 2 {
					input, capacity = 4095, 4096
				}
				if w.GetMaxInputTokens() != input || w.GetKvCapacityTokens() != capacity || w.GetMaxContextLength() != 8192 ||
					w.GetMaxRunningRequests() != 2 || w.GetTruncatesPrompts() {
					t.Errorf("ListWorkers shows worker %d with limits %d, %d, %d, %d, %v; want max_input_tokens %d, kv_capacity_tokens %d, context 8192, 2 running, no truncation",
						i, w.GetMaxInputTokens(), w.GetKvCapacityTokens(), w.GetMaxContextLength(), w.GetMaxRunningRequests(), w.GetTruncatesPrompts(), input, capacity)
				}
			}
			got := []uint64{f.sims[0].Engine().Stats().Requests, f.sims[1].Engine().Stats().Requests, f.sims[2].Engine().Stats().Requests}
			if got[0] != 0 || got[1] != 0 || got[2] != 8 {
				t.Errorf("requests per engine %v; want [0 0 8]", got)
			}
			long := slices.Concat(prompt(0, 1000), prompt(0, 1000), prompt(0, 1000), prompt(0, 1000), prompt(0, 1000))
			_, err = f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: long})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "at most 4095") {
				t.Fatalf("a 5,000-token prompt: %v; want INVALID_ARGUMENT naming the largest limit, 4095", err)
			}
		})
	}
}

// TestDisaggregatedPromptsGoOnlyToEnginesThatHoldThem: with prefill and
// decode on separate engines, each leg goes only to an engine of its role
// that accepts the prompt: of two prefill engines and two decode engines,
// one of each with a 1,024-token cache, a 1,500-token prompt runs on the
// larger ones every time.
func TestDisaggregatedPromptsGoOnlyToEnginesThatHoldThem(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 4, pd: true, policy: "cache_aware", sim: func(i int, c *sim.Config) {
		c.MaxContextLength, c.KVCapacityTokens = 8192, 4096
		if i == 0 || i == 2 { // the first prefill and the first decode engine
			c.KVCapacityTokens = 1024
		}
	}})
	ctx := testutil.Context(t, 20*time.Second)
	for i := range 4 {
		r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i), 1500),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
		if err != nil || r.complete == nil {
			t.Fatalf("request %d: %v, %v", i, r, err)
		}
		if c := r.complete; c.GetPrefillWorker() != f.workerURL(1) || c.GetWorker() != f.workerURL(3) {
			t.Errorf("request %d ran on prefill %s and decode %s; want the larger engines, %s and %s",
				i, c.GetPrefillWorker(), c.GetWorker(), f.workerURL(1), f.workerURL(3))
		}
	}
}

// TestPromptsBeyondEveryLimitGoToAnEngineThatTruncates: an SGLang engine
// started with --allow-auto-truncate cuts a prompt longer than it accepts
// instead of refusing it; a prompt beyond every engine's context goes to
// that engine, which serves its head, and never to the engine that would
// refuse it.
func TestPromptsBeyondEveryLimitGoToAnEngineThatTruncates(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, sim: func(i int, c *sim.Config) {
		c.MaxContextLength, c.KVCapacityTokens, c.AutoTruncate = 4096, 2048, i == 1
	}})
	ctx := testutil.Context(t, 10*time.Second)
	long := slices.Concat(prompt(0, 1000), prompt(0, 1000), prompt(0, 1000), prompt(0, 1000), prompt(0, 1000))
	for range 3 { // round_robin would send one of them to the engine that refuses it
		r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: long,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
		if err != nil || r.complete == nil || len(r.complete.GetOutputIds()) != 4 {
			t.Fatalf("a 5,000-token prompt for engines of a 4,096-token context: %v, %v; want a completion of 4 tokens", r, err)
		}
	}
	ws, err := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
	if err != nil || len(ws.GetWorkers()) != 2 || ws.GetWorkers()[0].GetTruncatesPrompts() || !ws.GetWorkers()[1].GetTruncatesPrompts() {
		t.Errorf("ListWorkers: %v, %v; want the second worker, not the first, shown truncating prompts", ws, err)
	}
	refusing, truncating := f.sims[0].Engine().Stats(), f.sims[1].Engine().Stats()
	if refusing.Requests != 0 || truncating.Requests != 3 {
		t.Errorf("requests %d on the engine that refuses, %d on the one that truncates; want 0 and 3", refusing.Requests, truncating.Requests)
	}
	if want := uint64(3 * 2047); truncating.PromptTokens != want {
		t.Errorf("the truncating engine ran %d prompt tokens; want %d, three prompts cut to its max_req_input_len", truncating.PromptTokens, want)
	}
}

func TestConcurrentRequestsAllComplete(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 3, policy: "power_of_two"})
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i), 30), Stream: i%2 == 0,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(16), IgnoreEos: true}})
			if err == nil && (r.complete == nil || len(r.complete.OutputIds) != 16) {
				err = fmt.Errorf("request %d: incomplete result", i)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range f.reg.Snapshot() {
		if w.InFlight() != 0 {
			t.Fatalf("%s still counts %d requests in flight", w.URL(), w.InFlight())
		}
	}
}
