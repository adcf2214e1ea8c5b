package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/metricsdoc"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// notRouterMetrics are the prefixes of the Go runtime's and the process's
// collectors, which /metrics carries beside the router's own and
// docs/metrics.md does not list.
var notRouterMetrics = []string{"go_", "process_"}

func metricsDoc(t *testing.T) *metricsdoc.Doc {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	d, err := metricsdoc.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// scrape reads f's /metrics over HTTP, served by the handler `kvgate serve`
// mounts on its Prometheus listener.
func scrape(t *testing.T, f *fleet) map[string]*metricsdoc.Family {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(f.srv.Metrics().Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	fams, err := metricsdoc.ParseExposition(string(body))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TestMetricsReferenceMatchesTheRouter drives traffic that moves every
// metric family through routers in front of simulated engines, scrapes each
// router's /metrics, and holds the union to docs/metrics.md both ways: every
// documented metric is exported (with the documented type and labels) and
// has moved, and every exported kvgate_ metric is documented. Some metrics
// exist only in some configurations (prefill/decode, a tokenizer, a tree
// policy, a rate limit), hence several routers.
func TestMetricsReferenceMatchesTheRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("drives several fleets through faults")
	}
	doc := metricsDoc(t)
	scenarios := []struct {
		name string
		run  func(t *testing.T) *fleet
	}{
		{"cache_aware with KV events and faults", eventsAndFaults},
		{"approximate cache predictions", approximatePredictions},
		{"prefill/decode", disaggregated},
		{"text, chat and admission", textAndAdmission},
		{"late binding", lateBinding},
		{"retry budget", retryBudget},
		{"an engine without Embed", engineWithoutEmbed},
		{"a long prompt", learnedPrefillRate},
	}
	exported := map[string]*metricsdoc.Family{} // the union, every series kept
	for _, sc := range scenarios {
		ok := t.Run(sc.name, func(t *testing.T) {
			f := sc.run(t)
			for name, fam := range scrape(t, f) {
				if prev, ok := exported[name]; ok {
					if prev.Type != fam.Type {
						t.Errorf("%s is a %s here and a %s in an earlier scenario", name, fam.Type, prev.Type)
					}
					prev.Series = append(prev.Series, fam.Series...)
					continue
				}
				exported[name] = fam
			}
		})
		if !ok {
			t.Fatalf("scenario %q failed; the reference is not checked against partial traffic", sc.name)
		}
	}

	for _, name := range slices.Sorted(maps.Keys(doc.Metrics)) {
		m := doc.Metrics[name]
		fam, ok := exported[name]
		switch {
		case !ok || len(fam.Series) == 0:
			t.Errorf("docs/metrics.md:%d documents %s, which no router exported after the traffic", m.Line, name)
			continue
		case fam.Type != m.Type:
			t.Errorf("docs/metrics.md:%d documents %s as a %s; it is exported as a %s", m.Line, name, m.Type, fam.Type)
		case !fam.Moved():
			t.Errorf("%s never moved: the traffic does not cover it", name)
		}
		for _, s := range fam.Series {
			got := slices.Sorted(maps.Keys(s.Labels))
			got = slices.DeleteFunc(got, func(l string) bool { return l == "le" && strings.HasSuffix(s.Name, "_bucket") })
			if !slices.Equal(got, m.Labels) {
				t.Errorf("docs/metrics.md:%d documents %s with labels %v; a series has %v (%v)", m.Line, name, m.Labels, got, s.Labels)
				break
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(exported)) {
		if _, ok := doc.Metrics[name]; ok || slices.ContainsFunc(notRouterMetrics, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		t.Errorf("%s is exported but docs/metrics.md does not document it", name)
	}
}

// eventsAndFaults runs a cache_aware router with KV events in front of
// three engines and puts each through faults: duplicated and lost event
// batches, a subscriber the engine drops and cannot replay to (a resync), an
// engine flooding blocks on a rank it does not have (dropped), a
// failing engine (retries, an open breaker, an abort, speculation that
// expires unconfirmed), and an engine restart (a reset and a broken stream).
func eventsAndFaults(t *testing.T) *fleet {
	f := startFleet(t, fleetOptions{workers: 3, policy: "cache_aware",
		options: func(o *policy.Options) { o.CacheAware.SpeculativeTTL = 0 },
		sim: func(i int, c *sim.Config) {
			smallCaches(i, c)
			if i == 2 {
				c.KVEventHistory = 0 // nothing to replay: a resumed stream needs a resync
			}
		},
		config: func(c *router.Config) {
			fastRetries(c)
			c.Health.FailureThreshold = 100 // failures are seen by the request path
			c.Breaker.FailureThreshold = 1
		}})
	ctx := context.Background()
	waitMode(t, f.admin, "events")

	// A miss, then a hit; then traffic with shared prefixes.
	for range 2 {
		f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(5000, 64), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
	}
	traffic(t, f.router, 1, 40)

	// A client mistake: a token id beyond the vocabulary.
	if _, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: []uint32{1, 1 << 21}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("out-of-vocabulary prompt: %v, want INVALID_ARGUMENT", err)
	}

	// Duplicated batches from engine 0, lost ones from engine 1.
	f.sims[0].Engine().SetFaults(sim.Faults{KVEventDuplicateEvery: 2})
	f.sims[1].Engine().SetFaults(sim.Faults{KVEventDropEvery: 2})
	for round := 0; kvStatus(t, f, 0).GetDuplicates() == 0 || kvStatus(t, f, 1).GetGaps() == 0; round++ {
		if round == 20 {
			t.Fatal("20 rounds of traffic showed no duplicate from engine 0 or no gap from engine 1")
		}
		traffic(t, f.router, uint64(10+round), 20)
	}
	f.sims[0].Engine().SetFaults(sim.Faults{})
	f.sims[1].Engine().SetFaults(sim.Faults{})

	// Engine 2 keeps no history. Its batches are held back until its
	// subscriber's buffer overflows and the engine drops it; the router
	// resumes where it was, which the engine can no longer replay
	// (OUT_OF_RANGE), and starts again from scratch.
	testutil.Eventually(t, "a batch from engine 2", func() bool { return kvStatus(t, f, 2).GetBatches() > 0 })
	f.sims[2].Engine().SetFaults(sim.Faults{KVEventDelay: time.Minute})
	w, err := workers.Connect(ctx, f.workerURL(2), workers.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for round := 0; kvStatus(t, f, 2).GetResyncs() == 0; round++ {
		// The loop ends as soon as the resync shows; the bound is for a
		// loaded machine, where a slow engine packs more requests into each
		// batch and the subscriber's buffer takes more traffic to overflow.
		if round == 200 {
			t.Fatal("engine 2's subscriber was not resynchronized after 200 rounds of direct traffic")
		}
		direct(t, w, uint32(450_000+round*5_000), 100)
	}
	f.sims[2].Engine().SetFaults(sim.Faults{})

	// Engine 2 turns hostile: its batches also store blocks under parents
	// never stored, and the same on a rank it does not have, whose batches
	// the router drops.
	f.sims[2].Engine().SetFaults(sim.Faults{KVEventFloodBlocks: 4, KVEventFloodRanks: 2})
	// Its stream may be waiting out the backoff after the resync: traffic
	// goes on until the router has heard the flood.
	round := uint32(0)
	testutil.Eventually(t, "a block dropped for its rank", func() bool {
		round++
		direct(t, w, 600_000+(round%40)*5_000, 10)
		return counter(t, f, "kvgate_kv_event_blocks_dropped_total", "reason", "rank") > 0
	})
	f.sims[2].Engine().SetFaults(sim.Faults{})

	// Engine 1 fails every request: one the policy sends there is retried on
	// another engine, its attempt aborted, the breaker opens, and the
	// speculative pages of the decision expire unconfirmed.
	f.sims[1].Engine().SetFaults(sim.Faults{Unavailable: true})
	sent := false
	for i := range 200 {
		req := &kvgatev1.GenerateRequest{InputIds: prompt(uint32(700_000+1000*i), 48), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}}
		ex, err := f.admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: req}})
		if err != nil {
			t.Fatal(err)
		}
		if ex.GetWorker() != f.workerURL(1) {
			f.mustGenerate(t, req) // placed elsewhere: its pages move the choice next time
			continue
		}
		if r := f.mustGenerate(t, req); r.complete.Worker == f.workerURL(1) {
			t.Fatalf("served by the failing engine")
		}
		sent = true
		break
	}
	if !sent {
		t.Fatal("the policy never chose engine 1 in 200 fresh prompts")
	}
	testutil.Eventually(t, "the failed decision's speculation to expire", func() bool {
		return counter(t, f, "kvgate_cache_speculative_expired_total") > 0
	})

	// Engine 0 restarts: its event stream breaks, and the router sees the
	// numbering start again once it routes there.
	before := kvStatus(t, f, 0).GetLastSequenceNumber()
	f.sims[0].Kill()
	if err := f.sims[0].Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the router to resubscribe to engine 0", func() bool {
		st := kvStatus(t, f, 0)
		return st.GetFailures() > 0 && st.GetConnected()
	})
	if before < 4 {
		t.Fatalf("engine 0 had published %d batches; the restart might not be seen", before)
	}
	// Traffic straight to the restarted engine makes it publish from 0
	// again, whatever the policy would choose (right after a restart the
	// engine may still count as unhealthy, and the router sends it nothing).
	w0, err := workers.Connect(ctx, f.workerURL(0), workers.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Close()
	for round := 0; kvStatus(t, f, 0).GetResets() == 0; round++ {
		if round == 200 {
			t.Fatal("the router did not see engine 0's restart after 200 rounds of direct traffic")
		}
		// 400 ids a round (8 prompts 50 apart): 200 rounds stay inside
		// the engine's vocabulary of 2^20.
		direct(t, w0, uint32(300_000+round*400), 8)
	}
	return f
}

