package realengine_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestCancelFreesTheEngine: a client that gives up mid-stream leaves nothing
// running on the engine (kvgate aborts it) and nothing counted in flight.
func TestCancelFreesTheEngine(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Long enough that the engine would still be generating long after the
	// checks below: 3,500 tokens take the tiny model minutes on these CPUs.
	sp := &kvgatev1.SamplingParams{Temperature: proto.Float32(0), MaxNewTokens: proto.Uint32(3500), IgnoreEos: true}
	cctx, ccancel := context.WithCancel(ctx)
	st, err := s.router.Generate(cctx, &kvgatev1.GenerateRequest{InputIds: randomIDs(4, 20), Stream: true, SamplingParams: sp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	// The request is on an engine now.
	busy := 0
	for _, e := range s.engines {
		n, err := e.running(ctx)
		if err != nil {
			t.Fatal(err)
		}
		busy += n
	}
	if busy != 1 {
		t.Fatalf("engines report %d requests running, want the 1 streaming", busy)
	}
	cancelled := time.Now()
	ccancel()
	testutil.EventuallyState(t, 30*time.Second, "the engines' running requests back to 0", func() (bool, string) {
		state := ""
		for _, e := range s.engines {
			n, err := e.running(ctx)
			if err != nil || n != 0 {
				return false, fmt.Sprintf("engine %d: %d running, %v", e.index, n, err)
			}
		}
		return true, state
	})
	t.Logf("engine free %v after the client cancelled", time.Since(cancelled))
	testutil.EventuallyState(t, 10*time.Second, "kvgate's in-flight count back to 0", func() (bool, string) {
		ws, err := s.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range ws.GetWorkers() {
			if w.GetInFlight() != 0 {
				return false, fmt.Sprintf("%s: %d in flight", w.GetAddress(), w.GetInFlight())
			}
		}
		return true, ""
	})
}

// TestCacheAwareKeepsAPrefixOnOneEngine: requests sharing a 1,024-token prefix
// all go to the engine that computed it, and the cached tokens the engine
// reports for each are the ones kvgate predicted.
func TestCacheAwareKeepsAPrefixOnOneEngine(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := randomIDs(5, 1024)
	home := ""
	for i := range 6 {
		// A suffix that leaves the last block partial: vLLM never reports
		// a whole prompt cached (it recomputes the last token).
		ids := append(slices.Clone(prefix), randomIDs(100+uint64(i), 7+i)...)
		ex := s.explain(ctx, t, ids)
		r, err := s.generate(ctx, &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: greedy(1)})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		c := r.complete
		if i == 0 {
			home = c.GetWorker()
			continue
		}
		if c.GetWorker() != home || ex.GetWorker() != home {
			t.Errorf("request %d: served by %s (explained %s), the prefix is on %s", i, c.GetWorker(), ex.GetWorker(), home)
		}
		if got, want := c.GetUsage().GetCachedTokens(), ex.GetPredictedCachedTokens(); got != want || got != uint32(len(prefix)) {
			t.Errorf("request %d: engine reports %d cached, kvgate predicted %d; the prefix is %d", i, got, want, len(prefix))
		}
	}
}

// TestPredictionsFollowVLLMsReuseRules: two rules of vLLM's prefix cache,
// checked against the engine. A prompt that ends on a block boundary, sent
// again, is reported cached but for its last block (vLLM caps a hit at the
// prompt less one token, to compute the last), and a request for the
// prompt's log-probabilities reads nothing from the cache. kvgate's
// prediction (Explain, just before each request) is what the engine then
// reports.
func TestPredictionsFollowVLLMsReuseRules(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ids := randomIDs(31, 8*blockSize)
	for i, step := range []struct {
		promptLogprobs bool
		cached         uint32
	}{{false, 0}, {false, 7 * blockSize}, {true, 0}, {false, 7 * blockSize}} {
		sp := greedy(1)
		sp.PromptLogprobs = step.promptLogprobs
		req := &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: sp}
		ex, err := s.admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: req}})
		if err != nil {
			t.Fatalf("request %d: Explain: %v", i+1, err)
		}
		r, err := s.generate(ctx, req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		got := r.complete.GetUsage().GetCachedTokens()
		if got != step.cached || ex.GetPredictedCachedTokens() != got {
			t.Errorf("request %d (prompt_logprobs %v): engine reports %d cached, kvgate predicted %d; want %d",
				i+1, step.promptLogprobs, got, ex.GetPredictedCachedTokens(), step.cached)
		}
	}
}

