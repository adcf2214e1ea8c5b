package server_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// A worker whose requests keep failing (while it passes its health checks)
// has its breaker opened by the failures themselves; it then gets no
// requests, is probed after the timeout, and closes again once probes
// succeed. ListWorkers and Explain show the state.
func TestCircuitBreakerOpensHalfOpensAndCloses(t *testing.T) {
	testutil.NoLeaks(t)
	// The breakers read a clock the test moves: the timeout passes without
	// being waited for, and nothing half-opens early on a slow machine.
	clock := testutil.NewClock(time.Unix(1000, 0))
	const timeout = 1500 * time.Millisecond
	f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin", config: func(c *router.Config) {
		fastRetries(c)
		c.Breaker.FailureThreshold, c.Breaker.SuccessThreshold, c.Breaker.Timeout = 3, 2, timeout
		c.Breaker.Now = clock.Now
	}})
	f.sims[0].Engine().SetFaults(sim.Faults{Unavailable: true})
	for i := range 10 {
		if r := f.mustGenerate(t, longReq); r.complete.Worker != f.workerURL(1) {
			t.Fatalf("request %d served by %s", i, r.complete.Worker)
		}
	}
	breakerOf := func(i int) kvgatev1.BreakerState {
		resp, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Workers[i].Breaker
	}
	if got := breakerOf(0); got != kvgatev1.BreakerState_BREAKER_STATE_OPEN {
		t.Fatalf("breaker of the failing worker: %v, want OPEN", got)
	}
	if n := counter(t, f, "kvgate_circuit_breaker_transitions_total", "state", "open"); n != 1 {
		t.Fatalf("kvgate_circuit_breaker_transitions_total{state=open} = %v, want 1", n)
	}
	if n := f.sims[0].Engine().Stats().Rejected; n != 3 {
		t.Fatalf("the failing worker got %d requests; its breaker should have opened after 3", n)
	}
	ex, err := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: longReq}})
	if err != nil || ex.Workers[0].Breaker != kvgatev1.BreakerState_BREAKER_STATE_OPEN || ex.Worker != f.workerURL(1) {
		t.Fatalf("Explain: %v, %v; want worker 1 chosen and worker 0's breaker OPEN", ex, err)
	}

	// The engine recovers; after the timeout probes go through and close it.
	f.sims[0].Engine().SetFaults(sim.Faults{})
	clock.Advance(timeout - time.Nanosecond)
	if got := breakerOf(0); got != kvgatev1.BreakerState_BREAKER_STATE_OPEN {
		t.Fatalf("just before the timeout: %v, want OPEN", got)
	}
	clock.Advance(time.Nanosecond)
	if got := breakerOf(0); got != kvgatev1.BreakerState_BREAKER_STATE_HALF_OPEN {
		t.Fatalf("after the timeout: %v, want HALF_OPEN", got)
	}
	served := map[string]int{}
	for range 8 {
		served[f.mustGenerate(t, longReq).complete.Worker]++
	}
	if served[f.workerURL(0)] == 0 || breakerOf(0) != kvgatev1.BreakerState_BREAKER_STATE_CLOSED {
		t.Fatalf("after recovery: served %v, breaker %v; want worker 0 back and CLOSED", served, breakerOf(0))
	}
}

// A worker that stalls before its first token is failed after
// --first-token-timeout and the request is served elsewhere; the stalled
// attempt is aborted on its engine.
func TestStallBeforeTheFirstTokenIsRetried(t *testing.T) {
	testutil.NoLeaks(t)
	f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin", config: fastRetries,
		sim: func(i int, c *sim.Config) { c.Faults.StallBeforeFirstToken = i == 0 }})
	r := f.mustGenerate(t, longReq)
	if r.complete.Worker != f.workerURL(1) {
		t.Fatalf("served by %s, want the healthy worker", r.complete.Worker)
	}
	eng := f.sims[0].Engine()
	testutil.Eventually(t, "the stalled attempt to be aborted", func() bool { return eng.Stats().AbortCalls == 1 && eng.Stats().Running == 0 })
}

// An engine that sends garbage (token ids outside the vocabulary) fails
// before anything reaches the client, and another worker serves.
func TestGarbageFromAnEngineIsAFailure(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin", config: fastRetries,
		sim: func(i int, c *sim.Config) { c.Faults.GarbageStream = i == 0 }})
	r := f.mustGenerate(t, longReq)
	if r.complete.Worker != f.workerURL(1) || len(r.complete.OutputIds) != 12 {
		t.Fatalf("served by %s with %d tokens, want the healthy worker's 12", r.complete.Worker, len(r.complete.OutputIds))
	}
	for _, c := range r.chunks {
		for _, id := range c.TokenIds {
			if int(id) >= f.reg.Snapshot()[1].Info().VocabSize {
				t.Fatalf("the client received garbage id %d", id)
			}
		}
	}
}

// A worker that does not answer at start-up does not stop the router: it
// is listed as connecting and unhealthy, and joins when its engine starts.
func TestUnreachableWorkerJoinsWhenItAnswers(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	late := lis.Addr().String()
	lis.Close() // nothing listens there yet
	f := startFleet(t, fleetOptions{workers: 1, healthInterval: 20 * time.Millisecond,
		config: func(c *router.Config) { c.WorkerURLs = append(c.WorkerURLs, "grpc://"+late) }})
	resp, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
	if err != nil || len(resp.Workers) != 2 || !resp.Workers[1].Connecting || resp.Workers[1].Health != kvgatev1.Health_HEALTH_UNHEALTHY {
		t.Fatalf("ListWorkers: %v, %v; want the late worker listed as connecting and unhealthy", resp, err)
	}
	f.mustGenerate(t, longReq) // served by the worker that is up

	c := sim.DefaultConfig()
	c.TimeScale = 0
	s, err := sim.Start(c, late)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	w, _ := f.reg.Get("grpc://" + late)
	testutil.Eventually(t, "the late worker to join", func() bool {
		w, _ = f.reg.Get("grpc://" + late)
		return w.Connected() && w.Healthy()
	})
}