// direct sends n requests of unique 32-token prompts straight to an engine,
// bypassing the router, four at a time.
func direct(t *testing.T, w *workers.Worker, first uint32, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				st, err := w.Backend().Generate(context.Background(), &workers.GenerateRequest{RequestID: fmt.Sprint("direct-", first, "-", i),
					InputIDs: prompt(first+uint32(50*i), 32), Sampling: workers.Sampling{MaxNewTokens: u32(1)}})
				for err == nil {
					_, err = st.Recv()
				}
				if err != io.EOF {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("direct request: %v", err)
	}
}

// approximatePredictions runs cache_aware in front of one engine without KV
// events and makes its prediction exact, too low (the engine cached a prompt
// sent to it directly) and too high (the engine evicted).
func approximatePredictions(t *testing.T) *fleet {
	f := startFleet(t, fleetOptions{workers: 1, policy: "cache_aware", sim: func(i int, c *sim.Config) {
		smallCaches(i, c)
		c.KVEvents = false
	}})
	testutil.Eventually(t, "the worker approximate", func() bool { return kvStatus(t, f, 0).GetMode() == "approximate" })
	gen := func(ids []uint32) { // one request through the router
		f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
	}
	p := prompt(1000, 64)
	gen(p) // predicted 0, reported 0: exact

	w, err := workers.Connect(context.Background(), f.workerURL(0), workers.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	direct(t, w, 50_000, 1) // the engine caches prompt(50_000, 32) behind the router's back
	gen(prompt(50_000, 64)) // predicted 0, reported 32: under

	evictAll(t, f, 900_000)
	gen(p) // predicted 48 or more, reported 0: over
	for _, name := range []string{"kvgate_cache_prediction_exact_total", "kvgate_cache_prediction_underpredicted_total", "kvgate_cache_prediction_overpredicted_total"} {
		if n := counter(t, f, name); n != 1 {
			t.Errorf("%s = %v, want 1", name, n)
		}
	}
	return f
}

// disaggregated runs a prefill/decode router: requests that succeed (both
// legs, the KV handoff), then one whose prefill engines fail.
func disaggregated(t *testing.T) *fleet {
	// The engines decode speculatively, so their draft counts are reported.
	f := startFleet(t, fleetOptions{workers: 4, pd: true, sim: func(_ int, c *sim.Config) { c.SpecDraftTokens = 3 },
		config: func(c *router.Config) {
			c.PrefillPolicy, c.DecodePolicy = "cache_aware", "power_of_two"
			fastRetries(c)
		}})
	req := &kvgatev1.GenerateRequest{InputIds: prompt(10, 200), Stream: true,
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}}
	f.mustGenerate(t, req)
	f.mustGenerate(t, req)
	// The handoff is measured when the router has seen the prefill leg end
	// before the decode leg's first token; with engines that take no time
	// on a loaded machine, the two legs' streams can be read the other way
	// round, so send requests until one is measured (each is a real
	// handoff; a bounded number, so a metric that never moves still fails).
	for i := 0; i < 50; i++ {
		if fam := scrape(t, f)["kvgate_pd_kv_transfer_seconds"]; fam != nil && fam.Moved() {
			break
		}
		f.mustGenerate(t, req)
	}
	f.sims[0].Engine().SetFaults(sim.Faults{Unavailable: true})
	f.sims[1].Engine().SetFaults(sim.Faults{Unavailable: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.generate(ctx, t, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("both prefill engines failing: %v, want UNAVAILABLE", err)
	}
	return f
}

// textAndAdmission runs a router with a tokenizer and a per-key rate limit:
// the same text twice (an L0 hit), two chats sharing their first messages
// (an L1 hit), and a client over its rate. Each text request has a key of
// its own, so that only the last client meets the limit.
func textAndAdmission(t *testing.T) *fleet {
	f := startFleet(t, fleetOptions{workers: 1, text: true, config: func(c *router.Config) {
		c.Admission.RateLimitPerKey = 2
		c.Admission.RequestReadTimeout = 200 * time.Millisecond // a silent call, below
	}})
	keyed := func(key string) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		return metadata.AppendToOutgoingContext(ctx, "x-routing-key", key), cancel
	}
	for i := range 2 {
		ctx, cancel := keyed(fmt.Sprint("text-", i))
		r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Text: "the same prompt twice", SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
		cancel()
		if err != nil || r.complete == nil {
			t.Fatalf("text request %d: %v", i, err)
		}
	}
	for i, question := range []string{"What is a KV cache?", "What is a radix tree?"} {
		ctx, cancel := keyed(fmt.Sprint("chat-", i))
		r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{
			{Role: "system", Content: "You are a terse assistant. Answer in one sentence."},
			{Role: "user", Content: question}}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
		cancel()
		if err != nil || r.complete == nil {
			t.Fatalf("chat %d: %v", i, err)
		}
	}
	tctx, tcancel := keyed("tools")
	r, err := f.chat(tctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "Weather in Paris?"}},
		Tools: weatherTools(t), ToolChoice: &kvgatev1.ToolChoice{Function: "get_weather"}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(64)}})
	tcancel()
	if err != nil || len(r.complete.GetToolCalls()) != 1 {
		t.Fatalf("chat with a forced tool call: %v, %v", err, r.complete)
	}
	ectx, ecancel := keyed("embed")
	_, err = f.router.Embed(ectx, &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{Text: "an embedding"}, {InputIds: prompt(1, 4)}}})
	ecancel()
	if err != nil {
		t.Fatalf("embed: %v", err)
	}
	ctx, cancel := keyed("alice")
	defer cancel()
	for i := 0; err == nil; i++ {
		if i == 100 {
			t.Fatal("100 requests of one key in a row were all admitted under a limit of 2 a second")
		}
		_, err = f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the rate: %v, want RESOURCE_EXHAUSTED", err)
	}
	// A call that never sends its request, ended by the read timeout.
	sctx, scancel := keyed("silent")
	defer scancel()
	if err := silentCall(t, f, sctx, "/kvgate.v1.Router/Generate").RecvMsg(new(kvgatev1.GenerateResponse)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a silent call: %v, want DEADLINE_EXCEEDED", err)
	}
	testutil.Eventually(t, "the silent call to be counted", func() bool {
		return counter(t, f, "kvgate_client_timeouts_total", "bound", "request_read") == 1
	})
	return f
}

