package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// The router's view of each engine's cache follows the engines' KV events.
// These tests drive real traffic through real routers to simulated engines
// with small caches (so they evict all the time) and compare the router's
// view with each engine's own cache contents, page for page.

// smallCaches gives each engine a 1,024-token cache of 16-token pages and a
// vocabulary large enough for the prompts these tests build.
func smallCaches(i int, c *sim.Config) {
	bigVocab(i, c)
	c.PageSize = 16
	c.KVCapacityTokens = 1024
}

func bigVocab(_ int, c *sim.Config) {
	c.TokenizerDir, c.VocabSize, c.EOSTokenID = "none", 1<<20, 2
}

// eventFleet starts n engines with small caches behind a cache_aware router
// whose speculative entries expire as soon as a request ends.
func eventFleet(t *testing.T, protocol string, n int, edit func(i int, c *sim.Config)) *fleet {
	t.Helper()
	return startFleet(t, fleetOptions{protocol: protocol, workers: n, policy: "cache_aware",
		options: func(o *policy.Options) { o.CacheAware.SpeculativeTTL = 0 },
		// Every resubscription backs off, gaps included; short waits keep
		// the streams back before the checks' traffic once a fault ends.
		config: func(c *router.Config) {
			c.KVSubscription.InitialBackoff, c.KVSubscription.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
		},
		sim: func(i int, c *sim.Config) {
			smallCaches(i, c)
			if edit != nil {
				edit(i, c)
			}
		}})
}

func cacheAware(t *testing.T, g *router.Router) *policy.CacheAware {
	t.Helper()
	ca, ok := g.Policy.(*policy.CacheAware)
	if !ok {
		t.Fatalf("policy is %T, want cache_aware", g.Policy)
	}
	return ca
}

// waitMode waits until ListWorkers shows every worker's KV event stream in
// mode.
func waitMode(t *testing.T, admin kvgatev1.AdminClient, mode string) {
	t.Helper()
	testutil.Eventually(t, "every worker in mode "+mode, func() bool {
		resp, err := admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
		if err != nil {
			return false
		}
		for _, w := range resp.GetWorkers() {
			if w.GetKvEvents().GetMode() != mode {
				return false
			}
		}
		return true
	})
}

// traffic sends n requests from a few goroutines: prompts built from a
// small set of shared prefixes (so matches are common) and a random suffix,
// with short outputs (which engines cache too).
func traffic(t *testing.T, rc kvgatev1.RouterClient, seed uint64, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	prompts := make([][]uint32, n)
	for i := range prompts {
		prefix := prompt(uint32(1000*(1+rng.IntN(6))), 16*(1+rng.IntN(8)))
		prompts[i] = append(prefix, prompt(uint32(100_000+rng.IntN(50_000)), 1+rng.IntN(40))...)
	}
	var wg sync.WaitGroup
	next := make(chan []uint32)
	errs := make(chan error, n)
	for range 4 {
		wg.Go(func() {
			for ids := range next {
				st, err := rc.Generate(context.Background(), &kvgatev1.GenerateRequest{InputIds: ids,
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(uint32(1 + len(ids)%24))}})
				if err == nil {
					for err == nil {
						_, err = st.Recv()
					}
				}
				if err != nil && err.Error() != "EOF" {
					errs <- err
				}
			}
		})
	}
	for _, p := range prompts {
		next <- p
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("request failed: %v", err)
	}
}

// waitExact waits until ca's view of every engine of f equals the engine's
// cache, page for page: first the confirmed pages, then everything (the
// speculative entries of finished requests have expired).
func waitExact(t *testing.T, ca *policy.CacheAware, f *fleet) {
	t.Helper()
	for i, s := range f.sims {
		url := f.workerURL(i)
		for _, confirmedOnly := range []bool{true, false} {
			testutil.EventuallyState(t, testutil.Patience, fmt.Sprintf("worker %d's view to equal its engine's cache (confirmed only: %v)", i, confirmedOnly), func() (bool, string) {
				view, engine := pageNames(ca.Holdings(url, confirmedOnly)), pageNames(s.Engine().CachedPages())
				if slices.Equal(view, engine) {
					return true, ""
				}
				return false, fmt.Sprintf("the router holds %d pages, the engine %d; first difference: %s",
					len(view), len(engine), testutil.FirstDiff(view, engine))
			})
		}
	}
}