// TestKVEventsMirrorTheEngineCache: what kvgate's mirror says an engine
// holds, from the engine's own KV events (SubscribeKvEvents, which the gRPC
// servicer relays from vLLM's ZMQ publisher), is what the engine finds in
// its cache when asked with the same prompt.
func TestKVEventsMirrorTheEngineCache(t *testing.T) {
	s := env(t)
	s.mirrorFollowsTheEngines(t, s.front, 6)
}

// TestZMQEventsMirrorTheEngineCache: the same, for a kvgate that takes the
// events straight from vLLM's ZMQ publishers (--kv-events-zmq, connecting to
// the PUB socket and its replay socket that each engine binds).
func TestZMQEventsMirrorTheEngineCache(t *testing.T) {
	s := env(t)
	s.mirrorFollowsTheEngines(t, s.zmq, 40)
}

// mirrorFollowsTheEngines sends a prompt through f, then probes both engines
// with prompts made from seed on, checking after each that f's mirror of
// each engine equals the cached tokens the engine reports.
func (s *realSuite) mirrorFollowsTheEngines(t *testing.T, f *front, seed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := randomIDs(seed, 512)
	full := append(slices.Clone(prefix), randomIDs(seed+1, 300)...)
	r, err := f.generate(ctx, &kvgatev1.GenerateRequest{InputIds: full, SamplingParams: greedy(1)})
	if err != nil {
		t.Fatal(err)
	}
	home := s.engines[s.workerIndex(t, r.complete.GetWorker())]
	other := s.engines[1-home.index]
	// Every full block of the prompt is stored: 812 tokens are 25 blocks.
	stored := uint32(len(full) / blockSize * blockSize)
	// Each probe asks both engines, so each stores the probe's blocks: the
	// other engine, which never saw the prompt, holds it after the first
	// probe, and kvgate's mirror must follow that too.
	probes := []struct {
		name        string
		ids         []uint32
		home, other uint32 // tokens each holds when the probe is asked
	}{
		{"the prompt", full, stored, 0},
		{"its prefix and another ending", append(slices.Clone(prefix), randomIDs(seed+2, 40)...), uint32(len(prefix)), uint32(len(prefix))},
		{"a prompt never sent", randomIDs(seed+3, 200), 0, 0},
	}
	for _, p := range probes {
		testutil.EventuallyState(t, 30*time.Second, p.name+": kvgate's mirror caught up with the engines' events", func() (bool, string) {
			ex := f.explain(ctx, t, p.ids)
			h, o := confirmedOn(ex, home), confirmedOn(ex, other)
			return h == p.home && o == p.other, fmt.Sprintf("confirmed %d on %s, %d on %s; want %d and %d", h, home.url(), o, other.url(), p.home, p.other)
		})
		for _, e := range []struct {
			engine *engine
			want   uint32
		}{{home, p.home}, {other, p.other}} {
			cached, err := e.engine.engineCached(ctx, p.ids)
			if err != nil {
				t.Fatal(err)
			}
			if cached != e.want {
				t.Errorf("%s: engine %d reports %d cached, kvgate's mirror %d", p.name, e.engine.index, cached, e.want)
			}
		}
	}
	ws, err := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws.GetWorkers() {
		// No duplicates either: the servicer's load heartbeats repeat the
		// last number and are not duplicate batches.
		if ev := w.GetKvEvents(); ev.GetMode() != "events" || ev.GetBatches() == 0 || ev.GetGaps() != 0 || ev.GetDuplicates() != 0 {
			t.Errorf("%s: KV events %v; want mode events, batches, no gaps and no duplicates", w.GetAddress(), ev)
		}
	}
}

