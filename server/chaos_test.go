package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// chaosPlan sizes one chaos run. The short plan runs in every `go test`;
// KVGATE_CHAOS=full (make chaos) runs the long one.
type chaosPlan struct {
	name     string
	requests int
	clients  int
	seed     uint64
}

func chaosPlanFromEnv() chaosPlan {
	p := chaosPlan{name: "short", requests: 300, clients: 8, seed: 1}
	if os.Getenv("KVGATE_CHAOS") == "full" {
		p = chaosPlan{name: "full", requests: 1000, clients: 12, seed: 1}
	}
	if s, err := strconv.ParseUint(os.Getenv("KVGATE_CHAOS_SEED"), 10, 64); err == nil {
		p.seed = s
	}
	return p
}

// TestChaos runs a bounded load through a fleet whose engines are killed,
// restarted, stalled, made to fail, to drop streams and to send garbage, at
// random (seeded) moments, and checks what a client may rely on whatever
// happens: no call hangs, every call ends in a complete, consistent answer
// or in UNAVAILABLE after its first token (a failure before the first token
// always had a healthy worker to go to, so it must never reach a client),
// and nothing leaks once the router is shut down.
//
// One policy, cache_aware, the default: it is the one with state (its
// prefix tree, load counts) that a failing worker could corrupt or make
// attractive, so it is the one a fault is most likely to mislead. Worker 0
// is never touched: with exclusions per request, "some worker is healthy at
// any moment" is not enough for a guarantee (a request could meet a fault on
// each worker in turn as the faults move), "this worker is always healthy"
// is, and the other three take every fault.
func TestChaos(t *testing.T) {
	plan := chaosPlanFromEnv()
	// Registered first, the count runs last: after the fleet has stopped
	// and NoLeaks has waited for its goroutines to end.
	goroutinesBefore := runtime.NumGoroutine()
	t.Cleanup(func() {
		after := runtime.NumGoroutine()
		t.Logf("chaos goroutines: before=%d after=%d leaked=%d", goroutinesBefore, after, max(0, after-goroutinesBefore))
	})
	testutil.NoLeaks(t)

	logs := newChaosLog()
	const workers = 4
	f := startFleet(t, fleetOptions{workers: workers, policy: "cache_aware", healthInterval: 50 * time.Millisecond,
		sim: func(_ int, c *sim.Config) {
			// Real (small) delays, so that requests are in flight when
			// faults land: ~2 ms to the first token, 2 ms a token.
			c.TimeScale, c.RequestOverhead, c.DecodeMsPerToken = 1, 2*time.Millisecond, 2
		},
		config: func(c *router.Config) {
			fastRetries(c)
			c.Reliability.FirstTokenTimeout = 400 * time.Millisecond
			c.Reliability.StreamIdleTimeout = 400 * time.Millisecond
			// The retry configuration is the default: its budget lets
			// every request with a healthy worker to go to retry (three
			// faulty workers need at most three retries, within the
			// default five).
			c.Breaker.FailureThreshold, c.Breaker.SuccessThreshold, c.Breaker.Timeout = 3, 1, 200*time.Millisecond
			c.Logger = slog.New(logs)
		}})
	vocab := f.sims[0].Engine().Config().VocabSize

	rnd := rand.New(rand.NewPCG(plan.seed, 0x6b76676174))
	reqs := chaosRequests(rnd, plan.requests)
	start := time.Now()

	load, stopChaos := context.WithCancel(context.Background())
	var chaosDone sync.WaitGroup
	chaosDone.Add(1)
	faults := map[string]int{}
	go func() {
		defer chaosDone.Done()
		runChaos(t, load, f, rand.New(rand.NewPCG(plan.seed, 0x6368616f73)), faults)
	}()

	outcomes := make([]chaosOutcome, len(reqs))
	var next sync.Mutex
	i := 0
	var clients sync.WaitGroup
	for range plan.clients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for {
				next.Lock()
				n := i
				i++
				next.Unlock()
				if n >= len(reqs) {
					return
				}
				outcomes[n] = callChaos(f, reqs[n], vocab)
			}
		}()
	}
	clients.Wait()
	stopChaos()
	chaosDone.Wait()
	elapsed := time.Since(start)

	byKind := map[string]int{}
	var hung int
	for n, o := range outcomes {
		byKind[o.kind]++
		switch o.kind {
		case "ok", "unavailable_after_first_token":
		case "hung":
			hung++
			t.Errorf("request %d (stream=%v) hung: %v", n, reqs[n].Stream, o.err)
		default:
			t.Errorf("request %d (stream=%v): %s: %v", n, reqs[n].Stream, o.kind, o.err)
		}
	}
	retried, past, recovered := logs.recovery(outcomes)
	share, pastShare := 1.0, 1.0
	if retried > 0 {
		share, pastShare = float64(recovered)/float64(retried), float64(past)/float64(retried)
	}

	t.Logf("chaos run: plan=%s seed=%d workers=%d policy=cache_aware clients=%d requests=%d elapsed=%.1fs",
		plan.name, plan.seed, workers, plan.clients, len(reqs), elapsed.Seconds())
	t.Logf("chaos faults: %s faults_total=%d", formatCounts(faults), sum(faults)-faults["heal"]-faults["restart"])
	t.Logf("chaos outcomes: %s hung=%d", formatCounts(byKind), hung)
	t.Logf("chaos retries: kvgate_retries_total=%.0f retry_budget_exhausted=%.0f breaker_openings=%d",
		counter(t, f, "kvgate_retries_total"), counter(t, f, "kvgate_retry_budget_exhausted_total"), logs.countPrefix("circuit breaker open"))
	t.Logf("chaos recovery: requests_with_prefirst_failure=%d past_first_token=%d past_first_token_share=%.3f completed=%d completed_share=%.3f",
		retried, past, pastShare, recovered, share)
}