// Workers added and removed while requests run: no request is lost, the
// removed worker's requests finish (drain), and it gets no new ones.
func TestAddAndRemoveWorkersUnderLoad(t *testing.T) {
	testutil.NoLeaks(t)
	f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin", config: fastRetries, sim: func(_ int, c *sim.Config) {
		c.TimeScale = 1
		c.DecodeMsPerToken = 1
		c.RequestOverhead = 0
	}})
	c := sim.DefaultConfig()
	c.TimeScale = 0
	extra, err := sim.Start(c, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(extra.Stop)

	var (
		wg         sync.WaitGroup
		ok, failed atomic.Int64
		stop       = make(chan struct{})
		firstErr   atomic.Value
	)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := f.generate(ctx, t, longReq)
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	// Each change happens while requests run: after some have finished,
	// and the next only once the last change has been seen to take effect.
	served := func(what string, n int64) {
		t.Helper()
		target := ok.Load() + failed.Load() + n
		testutil.Eventually(t, what, func() bool { return ok.Load()+failed.Load() >= target })
	}
	ctx := context.Background()
	served("requests under way", 8)
	add, err := f.admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{Address: extra.Addr()})
	if err != nil || add.Worker.Address != "grpc://"+extra.Addr() || add.Worker.Health != kvgatev1.Health_HEALTH_HEALTHY {
		t.Fatalf("AddWorker: %v, %v", add, err)
	}
	testutil.Eventually(t, "the added worker to serve", func() bool { return extra.Engine().Stats().Requests > 0 })
	rm, err := f.admin.RemoveWorker(ctx, &kvgatev1.RemoveWorkerRequest{Address: f.workerURL(0), DrainTimeoutSecs: 5})
	if err != nil || rm.Aborted != 0 {
		t.Fatalf("RemoveWorker: %v, %v; want it drained with nothing cut", rm, err)
	}
	before := f.sims[0].Engine().Stats().Requests
	served("requests after the removal", 8)
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed while workers changed (first: %v)", n, n+ok.Load(), firstErr.Load())
	}
	if after := f.sims[0].Engine().Stats().Requests; after != before {
		t.Fatalf("the removed worker got %d requests after its removal", after-before)
	}
	if extra.Engine().Stats().Requests == 0 {
		t.Fatal("the added worker never got a request")
	}
	resp, _ := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
	if len(resp.Workers) != 2 {
		t.Fatalf("ListWorkers after add and remove: %d workers, want 2", len(resp.Workers))
	}

	for _, tc := range []struct {
		call func() error
		want codes.Code
	}{
		{func() error {
			_, err := f.admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{Address: extra.Addr()})
			return err
		}, codes.AlreadyExists},
		{func() error {
			_, err := f.admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{Address: "ftp://x:1"})
			return err
		}, codes.InvalidArgument},
		{func() error {
			_, err := f.admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{Address: "127.0.0.1:1", Role: kvgatev1.Role_ROLE_DECODE})
			return err
		}, codes.InvalidArgument},
		{func() error {
			_, err := f.admin.RemoveWorker(ctx, &kvgatev1.RemoveWorkerRequest{Address: "127.0.0.1:1"})
			return err
		}, codes.NotFound},
	} {
		if err := tc.call(); status.Code(err) != tc.want {
			t.Errorf("got %v, want %v", err, tc.want)
		}
	}
}

// A removed worker is forgotten by the policy: cache_aware's tree drops
// everything it held for it.
func TestRemovedWorkerIsForgottenByTheTree(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, policy: "cache_aware"})
	f.mustGenerate(t, longReq)
	served := f.mustGenerate(t, longReq).complete.Worker
	treeTokens := func(worker string) float64 {
		mfs, err := f.srv.Metrics().Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "kvgate_tree_worker_tokens" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "worker" && lp.GetValue() == worker {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return 0
	}
	if treeTokens(served) == 0 {
		t.Fatalf("the tree holds nothing for %s after serving it", served)
	}
	if _, err := f.admin.RemoveWorker(context.Background(), &kvgatev1.RemoveWorkerRequest{Address: served}); err != nil {
		t.Fatal(err)
	}
	if n := treeTokens(served); n != 0 {
		t.Fatalf("the tree still holds %v tokens for the removed worker", n)
	}
	if c := f.mustGenerate(t, longReq).complete; c.Worker == served {
		t.Fatal("a request went to the removed worker")
	}
}

// Admin.AddWorker refuses an engine whose vocabulary is smaller than the
// router's tokenizer with FAILED_PRECONDITION and both sizes: the request
// is well formed, the fleet is what it does not fit.
func TestAddWorkerOfASmallerVocabularyIsAFailedPrecondition(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	c := sim.DefaultConfig()
	c.TimeScale, c.VocabSize, c.EOSTokenID = 0, 1000, 999
	small, err := sim.Start(c, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Stop)
	_, err = f.admin.AddWorker(context.Background(), &kvgatev1.AddWorkerRequest{Address: small.Addr()})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(msg, "vocab_size 1000") || !strings.Contains(msg, "2059") {
		t.Fatalf("AddWorker: %v; want FAILED_PRECONDITION naming both vocabulary sizes", err)
	}
	if resp, _ := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{}); len(resp.GetWorkers()) != 1 {
		t.Fatalf("ListWorkers: %v; want the refused worker absent", resp)
	}
}