// pageNames writes each page's token ids as one comparable string.
func pageNames(pages [][]uint32) []string {
	out := make([]string, len(pages))
	for i, p := range pages {
		out[i] = fmt.Sprint(p)
	}
	return out
}

func TestKVEventMirrorEqualsTheEnginesCaches(t *testing.T) {
	for _, protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			f := eventFleet(t, protocol, 3, nil)
			waitMode(t, f.admin, "events")
			traffic(t, f.router, 1, 150)
			waitExact(t, cacheAware(t, f.g), f)
			for i, s := range f.sims {
				if st := s.Engine().Stats(); st.KVNextSequence < 10 {
					t.Fatalf("engine %d published %d batches: the caches did not churn", i, st.KVNextSequence)
				}
			}
		})
	}
}

// evictAll sends each engine of f unique prompts, straight and not through
// a router (as other clients of the engine would), until it holds no page
// it held before, so that a view that lost track of old pages (after a
// reset) can be exact again.
func evictAll(t *testing.T, f *fleet, seed uint32) {
	t.Helper()
	// Twice: pages stored while a subscription was being re-established
	// (after a gap, say) are unknown to the router too, and the second
	// round evicts those.
	ctx := context.Background()
	for round := range 2 * len(f.sims) {
		i := round / 2
		s := f.sims[i]
		old := map[string]bool{}
		for _, p := range s.Engine().CachedPages() {
			old[fmt.Sprint(p)] = true
		}
		w, err := workers.Connect(ctx, f.workerURL(i), workers.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for n := 0; ; n++ {
			stale := false
			for _, p := range s.Engine().CachedPages() {
				stale = stale || old[fmt.Sprint(p)]
			}
			if !stale {
				break
			}
			if n == 20 {
				t.Fatalf("engine %d: 20 unique prompts did not turn its cache over", i)
			}
			st, err := w.Backend().Generate(ctx, &workers.GenerateRequest{RequestID: fmt.Sprint("evict-", round, "-", n),
				InputIDs: prompt(seed+uint32(20_000*round+1000*n), 512), Sampling: workers.Sampling{MaxNewTokens: u32(1)}})
			for err == nil {
				_, err = st.Recv()
			}
			if err != io.EOF {
				t.Fatalf("engine %d: eviction request: %v", i, err)
			}
		}
	}
}

func kvStatus(t *testing.T, f *fleet, i int) *kvgatev1.KvEventStream {
	t.Helper()
	resp, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range resp.GetWorkers() {
		if w.GetAddress() == f.workerURL(i) {
			return w.GetKvEvents()
		}
	}
	t.Fatalf("worker %d not listed", i)
	return nil
}

func TestKVEventMirrorRecovers(t *testing.T) {
	tests := []struct {
		name   string
		faults sim.Faults
		// check reads what the subscription counted.
		check func(st *kvgatev1.KvEventStream) bool
		what  string
	}{
		{"lost batches", sim.Faults{KVEventDropEvery: 7},
			func(st *kvgatev1.KvEventStream) bool { return st.GetGaps() > 0 }, "gaps counted"},
		{"duplicated batches", sim.Faults{KVEventDuplicateEvery: 3},
			func(st *kvgatev1.KvEventStream) bool { return st.GetDuplicates() > 0 && st.GetGaps() == 0 }, "duplicates skipped, no gap"},
		{"delayed batches", sim.Faults{KVEventDelay: 20 * time.Millisecond},
			func(st *kvgatev1.KvEventStream) bool { return st.GetLagSeconds() >= 0.015 }, "the lag shown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := eventFleet(t, "sglang", 2, func(_ int, c *sim.Config) { c.Faults = tt.faults })
			waitMode(t, f.admin, "events")
			traffic(t, f.router, 2, 80)
			// The fault shows, once batches have arrived, on a worker
			// that got traffic.
			testutil.Eventually(t, tt.what, func() bool {
				return tt.check(kvStatus(t, f, 0)) || tt.check(kvStatus(t, f, 1))
			})
			for _, s := range f.sims {
				s.Engine().SetFaults(sim.Faults{})
			}
			caughtUp(t, f)
			evictAll(t, f, 500_000)
			waitExact(t, cacheAware(t, f.g), f)
		})
	}
}

