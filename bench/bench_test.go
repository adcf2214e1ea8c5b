package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"github.com/kvgate/kvgate/internal/testutil"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func tinyConfig(name string) WorkloadConfig {
	c := DefaultWorkloadConfig()
	c.Name = name
	c.Seed = 7
	c.Groups, c.PromptsPerGroup, c.SystemTokens, c.QuestionTokens, c.OutputTokens = 4, 5, 64, 8, 4
	c.Users, c.Rounds, c.MultiturnSystemTokens, c.AnswerTokens = 3, 4, 40, 5
	return c
}

func TestWorkloadShapesAndDeterminism(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 500, "input_length": 1030, "output_length": 0, "hash_ids": [1, 3]}

{"timestamp": 2000, "input_length": 100, "output_length": 9, "hash_ids": [4]}
`
	tests := []struct {
		name  string
		cfg   func() WorkloadConfig
		check func(t *testing.T, w *Workload)
	}{
		{"shared-prefix", func() WorkloadConfig { return tinyConfig(SharedPrefix) }, func(t *testing.T, w *Workload) {
			if len(w.Requests) != 20 || w.Size() != 20 {
				t.Fatalf("%d requests, want 20", len(w.Requests))
			}
			groups := map[string]int{}
			for _, r := range w.Requests {
				if len(r.Prompt) != 72 || r.Output != 4 || r.At != 0 {
					t.Fatalf("prompt %d tokens, output %d, at %v; want 72, 4, 0", len(r.Prompt), r.Output, r.At)
				}
				groups[key(r.Prompt[:64])]++
			}
			if len(groups) != 4 {
				t.Fatalf("%d distinct system prompts, want 4", len(groups))
			}
			for _, n := range groups {
				if n != 5 {
					t.Fatalf("group sizes %v, want 5 each", groups)
				}
			}
			// Interleaved: the first five requests are not all one group.
			first := key(w.Requests[0].Prompt[:64])
			same := 0
			for _, r := range w.Requests[:5] {
				if key(r.Prompt[:64]) == first {
					same++
				}
			}
			if same == 5 {
				t.Error("groups are not interleaved")
			}
		}},
		{"shared-prefix qps and cap", func() WorkloadConfig {
			c := tinyConfig(SharedPrefix)
			c.QPS, c.Requests = 100, 7
			return c
		}, func(t *testing.T, w *Workload) {
			if len(w.Requests) != 7 {
				t.Fatalf("%d requests, want 7", len(w.Requests))
			}
			for i := 1; i < len(w.Requests); i++ {
				if w.Requests[i].At <= w.Requests[i-1].At {
					t.Fatalf("arrivals not increasing: %v then %v", w.Requests[i-1].At, w.Requests[i].At)
				}
			}
		}},
		{"multiturn", func() WorkloadConfig { return tinyConfig(Multiturn) }, func(t *testing.T, w *Workload) {
			if len(w.Conversations) != 3 || w.Size() != 12 {
				t.Fatalf("%d conversations, %d requests; want 3, 12", len(w.Conversations), w.Size())
			}
			for _, c := range w.Conversations {
				if len(c.System) != 40 || len(c.Questions) != 4 || len(c.Questions[0]) != 8 || c.Output != 5 {
					t.Fatalf("conversation shape: system %d, %d rounds, question %d, output %d", len(c.System), len(c.Questions), len(c.Questions[0]), c.Output)
				}
				if !slices.Equal(c.System, w.Conversations[0].System) {
					t.Fatal("system prompt not shared")
				}
			}
			if slices.Equal(w.Conversations[0].Questions[0], w.Conversations[1].Questions[0]) {
				t.Error("two users asked the same question")
			}
		}},
		{"multiturn cap", func() WorkloadConfig {
			c := tinyConfig(Multiturn)
			c.Requests = 5
			return c
		}, func(t *testing.T, w *Workload) {
			if w.Size() != 5 {
				t.Fatalf("Size() = %d, want 5", w.Size())
			}
		}},
		{"trace", func() WorkloadConfig { return WorkloadConfig{Name: Trace} }, func(t *testing.T, w *Workload) {
			if len(w.Requests) != 3 {
				t.Fatalf("%d requests, want 3", len(w.Requests))
			}
			a, b, c := w.Requests[0], w.Requests[1], w.Requests[2]
			if len(a.Prompt) != 600 || len(b.Prompt) != 1030 || len(c.Prompt) != 100 {
				t.Fatalf("prompt lengths %d %d %d, want 600 1030 100", len(a.Prompt), len(b.Prompt), len(c.Prompt))
			}
			if a.Output != 3 || b.Output != 1 || c.Output != 9 {
				t.Fatalf("outputs %d %d %d, want 3 1 9", a.Output, b.Output, c.Output)
			}
			if !slices.Equal(a.Prompt[:512], b.Prompt[:512]) || slices.Equal(a.Prompt[512:600], b.Prompt[512:600]) {
				t.Fatal("hash id 1 must give the same block, ids 2 and 3 different ones")
			}
			if b.At != 250*time.Millisecond || c.At != time.Second { // speed 2
				t.Fatalf("arrivals %v %v, want 250ms 1s", b.At, c.At)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gen := func() *Workload {
				cfg := tt.cfg()
				if cfg.Name == Trace {
					w, err := ReadTrace(strings.NewReader(trace), TraceConfig{Speed: 2})
					if err != nil {
						t.Fatal(err)
					}
					return w
				}
				w, err := Generate(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			w1, w2 := gen(), gen()
			tt.check(t, w1)
			if !equalWorkloads(w1, w2) {
				t.Fatal("the same config gave two different workloads")
			}
			for _, r := range w1.Requests {
				for _, id := range r.Prompt {
					if id >= maxTokenID {
						t.Fatalf("token id %d out of range", id)
					}
				}
			}
		})
	}
	a, _ := Generate(tinyConfig(SharedPrefix))
	other := tinyConfig(SharedPrefix)
	other.Seed++
	b, _ := Generate(other)
	if equalWorkloads(a, b) {
		t.Error("different seeds gave the same workload")
	}
}

func key(ids []uint32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(string(rune(id % 50000)))
	}
	return b.String()
}

func equalWorkloads(a, b *Workload) bool {
	if len(a.Requests) != len(b.Requests) || len(a.Conversations) != len(b.Conversations) {
		return false
	}
	for i := range a.Requests {
		x, y := a.Requests[i], b.Requests[i]
		if x.At != y.At || x.Output != y.Output || !slices.Equal(x.Prompt, y.Prompt) {
			return false
		}
	}
	for i := range a.Conversations {
		x, y := a.Conversations[i], b.Conversations[i]
		if x.At != y.At || !slices.Equal(x.System, y.System) || !slices.EqualFunc(x.Questions, y.Questions, slices.Equal) {
			return false
		}
	}
	return true
}

func TestOracle(t *testing.T) {
	var o Oracle
	p1 := testutil.Tokens(0, 40)                                       // nothing cached yet: 0
	p2 := append(testutil.Tokens(0, 35), testutil.Tokens(1000, 10)...) // shares 35 with p1 -> 32 page-aligned
	p3 := testutil.Tokens(500, 20)                                     // new: 0
	p4 := append(testutil.Tokens(0, 40), testutil.Tokens(2000, 8)...)  // shares 40 with p1 -> 32
	p5 := append(append(testutil.Tokens(0, 40), 7, 8, 9), 1, 2)        // p1 + part of its output: 45 tokens, two whole pages
	o.Observe(p1, []uint32{7, 8, 9, 10, 11, 12, 13, 14, 15})
	o.Observe(p2, nil)
	o.Observe(p3, nil)
	o.Observe(p4, nil)
	got := o.Match(p5)
	total := 40 + 45 + 20 + 48 + len(p5)
	cached := 0 + 32 + 0 + 32 + got
	if want := float64(cached) / float64(total); math.Abs(o.Rate()-want) > 1e-12 {
		t.Fatalf("Rate() = %v, want %v", o.Rate(), want)
	}
	if got != 32 {
		t.Fatalf("Match(p5) = %d, want 32 (45 tokens hold two whole pages)", got)
	}
	var o2 Oracle
	o2.Observe(testutil.Tokens(0, 40), testutil.Tokens(100, 9))
	if m := o2.Match(append(testutil.Tokens(0, 40), testutil.Tokens(100, 8)...)); m != 48 {
		t.Fatalf("prompt + output but its last token: matched %d, want 48", m)
	}
}

func TestSummarizeAndCoV(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[99-i] = float64(i + 1) // 1..100, unsorted
	}
	s := Summarize(xs)
	if s.P50 != 50 || s.P90 != 90 || s.P99 != 99 || s.Mean != 50.5 {
		t.Fatalf("Summarize(1..100) = %+v", s)
	}
	if got := Summarize(nil); got != (Summary{}) {
		t.Fatalf("Summarize(nil) = %+v", got)
	}
	if got := Percentile([]float64{3}, 99); got != 3 {
		t.Fatalf("Percentile of one value = %v", got)
	}
	for _, tt := range []struct {
		counts []int
		want   float64
	}{
		{[]int{5, 5, 5, 5}, 0},
		{[]int{2, 4, 4, 4, 5, 5, 7, 9}, 2.0 / 5},
		{[]int{10, 0}, 1},
		{[]int{0, 0}, 0},
		{nil, 0},
	} {
		if got := CoV(tt.counts); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("CoV(%v) = %v, want %v", tt.counts, got, tt.want)
		}
	}
}

func sampleReport() *Report {
	pe, same := 0.98, 0.75
	return &Report{Workload: SharedPrefix, Runs: []PolicyRun{
		{Policy: "cache_aware", Routers: 1, TTFT: Summary{12, 20, 40, 15}, CacheHitRate: 0.9, OracleHitRate: 0.94, PredictionExact: &pe, SameWorkerRate: &same, Requests: 10, TTFTs: []float64{0.5, 5, 12, 40}},
		{Policy: "round_robin", Routers: 1, TTFT: Summary{110, 120, 500, 130}, CacheHitRate: 0.4, OracleHitRate: 0.94, Requests: 10, Errors: 1, TTFTs: []float64{100, 110, 2000}},
	}}
}

// replicatedReport is sampleReport's cache_aware with one router and two.
func replicatedReport() *Report {
	rep := sampleReport()
	two := rep.Runs[0]
	two.Routers = 2
	same := 0.5
	two.SameWorkerRate = &same
	rep.Runs[1] = two
	return rep
}

// TestWriteTable pins the table's layout and its legend: with one router
// per run, the columns of before replicas (BENCHMARKS.md's tables keep
// their shape); with replicas, the routers and same-worker columns, each
// with its line in the legend.
func TestWriteTable(t *testing.T) {
	tests := []struct {
		name string
		rep  *Report
		want string
	}{
		{"one router", sampleReport(), `workload: shared-prefix
       policy  ttft p50    p90    p99   mean  itl p50   p99  e2e p50  p99  req/s  out tok/s    hit  oracle  pred exact  load cov  reqs  errors
  cache_aware      12.0   20.0   40.0   15.0     0.00  0.00        0    0    0.0          0  0.900   0.940       0.980     0.000    10       0
  round_robin     110.0  120.0  500.0  130.0     0.00  0.00        0    0    0.0          0  0.400   0.940           -     0.000    10       1
