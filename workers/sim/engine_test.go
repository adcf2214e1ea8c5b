package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// prompt returns n distinct-looking tokens starting at base.
func prompt(base, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(base + i*7)
	}
	return p
}

func TestGenerateStreamsAndCaches(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		p := genParams{id: "r1", prompt: prompt(100, 40), maxNew: u32(10), ignoreEOS: true, seed: i32(1)}
		r := mustComplete(t, c, p)
		if len(r.chunks) != 10 {
			t.Fatalf("got %d chunks, want 10", len(r.chunks))
		}
		for i, ch := range r.chunks {
			if len(ch.tokens) != 1 || ch.completion != uint32(i+1) || ch.prompt != 40 || ch.cached != 0 {
				t.Fatalf("chunk %d = %+v, want 1 token, completion %d, prompt 40, cached 0", i, ch, i+1)
			}
			if srv.Engine().Config().Protocol == ProtocolSGLang && ch.requestID != "r1" {
				t.Fatalf("chunk %d request_id %q, want r1", i, ch.requestID)
			}
		}
		f := r.final
		if f.finishReason != "length" || f.matched != nil || f.completion != 10 || f.prompt != 40 || f.cached != 0 {
			t.Fatalf("final = %+v, want length, 10 completion, 40 prompt, 0 cached", f)
		}
		if !slices.Equal(f.outputIDs, r.streamed()) {
			t.Fatalf("output_ids %v differ from streamed tokens %v", f.outputIDs, r.streamed())
		}
		for _, tok := range f.outputIDs {
			if int(tok) >= srv.Engine().Config().VocabSize {
				t.Fatalf("token %d out of vocabulary", tok)
			}
		}

		// Same prompt again: its two whole pages (32 of 40 tokens) are cached.
		p.id = "r2"
		r2 := mustComplete(t, c, p)
		if r2.final.cached != 32 || r2.chunks[0].cached != 32 {
			t.Fatalf("second call cached_tokens = %d (chunk %d), want 32", r2.final.cached, r2.chunks[0].cached)
		}
		// The first request's output was cached on finish: prompt + 9 output
		// tokens make three whole pages.
		cont := append(slices.Clone(p.prompt), f.outputIDs...)
		r3 := mustComplete(t, c, genParams{id: "r3", prompt: cont, maxNew: u32(1)})
		if r3.final.cached != 48 {
			t.Fatalf("continuation cached_tokens = %d, want 48", r3.final.cached)
		}
		st := srv.Engine().Stats()
		if st.Requests != 3 || st.Completed != 3 || st.Running != 0 || st.PinnedPages != 0 || st.UsedTokens != 0 {
			t.Fatalf("stats after three requests: %+v", st)
		}
		if st.PromptTokens != 40+40+50 || st.CachedPromptTokens != 32+48 {
			t.Fatalf("prompt/cached totals = %d/%d", st.PromptTokens, st.CachedPromptTokens)
		}
		l, err := c.loads(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if want := 80.0 / 130.0; l.hitRate != want || l.max != 4096 || l.maxRunning != 256 {
			t.Fatalf("loads = %+v, want hit rate %v, max 4096, max running 256", l, want)
		}
	})
}

func TestGenerateFinishReasons(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		base := genParams{prompt: prompt(5, 20), maxNew: u32(30), ignoreEOS: true, seed: i32(3)}
		ref := mustComplete(t, c, base).final.outputIDs

		// Stop at the first token that did not appear before it.
		at := -1
		for i := 3; i < len(ref) && at < 0; i++ {
			if !slices.Contains(ref[:i], ref[i]) {
				at = i
			}
		}
		if at < 0 {
			t.Fatalf("no fresh token in %v", ref)
		}
		stopped := base
		stopped.stopIDs = []uint32{ref[at]}
		f := mustComplete(t, c, stopped).final
		if f.finishReason != "stop" || f.matched == nil || *f.matched != ref[at] || !slices.Equal(f.outputIDs, ref[:at+1]) {
			t.Fatalf("stop token %d at %d: final %+v, want stop with output %v", ref[at], at, f, ref[:at+1])
		}

		// min_new_tokens holds the stop token back.
		held := stopped
		held.minNew = uint32(at + 1)
		if f := mustComplete(t, c, held).final; len(f.outputIDs) <= at+1 {
			t.Fatalf("min_new_tokens %d: stopped after %d tokens", held.minNew, len(f.outputIDs))
		}

		// Without ignore_eos the engine eventually emits EOS.
		eos := srv.Engine().Config().EOSTokenID
		f = mustComplete(t, c, genParams{prompt: prompt(5, 20), maxNew: u32(1500), seed: i32(3), minNew: 10}).final
		if f.finishReason != "stop" || f.matched == nil || *f.matched != eos || f.outputIDs[len(f.outputIDs)-1] != eos {
			t.Fatalf("EOS run: finish %q matched %v, last token %d", f.finishReason, f.matched, f.outputIDs[len(f.outputIDs)-1])
		}
		if len(f.outputIDs) < 11 || slices.Contains(f.outputIDs[:10], eos) {
			t.Fatalf("EOS before min_new_tokens: %v", f.outputIDs)
		}
	})
}