// TestEngineKilledMidStreamAndRestarted kills an engine while
// it streams, checks the fleet keeps serving on the other, restarts it on the
// same ports and checks kvgate takes it back with an empty view of its cache.
func TestEngineKilledMidStreamAndRestarted(t *testing.T) {
	s := env(t)
	if s.attached {
		t.Skipf("%s: the engines are not this test's to kill", attachVar)
	}
	ctx, cancel := context.WithTimeout(context.Background(), engineStartTimeout+3*time.Minute)
	defer cancel()
	// kvgate runs cache_aware, which does not take x-target-worker (only
	// consistent_hashing does): the victim is the engine that served the
	// prefix, and the prefix brings the streamed request back to it.
	prefix := randomIDs(10, 256)
	r0, err := s.generate(ctx, &kvgatev1.GenerateRequest{InputIds: prefix, SamplingParams: greedy(1)})
	if err != nil {
		t.Fatal(err)
	}
	victim, survivor := s.engines[0], s.engines[1]
	if r0.complete.GetWorker() == survivor.url() {
		victim, survivor = survivor, victim
	}
	if r0.complete.GetWorker() != victim.url() {
		t.Fatalf("the prefix went to %s, which is neither engine", r0.complete.GetWorker())
	}
	testutil.EventuallyState(t, 30*time.Second, "the victim's prefix confirmed", func() (bool, string) {
		ex := s.explain(ctx, t, prefix)
		got := confirmedOn(ex, victim)
		return got > 0, fmt.Sprintf("%d on the victim, %d on the survivor", got, confirmedOn(ex, survivor))
	})

	sp := &kvgatev1.SamplingParams{Temperature: proto.Float32(0), MaxNewTokens: proto.Uint32(3500), IgnoreEos: true}
	st, err := s.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: append(slices.Clip(prefix), randomIDs(11, 20)...), Stream: true, SamplingParams: sp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	victim.p.kill()
	// The tiny model can finish all its tokens before the kill lands (seen:
	// the whole answer was on its way when the first token reached the
	// client). Either ending is right; what must never happen is a clean
	// end that drops tokens. A stream cut mid-way must end with a status
	// the client may retry (UNAVAILABLE or ABORTED), never INTERNAL and
	// never a bare end of stream: server's TestEngineKilledMidStream holds
	// the router to that with the simulator, whose death can be timed.
	relayed := 1 // the first chunk's token
	var streamErr error
	var done *kvgatev1.GenerateComplete
	for streamErr == nil {
		var m *kvgatev1.GenerateResponse
		m, streamErr = st.Recv()
		relayed += len(m.GetChunk().GetTokenIds())
		if c := m.GetComplete(); c != nil {
			done = c
		}
	}
	switch {
	case done != nil:
		t.Logf("the engine finished before its death: %d tokens, finish %v", relayed, done.GetFinishReason())
		if streamErr != io.EOF || done.GetUsage().GetCompletionTokens() != uint32(relayed) ||
			done.GetFinishReason() != kvgatev1.FinishReason_FINISH_REASON_LENGTH {
			t.Errorf("a completion of %d tokens (finish %v) for %d relayed, then %v", done.GetUsage().GetCompletionTokens(),
				done.GetFinishReason(), relayed, streamErr)
		}
	default:
		t.Logf("cut after %d tokens: %v", relayed, streamErr)
		if code := status.Code(streamErr); code != codes.Unavailable && code != codes.Aborted {
			t.Errorf("stream cut by the engine's death after %d tokens: %v, want UNAVAILABLE or ABORTED", relayed, streamErr)
		}
	}

	// The fleet goes on with the survivor.
	for i := range 4 {
		r, err := s.generate(ctx, &kvgatev1.GenerateRequest{InputIds: randomIDs(20+uint64(i), 30), SamplingParams: greedy(2)})
		if err != nil || r.complete.GetWorker() != survivor.url() {
			t.Fatalf("request %d with the victim dead: %v on %s", i, err, r.complete.GetWorker())
		}
	}

	if err := s.startEngine(victim); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyState(t, 2*time.Minute, "kvgate takes the restarted engine back", func() (bool, string) {
		ws, err := s.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
		if err != nil {
			return false, err.Error()
		}
		i := slices.IndexFunc(ws.GetWorkers(), func(w *kvgatev1.Worker) bool { return w.GetAddress() == victim.url() })
		if i < 0 {
			return false, "the victim is not listed"
		}
		w := ws.GetWorkers()[i]
		ok := w.GetHealth() == kvgatev1.Health_HEALTH_HEALTHY && w.GetBreaker() != kvgatev1.BreakerState_BREAKER_STATE_OPEN && w.GetKvEvents().GetConnected()
		return ok, w.String()
	})
	// A new process has an empty cache; kvgate's view of it must agree.
	testutil.EventuallyState(t, 30*time.Second, "the victim's view reset", func() (bool, string) {
		got := confirmedOn(s.explain(ctx, t, prefix), victim)
		return got == 0, fmt.Sprint(got)
	})
	// A prompt neither engine holds goes to the smaller tree
	// (--cache-miss-fallback smallest_tree): the restarted engine's, empty.
	r, err := s.generate(ctx, &kvgatev1.GenerateRequest{InputIds: randomIDs(30, 30), SamplingParams: greedy(2)})
	if err != nil || r.complete.GetWorker() != victim.url() {
		t.Fatalf("a new prompt after the restart: %v on %s, want the restarted %s", err, r.complete.GetWorker(), victim.url())
	}
	if cached, err := victim.engineCached(ctx, prefix); err != nil || cached != 0 {
		t.Errorf("restarted engine reports %d of the old prefix cached (%v)", cached, err)
	}
}