columns:
  policy        the routing policy (kvgate:P and smg:P: that router in a process of its own)
  ttft          time to first token, ms: p50, p90, p99 and the mean
  itl           inter-token latency, the gap between streamed tokens, ms: p50 and p99
  e2e           request sent to its last token, ms: p50 and p99
  req/s         successful requests per second, from the first request to the last answer; out tok/s the same for output tokens
  hit           cached prompt tokens / prompt tokens, as the answers reported them (successful requests)
  oracle        the hit rate one cache of unlimited size, shared by every engine, would reach on the same requests
  pred exact    share of requests whose cached tokens the router predicted exactly before sending (- : the policy predicts none)
  load cov      coefficient of variation (standard deviation / mean) of requests per worker: 0 is perfectly even
  reqs, errors  requests sent, and those that failed
`},
		{"replicas", replicatedReport(), `workload: shared-prefix
       policy  routers  ttft p50   p90   p99  mean  itl p50   p99  e2e p50  p99  req/s  out tok/s    hit  oracle  pred exact  load cov  same worker  reqs  errors
  cache_aware        1      12.0  20.0  40.0  15.0     0.00  0.00        0    0    0.0          0  0.900   0.940       0.980     0.000        0.750    10       0
  cache_aware        2      12.0  20.0  40.0  15.0     0.00  0.00        0    0    0.0          0  0.900   0.940       0.980     0.000        0.500    10       0