func TestGenerateDeterminism(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		p := genParams{prompt: prompt(9, 30), maxNew: u32(16), ignoreEOS: true, seed: i32(42)}
		a := mustComplete(t, c, p).final.outputIDs
		b := mustComplete(t, c, p).final.outputIDs
		if !slices.Equal(a, b) {
			t.Fatalf("same seed, different outputs:\n%v\n%v", a, b)
		}
		other := p
		other.seed = i32(43)
		if o := mustComplete(t, c, other).final.outputIDs; slices.Equal(a, o) {
			t.Fatalf("different seeds, same output %v", a)
		}
		// Greedy decoding ignores the seed.
		g1, g2 := p, other
		g1.greedy, g2.greedy = true, true
		if x, y := mustComplete(t, c, g1).final.outputIDs, mustComplete(t, c, g2).final.outputIDs; !slices.Equal(x, y) {
			t.Fatalf("greedy outputs depend on the seed:\n%v\n%v", x, y)
		}
		// Non-streaming: only the completion, with the same tokens.
		ns := p
		ns.noStream = true
		r := mustComplete(t, c, ns)
		if len(r.chunks) != 0 || !slices.Equal(r.final.outputIDs, a) {
			t.Fatalf("stream=false: %d chunks, output %v, want 0 chunks and %v", len(r.chunks), r.final.outputIDs, a)
		}
	})
}

func TestGenerateInvalid(t *testing.T) {
	tests := []struct {
		name string
		p    genParams
		code codes.Code
	}{
		{"empty prompt", genParams{maxNew: u32(4)}, codes.InvalidArgument},
		{"token out of vocabulary", genParams{prompt: []uint32{1, 128256}, maxNew: u32(4)}, codes.InvalidArgument},
		{"context exceeded", genParams{prompt: prompt(0, 2000), maxNew: u32(100)}, codes.InvalidArgument},
	}
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		for _, tt := range tests {
			r := generate(t, c, tt.p)
			if status.Code(r.err) != tt.code {
				t.Errorf("%s: got %v, want %v", tt.name, r.err, tt.code)
			}
		}
		if st := srv.Engine().Stats(); st.Rejected != uint64(len(tests)) || st.Requests != 0 {
			t.Fatalf("stats: %+v", st)
		}
	})
}

