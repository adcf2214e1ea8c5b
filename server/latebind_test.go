package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// queuedInEngines is how many requests the fleet's engines had to queue
// because they were full when the request arrived.
func queuedInEngines(f *fleet) uint64 {
	var n uint64
	for _, s := range f.sims {
		n += s.Engine().Stats().QueuedFull
	}
	return n
}

// waitObservations is how many waits kvgate_queue_wait_seconds counted for
// reason.
func waitObservations(t *testing.T, f *fleet, reason string) uint64 {
	t.Helper()
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "kvgate_queue_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return n
}

// TestLateBindingUnderOverload: two engines of two slots each and sixteen
// requests at once; the requests beyond the four slots wait in the router
// and every one completes. With AvoidFullEngines no engine ever had to
// queue one; without it (the default) the policy may still choose a full
// engine that holds the prompt's cache once some engine has room.
func TestLateBindingUnderOverload(t *testing.T) {
	for _, c := range []struct {
		name       string
		avoidFull  bool
		noneQueued bool
	}{
		{name: "avoiding full engines: none is sent to a full engine", avoidFull: true, noneQueued: true},
		{name: "the policy chooses among all (default)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 2, policy: "cache_aware",
				sim:    func(_ int, sc *sim.Config) { sc.MaxRunning, sc.TimeScale = 2, 0.2 },
				config: func(rc *router.Config) { rc.Admission.AvoidFullEngines = c.avoidFull }})
			ctx := testutil.Context(t, 30*time.Second)
			f.generateAll(ctx, t, 16, func(i int) *kvgatev1.GenerateRequest {
				return &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i%3+1), 32),
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(16), IgnoreEos: true}}
			})
			if n := queuedInEngines(f); c.noneQueued && n != 0 {
				t.Errorf("%d requests were sent to an engine that was full", n)
			}
			if n := waitObservations(t, f, "engines_full"); n == 0 {
				t.Error("no request waited for an engine with room: the test did not overload the fleet")
			}
		})
	}
}

// TestLateBindingOrderAndBound: with every slot held, requests wait in the
// router; a higher priority (kvgate-priority) queued later is bound before
// earlier lower ones, each when a slot frees; a request beyond --queue-size
// is refused at once; Explain says a request would wait, and the request's
// log line why it did.
func TestLateBindingOrderAndBound(t *testing.T) {
	var logs logBuffer
	f := startFleet(t, fleetOptions{workers: 2,
		sim: func(_ int, c *sim.Config) { c.MaxRunning, c.Faults.StallAfterTokens = 2, 1 },
		config: func(c *router.Config) {
			c.Logger = logs.logger()
			c.Admission.AvoidFullEngines = true
			c.Admission.QueueSize = 3
			c.Reliability.StreamIdleTimeout = 0
		}})
	var holders []context.CancelFunc
	for range 4 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		startStream(t, f, ctx, 100)
		holders = append(holders, cancel)
	}

	exp, err := f.admin.Explain(testutil.Context(t, 5*time.Second), &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{
		Generate: &kvgatev1.GenerateRequest{InputIds: prompt(9, 8)}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(exp.GetReason(), "engines_full") {
		t.Errorf("Explain's reason %q does not say the request would wait for a full fleet", exp.GetReason())
	}

	bound := make(chan string, 3)
	waitCtx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	queue := func(name, priority string, depth float64) {
		ctx := metadata.AppendToOutgoingContext(waitCtx, "kvgate-priority", priority, "x-request-id", name)
		go func() {
			st, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(5, 8), Stream: true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100), IgnoreEos: true}})
			if err == nil {
				_, err = st.Recv()
			}
			if err == nil {
				bound <- name
			}
		}()
		testutil.Eventually(t, name+" to wait in the router", func() bool { return gauge(t, f, "kvgate_admission_queue_depth") == depth })
	}
	queue("first", "0", 1)
	queue("second", "0", 2)
	queue("urgent", "-5", 3)

	_, err = f.generate(testutil.Context(t, 5*time.Second), t, &kvgatev1.GenerateRequest{InputIds: prompt(6, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--queue-size") {
		t.Fatalf("beyond the queue: %v, want RESOURCE_EXHAUSTED naming --queue-size", err)
	}

	for i, want := range []string{"urgent", "first", "second"} {
		holders[i]() // a slot frees
		select {
		case got := <-bound:
			if got != want {
				t.Fatalf("bound %s, want %s (priority, then arrival)", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing was bound after slot %d freed; want %s", i+1, want)
		}
	}
	if n := queuedInEngines(f); n != 0 {
		t.Errorf("%d requests were sent to an engine that was full", n)
	}
	if n := waitObservations(t, f, "engines_full"); n != 3 {
		t.Errorf("kvgate_queue_wait_seconds counted %d waits for full engines, want 3", n)
	}
	stopWaiting() // the calls end, and their lines are written
	finished := func() map[string]any {
		for _, l := range logs.about(t, "urgent") {
			if l["msg"] == "finished call" {
				return l
			}
		}
		return nil
	}
	testutil.Eventually(t, "urgent's call line", func() bool { return finished() != nil })
	if l := finished(); l["queue_wait_reason"] != "engines_full" || l["queue_wait_seconds"] == nil {
		t.Errorf("urgent's call line %v, want queue_wait_reason engines_full and queue_wait_seconds", l)
	}
}

// TestPriorityMetadata: kvgate-priority is an integer within ±1000; any
// other value is the client's mistake, named.
func TestPriorityMetadata(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1})
	for _, c := range []struct {
		value string
		ok    bool
	}{
		{"0", true}, {"-1000", true}, {"1000", true}, {"7", true},
		{"1001", false}, {"-1001", false}, {"high", false}, {"1.5", false},
	} {
		t.Run(c.value, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(testutil.Context(t, 5*time.Second), "kvgate-priority", c.value)
			_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
			switch {
			case c.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !c.ok && (status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "kvgate-priority")):
				t.Fatalf("%v, want INVALID_ARGUMENT naming kvgate-priority", err)
			}
		})
	}
}

// TestRouterLimitWait: beyond --max-concurrent-requests a request waits in
// the same queue, counted under router_limit, and is bound when a place
// frees.
func TestRouterLimitWait(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1,
		sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 1 },
		config: func(c *router.Config) {
			c.Admission.MaxConcurrentRequests = 1
			c.Reliability.StreamIdleTimeout = 0
		}})
	held, release := context.WithCancel(context.Background())
	defer release()
	startStream(t, f, held, 100)

	bound := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		st, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(2, 8), Stream: true,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100), IgnoreEos: true}})
		if err == nil {
			_, err = st.Recv()
		}
		bound <- err
	}()
	testutil.Eventually(t, "the second request to wait", func() bool { return gauge(t, f, "kvgate_admission_queue_depth") == 1 })
	release()
	if err := <-bound; err != nil {
		t.Fatalf("the waiting request: %v", err)
	}
	if n := waitObservations(t, f, "router_limit"); n != 1 {
		t.Errorf("kvgate_queue_wait_seconds counted %d router_limit waits, want 1", n)
	}
	if n := waitObservations(t, f, "engines_full"); n != 0 {
		t.Errorf("kvgate_queue_wait_seconds counted %d engines_full waits on an engine of 256 slots", n)
	}
}