columns:
  policy        the routing policy (kvgate:P and smg:P: that router in a process of its own)
  routers       router replicas in front of the same engines, each request sent to one at random
  ttft          time to first token, ms: p50, p90, p99 and the mean
  itl           inter-token latency, the gap between streamed tokens, ms: p50 and p99
  e2e           request sent to its last token, ms: p50 and p99
  req/s         successful requests per second, from the first request to the last answer; out tok/s the same for output tokens
  hit           cached prompt tokens / prompt tokens, as the answers reported them (successful requests)
  oracle        the hit rate one cache of unlimited size, shared by every engine, would reach on the same requests
  pred exact    share of requests whose cached tokens the router predicted exactly before sending (- : the policy predicts none)
  load cov      coefficient of variation (standard deviation / mean) of requests per worker: 0 is perfectly even
  same worker   turns after a conversation's first that went where its previous turn went
  reqs, errors  requests sent, and those that failed
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.rep.WriteTable(&buf); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tt.want {
				t.Errorf("table:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestJSONFieldNames(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if keys := sortedKeys(got); !slices.Equal(keys, []string{"runs", "workload"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	runs := got["runs"].([]any)
	run := runs[0].(map[string]any)
	want := []string{"cache_hit_rate", "e2e_ms", "errors", "itl_ms", "load_cov", "oracle_hit_rate", "output_tokens_per_s",
		"policy", "prediction_exact", "requests", "requests_per_s", "routers", "same_worker_rate", "ttft_ms", "ttft_sent_ms"}
	if keys := sortedKeys(run); !slices.Equal(keys, want) {
		t.Fatalf("run keys %v, want %v", keys, want)
	}
	for _, k := range []string{"ttft_ms", "itl_ms", "e2e_ms"} {
		if keys := sortedKeys(run[k].(map[string]any)); !slices.Equal(keys, []string{"mean", "p50", "p90", "p99"}) {
			t.Fatalf("%s keys %v", k, keys)
		}
	}
	if keys := sortedKeys(run["ttft_sent_ms"].(map[string]any)); !slices.Equal(keys, []string{"p50", "p90", "p99"}) {
		t.Fatalf("ttft_sent_ms keys %v", keys)
	}
	if v, ok := runs[1].(map[string]any)["prediction_exact"]; !ok || v != nil {
		t.Fatalf("cache-blind prediction_exact = %v, want null", v)
	}
	if v, ok := runs[1].(map[string]any)["same_worker_rate"]; !ok || v != nil {
		t.Fatalf("same_worker_rate without conversations = %v, want null", v)
	}
	if run["routers"] != 1.0 || run["same_worker_rate"] != 0.75 {
		t.Fatalf("routers %v, same_worker_rate %v; want 1, 0.75", run["routers"], run["same_worker_rate"])
	}
}

func sortedKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestPlotIsWellFormedSVG(t *testing.T) {
	for _, rep := range []*Report{sampleReport(), replicatedReport(), {Workload: "empty"}} {
		var buf bytes.Buffer
		if err := rep.WritePlot(&buf, `8 engines <"sim"> & co`); err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(&buf)
		root := ""
		polylines := 0
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", rep.Workload, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				if root == "" {
					root = se.Name.Local
				}
				if se.Name.Local == "polyline" {
					polylines++
				}
			}
		}
		if root != "svg" || polylines != len(rep.Runs) {
			t.Fatalf("%s: root %q, %d curves; want svg, %d", rep.Workload, root, polylines, len(rep.Runs))
		}
	}
	// Runs that differ only in their replica count are told apart.
	var buf bytes.Buffer
	if err := replicatedReport().WritePlot(&buf, ""); err != nil {
		t.Fatal(err)
	}
	for _, label := range []string{"cache_aware ×1", "cache_aware ×2"} {
		if !strings.Contains(buf.String(), label) {
			t.Errorf("chart of replicas lacks the label %q", label)
		}
	}
}