// stalled starts a request that stops after n tokens (StallAfterTokens) and
// returns its receive function once those tokens arrived.
func stalled(t *testing.T, ctx context.Context, c client, id string, n int) func() (msg, error) {
	t.Helper()
	recv, err := c.generate(ctx, genParams{id: id, prompt: prompt(1, 40), maxNew: u32(100), ignoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if m, err := recv(); err != nil || m.final {
			t.Fatalf("token %d: %+v, %v", i, m, err)
		}
	}
	return recv
}

func TestAbortFreesRequest(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.Faults.StallAfterTokens = 2 }, func(t *testing.T, srv *Process, c client) {
		ctx := context.Background()
		recv := stalled(t, ctx, c, "held", 2)
		st := srv.Engine().Stats()
		// 32 pinned prompt tokens + 8 in the partial page + 2 generated.
		if st.Running != 1 || st.PinnedPages != 2 || st.UsedTokens != 42 {
			t.Fatalf("while running: %+v", st)
		}
		l, err := c.loads(ctx)
		if err != nil || l.running != 1 || l.used != 42 || l.usage != 42.0/4096 {
			t.Fatalf("loads while running: %+v, %v", l, err)
		}
		// A second request with the same id is refused while the first runs.
		if r := generate(t, c, genParams{id: "held", prompt: prompt(3, 4), maxNew: u32(1)}); status.Code(r.err) != codes.AlreadyExists {
			t.Fatalf("duplicate id: %v, want ALREADY_EXISTS", r.err)
		}

		if err := c.abort(ctx, "held"); err != nil {
			t.Fatal(err)
		}
		st = srv.Engine().Stats()
		if st.Running != 0 || st.PinnedPages != 0 || st.Aborted != 1 || st.AbortCalls != 1 {
			t.Fatalf("right after Abort: %+v", st)
		}
		r := collect(recv)
		if r.err != nil || r.final == nil || r.final.finishReason != "abort" || len(r.final.outputIDs) != 2 {
			t.Fatalf("aborted stream: %+v", r)
		}
		// Aborting an unknown id is harmless but counted.
		if err := c.abort(ctx, "nope"); err != nil {
			t.Fatal(err)
		}
		if st := srv.Engine().Stats(); st.AbortCalls != 2 || st.Aborted != 1 {
			t.Fatalf("after second Abort: %+v", st)
		}
	})
}

func TestCancelFreesRequest(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.Faults.StallAfterTokens = 1 }, func(t *testing.T, srv *Process, c client) {
		ctx, cancel := context.WithCancel(context.Background())
		recv := stalled(t, ctx, c, "gone", 1)
		cancel()
		if _, err := recv(); status.Code(err) != codes.Canceled {
			t.Fatalf("recv after cancel: %v", err)
		}
		e := srv.Engine()
		testutil.Eventually(t, "the cancelled request to be freed", func() bool {
			st := e.Stats()
			return st.Running == 0 && st.PinnedPages == 0 && st.Cancelled == 1
		})
		if st := e.Stats(); st.AbortCalls != 0 {
			t.Fatalf("a cancel is not an Abort RPC: %+v", st)
		}
	})
}

func TestQueueingFIFO(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.MaxRunning = 1; c.Faults.StallAfterTokens = 1 }, func(t *testing.T, srv *Process, c client) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first := stalled(t, ctx, c, "first", 1)
		second, err := c.generate(ctx, genParams{id: "second", prompt: prompt(500, 20), maxNew: u32(5), ignoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the second request to queue", func() bool { return srv.Engine().Stats().Waiting == 1 })
		l, err := c.loads(ctx)
		if err != nil || l.running != 1 || l.waiting != 1 {
			t.Fatalf("loads: %+v, %v", l, err)
		}
		// Freeing the first admits the second, which then stalls after one token.
		if err := c.abort(ctx, "first"); err != nil {
			t.Fatal(err)
		}
		if r := collect(first); r.final == nil || r.final.finishReason != "abort" {
			t.Fatalf("first: %+v", r)
		}
		if m, err := second(); err != nil || len(m.tokens) != 1 {
			t.Fatalf("second's first token: %+v, %v", m, err)
		}
		if st := srv.Engine().Stats(); st.Running != 1 || st.Waiting != 0 {
			t.Fatalf("after the first left: %+v", st)
		}
	})
}

func TestFaults(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		e := srv.Engine()
		p := genParams{prompt: prompt(2, 10), maxNew: u32(20), ignoreEOS: true}

		e.SetFaults(Faults{DropAfterTokens: 3})
		r := generate(t, c, p)
		if status.Code(r.err) != codes.Unavailable || len(r.chunks) != 3 || r.final != nil {
			t.Fatalf("drop after 3: %d chunks, final %v, err %v", len(r.chunks), r.final, r.err)
		}
		if st := e.Stats(); st.Failed != 1 || st.Running != 0 {
			t.Fatalf("after drop: %+v", st)
		}

		e.SetFaults(Faults{Unavailable: true})
		if r := generate(t, c, p); status.Code(r.err) != codes.Unavailable || len(r.chunks) != 0 {
			t.Fatalf("unavailable: %v", r.err)
		}

		ctx := context.Background()
		e.SetFaults(Faults{Unhealthy: true})
		if ok, err := c.health(ctx); err != nil || ok {
			t.Fatalf("unhealthy: healthy=%v, %v", ok, err)
		}
		e.SetFaults(Faults{})
		if ok, err := c.health(ctx); err != nil || !ok {
			t.Fatalf("healthy again: healthy=%v, %v", ok, err)
		}
		if r := generate(t, c, p); r.err != nil || r.final == nil {
			t.Fatalf("after clearing faults: %+v", r)
		}

		// Stall: tokens stop; the stream stays open until the client leaves.
		e.SetFaults(Faults{StallAfterTokens: 2})
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		recv, err := c.generate(sctx, p)
		if err != nil {
			t.Fatal(err)
		}
		r = collect(recv)
		if len(r.chunks) != 2 || status.Code(r.err) != codes.DeadlineExceeded {
			t.Fatalf("stall: %d chunks, err %v", len(r.chunks), r.err)
		}
	})
}