// chaosRequests are n Generate requests over four shared prefixes (as four
// system prompts), with short distinct suffixes, streaming or not, long
// enough that stalls and drops after a few tokens land mid-stream.
func chaosRequests(rnd *rand.Rand, n int) []*kvgatev1.GenerateRequest {
	reqs := make([]*kvgatev1.GenerateRequest, n)
	for i := range reqs {
		ids := prompt(1+uint32(rnd.IntN(4))*40, 32)
		for range 4 + rnd.IntN(12) {
			ids = append(ids, 1+uint32(rnd.IntN(200)))
		}
		reqs[i] = &kvgatev1.GenerateRequest{
			RequestId: fmt.Sprintf("chaos-%d", i),
			InputIds:  ids,
			Stream:    rnd.IntN(2) == 0,
			SamplingParams: &kvgatev1.SamplingParams{
				MaxNewTokens: u32(8 + uint32(rnd.IntN(17))),
				IgnoreEos:    true,
			},
		}
	}
	return reqs
}

// chaosOutcome is how one call ended, in the words of the figures.
type chaosOutcome struct {
	kind string
	err  error
}

// callChaos makes one call with a generous deadline (a call still running
// at its end counts as hung) and checks what it got.
func callChaos(f *fleet, req *kvgatev1.GenerateRequest, vocab int) chaosOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := f.readGenerate(ctx, req)
	if err != nil && status.Code(err) == codes.Unknown {
		return chaosOutcome{"inconsistent", err}
	}
	var got []uint32
	for _, c := range r.chunks {
		if int(c.Index) != len(got) {
			return chaosOutcome{"inconsistent", fmt.Errorf("chunk at index %d after %d tokens", c.Index, len(got))}
		}
		got = append(got, c.TokenIds...)
	}
	for _, id := range got {
		if int(id) >= vocab {
			return chaosOutcome{"inconsistent", fmt.Errorf("token %d outside the vocabulary (%d)", id, vocab)}
		}
	}
	switch code := status.Code(err); {
	case err == nil:
		return checkComplete(req, r, got, vocab)
	case code == codes.DeadlineExceeded:
		return chaosOutcome{"hung", err}
	case code == codes.Unavailable && req.Stream && len(got) > 0 && r.complete == nil:
		return chaosOutcome{"unavailable_after_first_token", nil}
	case code == codes.Unavailable:
		return chaosOutcome{"unavailable_before_first_token", err}
	default:
		return chaosOutcome{"status_" + code.String(), err}
	}
}

// checkComplete: a success has every token asked for, the same in the
// chunks (when streaming) and the completion, all in the vocabulary.
func checkComplete(req *kvgatev1.GenerateRequest, r result, chunks []uint32, vocab int) chaosOutcome {
	c := r.complete
	want := int(req.SamplingParams.GetMaxNewTokens())
	switch {
	case c == nil:
		return chaosOutcome{"inconsistent", fmt.Errorf("OK without a completion")}
	case len(c.OutputIds) != want || int(c.Usage.GetCompletionTokens()) != want:
		return chaosOutcome{"inconsistent", fmt.Errorf("%d output ids, usage %d; want %d", len(c.OutputIds), c.Usage.GetCompletionTokens(), want)}
	case req.Stream && !slices.Equal(chunks, c.OutputIds):
		return chaosOutcome{"inconsistent", fmt.Errorf("chunks %v, completion %v", chunks, c.OutputIds)}
	case !req.Stream && len(chunks) > 0:
		return chaosOutcome{"inconsistent", fmt.Errorf("chunks sent to a non-streaming call")}
	case c.Worker == "":
		return chaosOutcome{"inconsistent", fmt.Errorf("completion names no worker")}
	}
	for _, id := range c.OutputIds {
		if int(id) >= vocab {
			return chaosOutcome{"inconsistent", fmt.Errorf("output token %d outside the vocabulary (%d)", id, vocab)}
		}
	}
	return chaosOutcome{"ok", nil}
}