// caughtUp returns once every engine's stream is open and the router has
// applied the last batch the engine published. A gap still pending (the
// last batch before a fault ended was lost) shows at the next batch, and the
// subscription backs off before it starts again, missing what is published
// meanwhile; so while the router is behind, one more request goes to the
// engine, until a batch arrives on a stream without a gap.
func caughtUp(t *testing.T, f *fleet) {
	t.Helper()
	for i, s := range f.sims {
		w, err := workers.Connect(context.Background(), f.workerURL(i), workers.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		first := uint32(700_000)
		testutil.Eventually(t, fmt.Sprintf("worker %d's stream to catch up with its engine", i), func() bool {
			st := kvStatus(t, f, i)
			if st.GetConnected() && st.GetLastSequenceNumber()+1 == s.Engine().Stats().KVNextSequence {
				return true
			}
			direct(t, w, first, 1)
			first += 100
			return false
		})
	}
}

func TestKVEventMirrorFollowsAnEngineRestart(t *testing.T) {
	f := eventFleet(t, "sglang", 2, nil)
	waitMode(t, f.admin, "events")
	traffic(t, f.router, 3, 60)
	ca := cacheAware(t, f.g)
	if len(ca.Holdings(f.workerURL(0), true)) == 0 {
		t.Fatal("worker 0 holds nothing before the restart; the test proves nothing")
	}
	f.sims[0].Kill()
	if err := f.sims[0].Restart(); err != nil {
		t.Fatal(err)
	}
	// The restarted engine's cache is empty; the router learns it at the
	// new process's first batch, numbered 0.
	seed := uint32(900_000)
	testutil.Eventually(t, "the router to see worker 0's restart", func() bool {
		seed += 1000 // new prompts, so that some land on worker 0
		f.generate(context.Background(), t, &kvgatev1.GenerateRequest{InputIds: prompt(seed, 40),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
		st := kvStatus(t, f, 0)
		return st.GetResets()+st.GetGaps()+st.GetResyncs() > 0
	})
	// Batches the new process published before the router reconnected are
	// lost (engines replay nothing older than the subscription), so the
	// view lacks some pages: it may underpredict, never overpredict, and is
	// exact again once the engine's cache has turned over.
	traffic(t, f.router, 4, 60)
	confirmedSubset(t, ca, f)
	evictAll(t, f, 800_000)
	waitExact(t, ca, f)
}

// confirmedSubset checks that every page ca confirms for an engine of f is
// in that engine's cache, once the events under way have arrived (traffic
// has stopped): pages the router never heard of in full must not be
// confirmed.
func confirmedSubset(t *testing.T, ca *policy.CacheAware, f *fleet) {
	t.Helper()
	for i, s := range f.sims {
		testutil.Eventually(t, fmt.Sprintf("worker %d's confirmed pages to be the engine's", i), func() bool {
			engine := map[string]bool{}
			for _, p := range s.Engine().CachedPages() {
				engine[fmt.Sprint(p)] = true
			}
			for _, p := range ca.Holdings(f.workerURL(i), true) {
				if !engine[fmt.Sprint(p)] {
					return false
				}
			}
			return true
		})
	}
}

func TestKVEventsUnimplementedLeavesTheWorkerApproximate(t *testing.T) {
	f := eventFleet(t, "sglang", 2, func(i int, c *sim.Config) { c.KVEvents = i != 0 })
	testutil.Eventually(t, "worker 0 approximate, worker 1 on events", func() bool {
		return kvStatus(t, f, 0).GetMode() == "approximate" && kvStatus(t, f, 1).GetMode() == "events"
	})
	// Routing by cache still works for both: the same prompt goes back
	// where it went, with its cached tokens predicted.
	for _, seed := range []uint32{10, 20, 30, 40} {
		ids := prompt(seed, 96)
		first, err := f.generate(context.Background(), t, &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
		if err != nil {
			t.Fatal(err)
		}
		again, err := f.generate(context.Background(), t, &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
		if err != nil {
			t.Fatal(err)
		}
		if again.complete.GetWorker() != first.complete.GetWorker() || again.complete.GetUsage().GetCachedTokens() < 80 {
			t.Fatalf("repeat of prompt %d went to %s with %d cached tokens, first to %s",
				seed, again.complete.GetWorker(), again.complete.GetUsage().GetCachedTokens(), first.complete.GetWorker())
		}
	}
	if st := kvStatus(t, f, 0); st.GetFailures() != 1 {
		t.Fatalf("worker 0's stream failed %d times; UNIMPLEMENTED should end it after one", st.GetFailures())
	}
}

// replica is another router in front of f's engines, built as f's was.
type replica struct {
	g      *router.Router
	router kvgatev1.RouterClient
	admin  kvgatev1.AdminClient
}

func startReplica(t *testing.T, f *fleet, edit func(*router.Config)) *replica {
	t.Helper()
	cfg := router.DefaultConfig()
	cfg.Policy = "cache_aware"
	cfg.Options.CacheAware.SpeculativeTTL = 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.LoadPollInterval = 50 * time.Millisecond
	cfg.Health = workers.HealthConfig{Interval: time.Hour, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1}
	cfg.TokenIDsOnly = true
	for i := range f.sims {
		cfg.WorkerURLs = append(cfg.WorkerURLs, f.workerURL(i))
	}
	if edit != nil {
		edit(&cfg)
	}
	g, err := router.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.Shutdown(ctx)
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &replica{g: g, router: kvgatev1.NewRouterClient(conn), admin: kvgatev1.NewAdminClient(conn)}
}

func TestKVEventMirrorOfAWarmEngine(t *testing.T) {
	// The first router warms the engines; a second one subscribes later,
	// when their caches are full of pages it never heard of. New pages
	// hanging off those are detached in its view: they must match nothing,
	// and once the old pages are gone its view is exact.
	f := eventFleet(t, "sglang", 2, nil)
	waitMode(t, f.admin, "events")
	traffic(t, f.router, 5, 60)
	late := startReplica(t, f, nil)
	waitMode(t, late.admin, "events")
	traffic(t, late.router, 5, 60) // the same prompts: their prefixes are cached
	lateCA := cacheAware(t, late.g)
	confirmedSubset(t, lateCA, f)
	evictAll(t, f, 700_000)
	waitExact(t, lateCA, f)
}

func TestReplicasAgreeOnConversations(t *testing.T) {
	// Two routers in front of the same engines, each turn of a conversation
	// sent to the other router than the turn before: the conversation stays
	// on the worker its first turn went to, because both routers mirror the
	// engines' caches.
	f := startFleet(t, fleetOptions{workers: 4, policy: "cache_aware", sim: bigVocab,
		options: func(o *policy.Options) { o.CacheAware.SpeculativeTTL = 0 }})
	other := startReplica(t, f, nil)
	waitMode(t, f.admin, "events")
	waitMode(t, other.admin, "events")
	routers := []kvgatev1.RouterClient{f.router, other.router}
	admins := []kvgatev1.AdminClient{f.admin, other.admin}
	ctx := context.Background()
	for c := range 8 {
		history := prompt(uint32(10_000*(c+1)), 200)
		var home string
		cachedBefore := 0
		for turn := range 6 {
			r := turn % 2
			if turn > 0 {
				// Events take a moment to reach the router that did not
				// serve the last turn (a client thinks for longer): wait
				// until it sees the pages the engine cached, the last
				// turn's prompt and output but the last token.
				testutil.Eventually(t, "the other router to see the conversation", func() bool {
					e, err := admins[r].Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{
						Generate: &kvgatev1.GenerateRequest{InputIds: history}}})
					return err == nil && int(e.GetPredictedCachedTokens()) >= (cachedBefore-1)/16*16
				})
			}
			st, err := routers[r].Generate(ctx, &kvgatev1.GenerateRequest{InputIds: history,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(20)}})
			if err != nil {
				t.Fatal(err)
			}
			var out []uint32
			var worker string
			for {
				m, err := st.Recv()
				if err != nil {
					break
				}
				if ch := m.GetChunk(); ch != nil {
					out = append(out, ch.GetTokenIds()...)
				}
				if done := m.GetComplete(); done != nil {
					worker = done.GetWorker()
				}
			}
			if turn == 0 {
				home = worker
			} else if worker != home {
				t.Fatalf("conversation %d turn %d (router %d) went to %s, its earlier turns to %s", c, turn, r, worker, home)
			}
			history = append(history, out...)
			cachedBefore = len(history)
			history = append(history, prompt(uint32(10_000*(c+1)+100*(turn+1)), 30)...)
		}
	}
}

func TestRemovedWorkerLeavesNoTraceInTheView(t *testing.T) {
	// Events keep arriving while a worker is removed; none of them may bring
	// it back into the tree once the policy has forgotten it.
	f := eventFleet(t, "sglang", 3, nil)
	waitMode(t, f.admin, "events")
	ca := cacheAware(t, f.g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		traffic(t, f.router, 9, 120)
	}()
	removed := f.workerURL(0)
	testutil.Eventually(t, "traffic under way on "+removed, func() bool { return f.sims[0].Engine().Stats().Requests > 0 })
	if _, err := f.admin.RemoveWorker(context.Background(), &kvgatev1.RemoveWorkerRequest{Address: removed, DrainTimeoutSecs: 5}); err != nil {
		t.Fatal(err)
	}
	<-done
	evictAll(t, f, 600_000) // the removed engine keeps publishing; nobody listens
	if n, ok := ca.TreeStats().TenantTokens[removed]; ok {
		t.Fatalf("the removed worker holds %d tokens in the tree", n)
	}
	if got := ca.Holdings(removed, false); len(got) != 0 {
		t.Fatalf("the removed worker holds %d pages", len(got))
	}
}

func TestKVEventMetrics(t *testing.T) {
	f := eventFleet(t, "sglang", 2, nil)
	waitMode(t, f.admin, "events")
	traffic(t, f.router, 11, 40)
	waitExact(t, cacheAware(t, f.g), f)
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" {
					name += "{" + l.GetValue() + "}"
				}
			}
			got[name] += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	for name, min := range map[string]float64{
		"kvgate_kv_events_applied_total{stored}": 1,
		"kvgate_worker_kv_events":                2, // both workers on events
		"kvgate_kv_event_lag_seconds":            1,
		"kvgate_cache_speculative_expired_total": 0,
	} {
		if v, ok := got[name]; !ok || v < min {
			t.Errorf("%s = %v (exported: %v), want at least %v", name, v, ok, min)
		}
	}
}