// lateBinding sends three requests at once to an engine of one slot: two
// wait in the router for it.
func lateBinding(t *testing.T) *fleet {
	f := startFleet(t, fleetOptions{workers: 1, sim: func(_ int, c *sim.Config) { c.MaxRunning, c.TimeScale = 1, 0.2 }})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := f.generate(testutil.Context(t, 10*time.Second), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}}); err != nil {
				t.Errorf("a request behind a full engine: %v", err)
			}
		})
	}
	wg.Wait()
	return f
}

// retryBudget runs a router that may not retry at all, in front of a failing
// engine and a healthy one: the retry is refused.
func retryBudget(t *testing.T) *fleet {
	f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin",
		config: func(c *router.Config) {
			fastRetries(c)
			c.Reliability.Retry.BudgetPercent, c.Reliability.Retry.MinRetryConcurrency = 0, 0
			c.Reliability.Retry.RetriesPerWorker = 0
		},
		sim: func(i int, c *sim.Config) { c.Faults.Unavailable = i == 0 }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.generate(ctx, t, longReq); status.Code(err) != codes.Unavailable { // round robin starts at worker 0
		t.Fatalf("a failure with no retry budget: %v, want UNAVAILABLE", err)
	}
	return f
}

// TestDashboardReadsOnlyDocumentedMetrics parses the Grafana dashboard and
// checks every query's metric names against docs/metrics.md (a histogram's
// _bucket, _sum and _count series count as the histogram), and the shape
// Grafana needs to import it with a Prometheus data source of the user's
// choosing.
func TestDashboardReadsOnlyDocumentedMetrics(t *testing.T) {
	doc := metricsDoc(t)
	b, err := os.ReadFile("../deploy/grafana/kvgate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name, Type string
				Query      any
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int                       `json:"id"`
			Title      string                    `json:"title"`
			Type       string                    `json:"type"`
			Datasource json.RawMessage           `json:"datasource"`
			GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
			Targets    []struct {
				Expr       string          `json:"expr"`
				Datasource json.RawMessage `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || dash.Title == "" || dash.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and the schema of Grafana 10 or later", dash.UID, dash.Title, dash.SchemaVersion)
	}
	hasDatasourceVar := false
	for _, v := range dash.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDatasourceVar = true
		}
	}
	if !hasDatasourceVar {
		t.Error(`no template variable "datasource" of type datasource for prometheus`)
	}
	wantDS := `{"type":"prometheus","uid":"${datasource}"}`
	ids, used := map[int]bool{}, map[string]bool{}
	exprs := 0
	for _, p := range dash.Panels {
		if ids[p.ID] || p.GridPos == nil || p.Title == "" {
			t.Errorf("panel %d %q: duplicate id, or no gridPos or title", p.ID, p.Title)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if compact(t, p.Datasource) != wantDS {
			t.Errorf("panel %q: datasource %s, want %s", p.Title, p.Datasource, wantDS)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			if tg.Datasource != nil && compact(t, tg.Datasource) != wantDS {
				t.Errorf("panel %q: a target's datasource is %s, want %s", p.Title, tg.Datasource, wantDS)
			}
			names, err := metricsdoc.MetricNames(tg.Expr)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
			if len(names) == 0 {
				t.Errorf("panel %q: %q reads no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				base, ok := doc.BaseName(n)
				if !ok {
					t.Errorf("panel %q reads %s, which docs/metrics.md does not document: %s", p.Title, n, tg.Expr)
				}
				used[base] = true
			}
		}
	}
	if exprs < 20 {
		t.Errorf("the dashboard has %d queries; it is meant to cover the reference's groups", exprs)
	}
	// SMG's documented metrics all have a panel.
	for _, n := range []string{"kvgate_router_cache_hits_total", "kvgate_router_cache_misses_total", "kvgate_router_cache_tree_size",
		"kvgate_worker_requests_active", "kvgate_worker_selection_policy_branch_total", "kvgate_request_latency_seconds", "kvgate_worker_load"} {
		if !used[n] {
			t.Errorf("no dashboard panel reads SMG's metric %s", n)
		}
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestMetricsReferenceQueriesReadDocumentedMetrics checks the PromQL on
// docs/metrics.md itself: every query reads documented metrics only, and the
// SMG's documented queries are there.
func TestMetricsReferenceQueriesReadDocumentedMetrics(t *testing.T) {
	doc := metricsDoc(t)
	smg := 0
	for _, b := range doc.Blocks {
		names, err := metricsdoc.MetricNames(b.Text)
		if err != nil || len(names) == 0 {
			t.Errorf("docs/metrics.md:%d: %v, names %v", b.Line, err, names)
		}
		for _, n := range names {
			if _, ok := doc.BaseName(n); !ok {
				t.Errorf("docs/metrics.md:%d reads %s, which it does not document", b.Line, n)
			}
		}
		if b.Info == "promql smg" {
			smg++
		}
	}
	if smg != 2 {
		t.Errorf("%d of SMG's queries (```promql smg), want SMG's 2", smg)
	}
}