// TestEndToEnd runs a tiny shared-prefix bench through real routers and
// simulated engines: cache_aware must find more cached tokens than
// round_robin.
func TestEndToEnd(t *testing.T) {
	wc := tinyConfig(SharedPrefix)
	wc.SystemTokens, wc.QuestionTokens = 256, 32
	wl, err := Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.TimeScale = 0
	cfg := Config{Policies: []string{"cache_aware", "round_robin", "cache_aware:smallest_tree"}, Workers: 2, Sim: sc, Concurrency: 1, Seed: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg, wl)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3", len(rep.Runs))
	}
	ca, rr := rep.Runs[0], rep.Runs[1]
	for _, r := range rep.Runs {
		if r.Requests != 20 || r.Errors != 0 {
			t.Fatalf("%s: %d requests, %d errors; want 20, 0", r.Policy, r.Requests, r.Errors)
		}
		if r.OracleHitRate <= 0 || r.CacheHitRate > r.OracleHitRate+1e-9 {
			t.Errorf("%s: hit rate %v, oracle %v", r.Policy, r.CacheHitRate, r.OracleHitRate)
		}
	}
	if ca.CacheHitRate <= rr.CacheHitRate {
		t.Errorf("cache_aware hit rate %v, round_robin %v: cache_aware should be higher", ca.CacheHitRate, rr.CacheHitRate)
	}
	if ca.PredictionExact == nil || *ca.PredictionExact < 0.9 {
		t.Errorf("cache_aware prediction exactness %v, want >= 0.9 at concurrency 1", ca.PredictionExact)
	}
	if rr.PredictionExact != nil {
		t.Errorf("round_robin prediction exactness %v, want null", *rr.PredictionExact)
	}
	if rr.LoadCoV != 0 {
		t.Errorf("round_robin load CoV %v, want 0 (20 requests on 2 workers)", rr.LoadCoV)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "cache_aware:smallest_tree") {
		t.Fatalf("table: %v\n%s", err, table.String())
	}
}