func TestLatencyModel(t *testing.T) {
	// Lower bounds only: a slow machine may take longer, never shorter.
	cfg := testConfig(ProtocolVLLM)
	cfg.TimeScale = 1
	cfg.PrefillTokensPerSec = 10000 // 1000 tokens: 100 ms
	cfg.RequestOverhead = 10 * time.Millisecond
	cfg.DecodeMsPerToken = 5
	cfg.DecodeMsPerRunning = 0
	_, c := startSim(t, cfg)
	start := time.Now()
	recv, err := c.generate(context.Background(), genParams{prompt: prompt(0, 1000), maxNew: u32(5), ignoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recv(); err != nil {
		t.Fatal(err)
	}
	if ttft := time.Since(start); ttft < 110*time.Millisecond {
		t.Fatalf("TTFT %v, want >= 110ms (prefill 100ms + overhead 10ms)", ttft)
	}
	r := collect(recv)
	if total := time.Since(start); r.final == nil || total < 130*time.Millisecond {
		t.Fatalf("total %v (final %v), want >= 130ms (4 decode steps of 5ms)", total, r.final)
	}
}

// TestStepsBeforeFirstToken: an engine that runs prefill inside the decode
// batch gives the first token after its prefill and that many steps of the
// batch the request joins: with two requests already decoding, two steps
// of 10 + 20 × 3 ms. A lower bound only, as above: without the steps the
// prefill (16 tokens at 10⁹ a second) takes no time.
func TestStepsBeforeFirstToken(t *testing.T) {
	const steps = 2
	cfg := testConfig(ProtocolVLLM)
	cfg.TimeScale = 1
	cfg.PrefillTokensPerSec = 1e9
	cfg.RequestOverhead = 0
	cfg.DecodeMsPerToken, cfg.DecodeMsPerRunning = 10, 20
	cfg.StepsBeforeFirstToken = steps
	srv, c := startSim(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 { // two requests decoding beside it
		recv, err := c.generate(ctx, genParams{prompt: prompt(100*i, 16), maxNew: u32(1000), ignoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recv(); err != nil {
			t.Fatal(err)
		}
	}
	if l := srv.Engine().Stats(); l.Running != 2 {
		t.Fatalf("running %d, want 2", l.Running)
	}
	start := time.Now()
	recv, err := c.generate(ctx, genParams{prompt: prompt(500, 16), maxNew: u32(1), ignoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recv(); err != nil {
		t.Fatal(err)
	}
	if ttft, want := time.Since(start), steps*70*time.Millisecond; ttft < want {
		t.Errorf("%d steps: TTFT %v, want >= %v", steps, ttft, want)
	}
}

func TestInfoRPCs(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		l, err := c.loads(context.Background())
		if err != nil || l.running != 0 || l.max != 4096 || l.usage != 0 {
			t.Fatalf("idle loads: %+v, %v", l, err)
		}
		if ok, err := c.health(context.Background()); !ok || err != nil {
			t.Fatalf("health: %v, %v", ok, err)
		}
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		field string
		tweak func(*Config)
	}{
		{"Protocol", func(c *Config) { c.Protocol = "tgi" }},
		{"Model", func(c *Config) { c.Model = "" }},
		{"EOSTokenID", func(c *Config) { c.VocabSize = 100; c.EOSTokenID = 100 }},
		{"VocabSize", func(c *Config) { c.VocabSize = 1 << 20 }},
		{"TokenizerDir", func(c *Config) { c.TokenizerDir = "/nonexistent" }},
		{"PageSize", func(c *Config) { c.PageSize = 0 }},
		{"KVCapacityTokens", func(c *Config) { c.KVCapacityTokens = 8 }},
		{"PrefillTokensPerSec", func(c *Config) { c.PrefillTokensPerSec = 0 }},
		{"MaxRunning", func(c *Config) { c.MaxRunning = 0 }},
		{"TimeScale", func(c *Config) { c.TimeScale = -1 }},
		{"KVEventHistory", func(c *Config) { c.KVEventHistory = -1 }},
		{"Faults.KVEventDropEvery", func(c *Config) { c.Faults.KVEventDropEvery = -1 }},
		{"Faults.KVEventDuplicateEvery", func(c *Config) { c.Faults.KVEventDuplicateEvery = -2 }},
		{"Faults.KVEventDelay", func(c *Config) { c.Faults.KVEventDelay = -time.Second }},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.tweak(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: New error %v, want ErrInvalidConfig naming the field", tt.field, err)
		}
	}
	if _, err := New(DefaultConfig()); err != nil {
		t.Fatalf("default config: %v", err)
	}
}

// TestConcurrentLoad runs many overlapping requests with shared prefixes
// through a small engine, cancelling and aborting some, and checks that the
// books balance and nothing stays pinned.
func TestConcurrentLoad(t *testing.T) {
	for _, scale := range []float64{0, 0.05} {
		t.Run(fmt.Sprint("time-scale-", scale), func(t *testing.T) { concurrentLoad(t, scale) })
	}
}

func concurrentLoad(t *testing.T, timeScale float64) {
	tweak := func(c *Config) { c.MaxRunning = 4; c.KVCapacityTokens = 512; c.TimeScale = timeScale }
	forEachProtocol(t, tweak, func(t *testing.T, srv *Process, c client) {
		const n = 64
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := append(prompt(i%4, 48), prompt(1000+i, 1+i%20)...)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				recv, err := c.generate(ctx, genParams{id: fmt.Sprint("req-", i), prompt: p, maxNew: u32(uint32(5 + i%30))})
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 8 {
				case 3:
					cancel()
				case 5:
					if err := c.abort(context.Background(), fmt.Sprint("req-", i)); err != nil {
						t.Error(err)
					}
				}
				r := collect(recv)
				if r.err != nil && status.Code(r.err) != codes.Canceled {
					t.Errorf("req-%d: %v", i, r.err)
				}
			}()
		}
		wg.Wait()
		e := srv.Engine()
		testutil.Eventually(t, "all requests to end", func() bool {
			st := e.Stats()
			return st.Running+st.Waiting == 0 && st.Completed+st.Aborted+st.Cancelled == st.Requests
		})
		// Requests cancelled before they reached the engine are not counted.
		st := e.Stats()
		if st.Requests < n-n/8 || st.Running != 0 || st.Waiting != 0 || st.PinnedPages != 0 || st.UsedTokens != 0 || st.CachedPages > 512/16 {
			t.Fatalf("after the load: %+v", st)
		}
		if st.CachedPromptTokens == 0 {
			t.Fatalf("shared prefixes never hit the cache: %+v", st)
		}
	})
}

// TestWholePromptCachedComputesItsLastPage: an engine computes a prompt's
// last token even when the whole prompt is cached, to sample the first
// output token from it, so a repeated prompt that ends on a page boundary
// reports its last page uncached, as vLLM and SGLang do (see
// pageCache.reused). The pages are 16 tokens.
func TestWholePromptCachedComputesItsLastPage(t *testing.T) {
	for _, tt := range []struct {
		name   string
		length int
		cached int // on the repeat
	}{
		{"four pages: the last computed again", 64, 48},
		{"four pages and a token: all four reused", 65, 64},
		{"one page: computed again", 16, 0},
		{"a token short of four pages: three reused", 63, 48},
	} {
		t.Run(tt.name, func(t *testing.T) {
			forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
				p := genParams{id: "first", prompt: prompt(100, tt.length), maxNew: u32(1), ignoreEOS: true, seed: i32(1)}
				mustComplete(t, c, p)
				p.id = "repeat"
				if r := mustComplete(t, c, p); r.final.cached != uint32(tt.cached) {
					t.Fatalf("repeat of a %d-token prompt cached_tokens = %d, want %d", tt.length, r.final.cached, tt.cached)
				}
			})
		})
	}
}