func TestKVEventsOfAnotherBlockSizeAreRefusedLoudly(t *testing.T) {
	// An engine whose blocks are 32 tokens behind a router told to use
	// 16-token pages (--block-size 16, as for a vLLM engine that does not
	// report its block size) must not be matched page by page: the worker
	// is shown approximate, with the reason.
	f := startFleet(t, fleetOptions{protocol: "vllm", workers: 1, policy: "cache_aware", sim: func(i int, c *sim.Config) {
		bigVocab(i, c)
		c.PageSize = 32
	}, options: func(o *policy.Options) { o.CacheAware.BlockSize = 16 },
		config: func(c *router.Config) { c.LearnBlockSize = false }})
	// The engine's events for the request must reach a stream already open:
	// one opened after them would see nothing to refuse.
	waitMode(t, f.admin, "events")
	if _, err := f.generate(context.Background(), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 100),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the worker shown approximate, with the reason", func() bool {
		st := kvStatus(t, f, 0)
		return st.GetMode() == "approximate" && strings.Contains(st.GetLastError(), "32 tokens")
	})
	if got := cacheAware(t, f.g).Holdings(f.workerURL(0), true); len(got) != 0 {
		t.Fatalf("%d pages confirmed from 32-token blocks in a 16-token tree", len(got))
	}
}