// TestMarkdownTablesRender checks that the tables of README.md and the docs
// it links render as tables: every row has its header's cell count.
func TestMarkdownTablesRender(t *testing.T) {
	for _, path := range []string{"../README.md", "../docs/metrics.md", "../docs/flags.md", "../docs/deployment.md", "../docs/api.md", "../docs/development.md", "../docs/fleets.md", "../docs/tracing.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range metricsdoc.TableProblems(string(b)) {
			t.Errorf("%s: %s", path, p)
		}
	}
}

// engineWithoutEmbed sends Embed to a fleet where one engine lacks it.
func engineWithoutEmbed(t *testing.T) *fleet {
	f := startFleet(t, fleetOptions{workers: 2, policy: "round_robin",
		sim: func(i int, c *sim.Config) {
			if i == 0 {
				c.EmbeddingDim = 0
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.router.Embed(ctx, &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{InputIds: prompt(1, 8)}}}); err != nil {
		t.Fatalf("Embed with one engine that has it: %v", err)
	}
	return f
}

// learnedPrefillRate sends one prompt long enough to teach its engine the
// prefill rate (workers learn it from prompts of 1024 uncached tokens or
// more, and the other scenarios' are shorter):
// kvgate_worker_prefill_tokens_per_second has no series until then. Its
// tokens after the first teach the decode step.
func learnedPrefillRate(t *testing.T) *fleet {
	f := startFleet(t, fleetOptions{workers: 1})
	f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 2048),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
	return f
}