// runChaos changes one of workers 1..3 every 10-100 ms until ctx ends: a
// fault, a heal, a kill or a restart; faults are counted by kind. Worker 0
// stays healthy throughout (see TestChaos). Everything is healed at the end,
// so that shutdown finds a fleet of running engines.
func runChaos(t *testing.T, ctx context.Context, f *fleet, rnd *rand.Rand, counts map[string]int) {
	killed := make([]bool, len(f.sims))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			for i, s := range f.sims {
				if killed[i] {
					if err := s.Restart(); err != nil {
						t.Errorf("restart sim %d: %v", i, err)
					}
				}
				s.Engine().SetFaults(sim.Faults{})
			}
			return
		case <-timer.C:
		}
		timer.Reset(time.Duration(10+rnd.IntN(91)) * time.Millisecond)
		i := 1 + rnd.IntN(len(f.sims)-1)
		s := f.sims[i]
		if killed[i] {
			if err := s.Restart(); err != nil {
				t.Errorf("restart sim %d: %v", i, err)
				continue
			}
			killed[i] = false
			counts["restart"]++
			continue
		}
		kind := chaosKinds[rnd.IntN(len(chaosKinds))]
		counts[kind]++
		var fs sim.Faults
		switch kind {
		case "kill":
			s.Kill()
			killed[i] = true
			continue
		case "unavailable":
			fs.Unavailable = true
		case "drop_after_tokens":
			fs.DropAfterTokens = 1 + rnd.IntN(5)
		case "stall_after_tokens":
			fs.StallAfterTokens = 1 + rnd.IntN(5)
		case "stall_before_first_token":
			fs.StallBeforeFirstToken = true
		case "garbage_stream":
			fs.GarbageStream = true
		case "unhealthy":
			fs.Unhealthy = true
		}
		s.Engine().SetFaults(fs) // "heal" sets none
	}
}

// chaosKinds are the changes runChaos draws from; heal is twice as likely
// as any fault, so that workers spend time healthy between faults.
var chaosKinds = []string{"heal", "heal", "kill", "unavailable", "drop_after_tokens", "stall_after_tokens",
	"stall_before_first_token", "garbage_stream", "unhealthy"}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// chaosLog is a slog handler that keeps what the figures need from the
// router's logs: how often each message was logged, and which requests had
// an attempt fail before the first token ("worker failed" with
// retryable=true).
type chaosLog struct {
	mu       *sync.Mutex
	messages map[string]int
	retried  map[string]bool
	attrs    []slog.Attr
}

func newChaosLog() *chaosLog {
	return &chaosLog{mu: new(sync.Mutex), messages: map[string]int{}, retried: map[string]bool{}}
}

func (h *chaosLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *chaosLog) Handle(_ context.Context, r slog.Record) error {
	var id string
	retryable := false
	see := func(a slog.Attr) bool {
		switch a.Key {
		case "request_id":
			id = a.Value.String()
		case "retryable":
			retryable = a.Value.Kind() == slog.KindBool && a.Value.Bool()
		}
		return true
	}
	for _, a := range h.attrs {
		see(a)
	}
	r.Attrs(see)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.messages[r.Message]++
	if r.Message == "worker failed" && retryable && id != "" {
		h.retried[id] = true
	}
	return nil
}

func (h *chaosLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *chaosLog) WithGroup(string) slog.Handler { return h }

func (h *chaosLog) countPrefix(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for msg, c := range h.messages {
		if strings.HasPrefix(msg, prefix) {
			n += c
		}
	}
	return n
}

// recovery counts the requests that had an attempt fail before the first
// token, how many of those a retry took past the first token (the retry's
// job; a later fault may still cut the stream), and how many completed.
func (h *chaosLog) recovery(outcomes []chaosOutcome) (retried, past, completed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n, o := range outcomes {
		if h.retried[fmt.Sprintf("chaos-%d", n)] {
			retried++
			switch o.kind {
			case "ok":
				past++
				completed++
			case "unavailable_after_first_token":
				past++
			}
		}
	}
	return retried, past, completed
}