// TestVLLMBlockSizeBecomesTheBlockTrackersBlock: vllm_cache_aware's block
// table takes the engine's reported block size as cache_aware's tree does,
// unless --vllm-block-size was given: left at 16 in front of an engine of
// 32-token blocks, it would refuse the engine's events and count two of its
// blocks per engine block.
func TestVLLMBlockSizeBecomesTheBlockTrackersBlock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		learn  bool
		mode   string // the worker's KV event mode after a request
		blocks int    // blocks the table holds for its 100-token prompt (-1: not checked)
		page   int    // the model's page size in ListModels
	}{
		{"learned: the engine's 32-token blocks", true, "events", 3, 32},
		{"--vllm-block-size 16 given: refused", false, "approximate", -1, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: "vllm", workers: 1, policy: "vllm_cache_aware", sim: func(i int, c *sim.Config) {
				bigVocab(i, c)
				c.PageSize = 32
			}, config: func(c *router.Config) { c.LearnVllmBlockSize = tc.learn }})
			waitMode(t, f.admin, "events")
			if _, err := f.generate(context.Background(), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 100),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the worker in mode "+tc.mode, func() bool { return kvStatus(t, f, 0).GetMode() == tc.mode })
			p, ok := f.g.Policy.(*policy.VllmCacheAware)
			if !ok {
				t.Fatalf("policy is %T, want vllm_cache_aware", f.g.Policy)
			}
			if got := p.IndexStats().Blocks; tc.blocks >= 0 && got != tc.blocks {
				t.Fatalf("the block table holds %d blocks for a 100-token prompt, want %d", got, tc.blocks)
			}
			// The model shows the block size the tracker matches by, not
			// the tree's (which the router learns as 32 in both rows).
			ms, err := f.admin.ListModels(context.Background(), &kvgatev1.ListModelsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(ms.GetModels()) != 1 || ms.GetModels()[0].GetPageSize() != uint32(tc.page) {
				t.Fatalf("models %v, want one paged by %d", ms.GetModels(), tc.page)
			}
		})
	}
}

// TestVLLMBlockSizeBecomesTheTreesPage: a vLLM engine reports its block size
// (GetServerInfo block_size), so a router left to learn it pages its tree
// the same way, and the engine's 32-token blocks are confirmed as pages.
func TestVLLMBlockSizeBecomesTheTreesPage(t *testing.T) {
	f := startFleet(t, fleetOptions{protocol: "vllm", workers: 1, policy: "cache_aware", sim: func(i int, c *sim.Config) {
		bigVocab(i, c)
		c.PageSize = 32
	}})
	waitMode(t, f.admin, "events")
	if _, err := f.generate(context.Background(), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 100),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the engine's 32-token blocks confirmed in the tree", func() bool {
		return len(cacheAware(t, f.g).Holdings(f.workerURL(0), true)) == 3 // 100 prompt tokens: 3 whole blocks
	})
	if st := kvStatus(t, f, 0); st.GetMode() != "events" {
		t.Errorf("mode %q (%s), want events", st.GetMode(), st.GetLastError())
	}
}