func TestMultiturnEndToEnd(t *testing.T) {
	wl, err := Generate(tinyConfig(Multiturn))
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.TimeScale = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := Run(ctx, Config{Policies: []string{"cache_aware"}, Workers: 2, Sim: sc, Seed: 1}, wl)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Runs[0]
	if r.Requests != 12 || r.Errors != 0 {
		t.Fatalf("%d requests, %d errors; want 12, 0", r.Requests, r.Errors)
	}
	// Every turn after the first extends the previous prompt and answer, which
	// cache_aware keeps on one worker: the engines report most of it cached.
	if r.CacheHitRate < 0.5 || r.OracleHitRate < r.CacheHitRate-1e-9 {
		t.Errorf("hit rate %v, oracle %v", r.CacheHitRate, r.OracleHitRate)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, tt := range []struct {
		label, name, fallback string
		ok                    bool
	}{
		{"cache_aware", "cache_aware", "least_loaded", true},
		{"cache_aware:smallest_tree", "cache_aware", "smallest_tree", true},
		{"round_robin", "round_robin", "least_loaded", true},
		{"round_robin:smallest_tree", "", "", false},
		{"nope", "", "", false},
		{"cache_aware:nope", "", "", false},
	} {
		name, opts, err := ParsePolicy(tt.label)
		if (err == nil) != tt.ok || (tt.ok && (name != tt.name || opts.CacheAware.CacheMissFallback != tt.fallback)) {
			t.Errorf("ParsePolicy(%q) = %q, %q, %v", tt.label, name, opts.CacheAware.CacheMissFallback, err)
		}
	}
}
