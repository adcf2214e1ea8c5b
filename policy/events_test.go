package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// engineChain describes pages as an engine's KV events do: one stored event
// per page, each naming its parent by the engine's hash. Hashes start at
// base, so two engines name the same content differently.
func engineChain(ids []uint32, pageSize int, base int64, parent *int64) []workers.KVEvent {
	var evs []workers.KVEvent
	h := base
	for i := 0; i+pageSize <= len(ids); i += pageSize {
		ev := workers.KVEvent{Kind: workers.KVStored, Blocks: []workers.KVBlock{{Hash: h, Tokens: ids[i : i+pageSize]}}}
		if parent != nil {
			ev.Parent, ev.HasParent = *parent, true
		}
		evs = append(evs, ev)
		p := h
		parent = &p
		h++
	}
	return evs
}

func batch(seq uint64, evs ...workers.KVEvent) *workers.KVEventBatch {
	return &workers.KVEventBatch{Seq: seq, Events: evs}
}

func removed(hashes ...int64) workers.KVEvent {
	return workers.KVEvent{Kind: workers.KVRemoved, Hashes: hashes}
}

func TestCacheAwareAppliesKVEvents(t *testing.T) {
	ws := fleet(2)
	a, b := ws[0], ws[1]
	prompt := caTokens(1, 64) // 4 pages

	tests := []struct {
		name string
		// events are applied to a, in one batch each.
		events [][]workers.KVEvent
		// want is the prompt tokens a holds afterwards, all confirmed.
		want int
	}{
		{"stored chain", [][]workers.KVEvent{engineChain(prompt, 16, 100, nil)}, 64},
		{"stored over two batches", [][]workers.KVEvent{
			engineChain(prompt[:32], 16, 100, nil),
			engineChain(prompt[32:], 16, 102, ptr(int64(101))),
		}, 64},
		{"removed leaf", [][]workers.KVEvent{engineChain(prompt, 16, 100, nil), {removed(103)}}, 48},
		{"removed inner page takes what hangs below", [][]workers.KVEvent{engineChain(prompt, 16, 100, nil), {removed(101)}}, 16},
		{"cleared", [][]workers.KVEvent{engineChain(prompt, 16, 100, nil), {{Kind: workers.KVCleared}}}, 0},
		{"unknown parent matches nothing", [][]workers.KVEvent{engineChain(prompt[16:], 16, 101, ptr(int64(100)))}, 0},
		{"unknown parent attaches when the parent arrives", [][]workers.KVEvent{
			engineChain(prompt[16:], 16, 101, ptr(int64(100))),
			engineChain(prompt[:16], 16, 100, nil),
		}, 64},
		{"removal of an unknown hash is ignored", [][]workers.KVEvent{engineChain(prompt, 16, 100, nil), {removed(999)}}, 64},
		{"duplicate stored is harmless", [][]workers.KVEvent{engineChain(prompt, 16, 100, nil), engineChain(prompt, 16, 100, nil)}, 64},
		// vLLM caches a page once for each request that computed it
		// before a copy was cached, under one hash, and evicts each copy
		// on its own.
		{"a page held twice stays when one copy is evicted", [][]workers.KVEvent{
			engineChain(prompt, 16, 100, nil), engineChain(prompt, 16, 100, nil), {removed(101)},
		}, 64},
		{"a page leaves with its last copy", [][]workers.KVEvent{
			engineChain(prompt, 16, 100, nil), engineChain(prompt, 16, 100, nil), {removed(103)}, {removed(103)},
		}, 48},
		{"a copy stored and another evicted in one batch", [][]workers.KVEvent{
			engineChain(prompt, 16, 100, nil), append(engineChain(prompt, 16, 100, nil), removed(102)),
		}, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newCA(t, nil)
			p.SetKVEventMode(a.URL(), true)
			for i, evs := range tt.events {
				p.ApplyKVEvents(a.URL(), batch(uint64(i), evs...))
			}
			d := caExplain(t, p, prompt, a, b)
			if d.Matched.Of(a.URL()) != tt.want || d.Confirmed.Of(a.URL()) != tt.want {
				t.Fatalf("a holds %d tokens, %d confirmed; want %d, all confirmed", d.Matched.Of(a.URL()), d.Confirmed.Of(a.URL()), tt.want)
			}
			if d.Matched.Of(b.URL()) != 0 {
				t.Fatalf("b holds %d tokens; events for a reached it", d.Matched.Of(b.URL()))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestCacheAwareResetForgetsTheWorker(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, nil)
	prompt := caTokens(1, 64)
	p.SetKVEventMode(ws[0].URL(), true)
	p.ApplyKVEvents(ws[0].URL(), batch(0, engineChain(prompt, 16, 100, nil)...))
	p.ApplyKVEvents(ws[1].URL(), batch(0, engineChain(prompt, 16, 500, nil)...))
	p.ResetKVEvents(ws[0].URL(), 0)
	d := caExplain(t, p, prompt, ws...)
	if d.Matched.Of(ws[0].URL()) != 0 || d.Matched.Of(ws[1].URL()) != 64 {
		t.Fatalf("after a reset of worker 0: matched %v, want only worker 1's 64", d.Matched)
	}
	// The hashes the reset forgot resolve nothing any more.
	p.ApplyKVEvents(ws[0].URL(), batch(1, engineChain(caTokens(2, 16), 16, 104, ptr(int64(103)))...))
	if got := p.Holdings(ws[0].URL(), false); len(got) != 0 {
		t.Fatalf("worker 0 holds %d pages after a reset and an orphan store", len(got))
	}
}

func TestCacheAwareRefusesEventsOfAnotherPageSize(t *testing.T) {
	ws := fleet(1)
	p := newCA(t, nil) // 16-token pages
	url := ws[0].URL()
	p.SetKVEventMode(url, true)
	p.ApplyKVEvents(url, batch(0, engineChain(caTokens(1, 64), 32, 100, nil)...))
	if got := p.Holdings(url, false); len(got) != 0 {
		t.Fatalf("32-token blocks in a 16-token tree: %d pages held, want none", len(got))
	}
	if st := p.EventStats(); st.ExactWorkers != 0 {
		t.Fatalf("a worker with unusable events counts as exact")
	}
	// It stays approximate whatever the subscription says later.
	p.SetKVEventMode(url, true)
	if st := p.EventStats(); st.ExactWorkers != 0 {
		t.Fatalf("SetKVEventMode(true) revived a worker whose events are unusable")
	}
}

func TestCacheAwareSpeculativeEntriesExpireUnlessConfirmed(t *testing.T) {
	ws := fleet(1)
	w := ws[0]
	confirmedPrompt, unconfirmedPrompt := caTokens(1, 64), caTokens(2, 64)
	p := newCA(t, func(o *policy.Options) { o.CacheAware.SpeculativeTTL = time.Second })
	p.SetKVEventMode(w.URL(), true)
	ctx := context.Background()
	for _, ids := range [][]uint32{confirmedPrompt, unconfirmedPrompt} {
		req := &policy.Request{InputIDs: ids}
		d, err := p.Select(ctx, req, workers.Views(ws))
		if err != nil {
			t.Fatal(err)
		}
		if d.Confirmed.Of(w.URL()) != 0 {
			t.Fatalf("a routing decision's own insert counts as confirmed")
		}
		p.Observe(req, d, policy.Outcome{})
	}
	// The engine stored one prompt and not the other.
	p.ApplyKVEvents(w.URL(), batch(0, engineChain(confirmedPrompt, 16, 100, nil)...))

	speculative := caExplain(t, p, unconfirmedPrompt, w)
	if speculative.Matched.Of(w.URL()) != 64 || speculative.Confirmed.Of(w.URL()) != 0 {
		t.Fatalf("before expiry: matched %d confirmed %d, want 64 speculative", speculative.Matched.Of(w.URL()), speculative.Confirmed.Of(w.URL()))
	}
	policy.ExpireSpeculations(p, time.Now()) // not due yet
	if got := caExplain(t, p, unconfirmedPrompt, w).Matched.Of(w.URL()); got != 64 {
		t.Fatalf("expired before its TTL: matched %d", got)
	}
	policy.ExpireSpeculations(p, time.Now().Add(2*time.Second))
	if got := caExplain(t, p, unconfirmedPrompt, w).Matched.Of(w.URL()); got != 0 {
		t.Fatalf("unconfirmed prompt still matched %d tokens after its TTL", got)
	}
	if d := caExplain(t, p, confirmedPrompt, w); d.Matched.Of(w.URL()) != 64 || d.Confirmed.Of(w.URL()) != 64 {
		t.Fatalf("confirmed prompt: matched %d confirmed %d, want 64 and 64", d.Matched.Of(w.URL()), d.Confirmed.Of(w.URL()))
	}
	if got := p.SpeculativeExpired(); got != 1 {
		t.Fatalf("SpeculativeExpired = %d, want 1", got)
	}
}

func TestCacheAwareApproximateWorkersKeepTheirEntries(t *testing.T) {
	ws := fleet(1)
	w := ws[0]
	prompt := caTokens(1, 64)
	p := newCA(t, func(o *policy.Options) { o.CacheAware.SpeculativeTTL = 0 })
	req := &policy.Request{InputIDs: prompt}
	d, err := p.Select(context.Background(), req, workers.Views(ws))
	if err != nil {
		t.Fatal(err)
	}
	p.Observe(req, d, policy.Outcome{CachedTokens: 0})
	policy.ExpireSpeculations(p, time.Now().Add(time.Hour))
	if got := caExplain(t, p, prompt, w).Matched.Of(w.URL()); got != 64 {
		t.Fatalf("a worker without events lost its routed prompt: matched %d, want 64", got)
	}
}

func TestCacheAwareWorkerShareIsBoundedByTheEngineCapacity(t *testing.T) {
	w := workers.NewWorker("grpc://127.0.0.1:9000", workers.ProtocolSGLang, workers.RoleRegular,
		workers.ModelInfo{KVCapacityTokens: 256}, nil, nil)
	p := newCA(t, nil)
	for i := range 20 {
		caSelect(t, p, caTokens(i+1, 64), w)
	}
	if got := p.TreeStats().TenantTokens[w.URL()]; got > 2*256 {
		t.Fatalf("worker with a 256-token cache holds %d tokens in the tree; its share is at most twice that", got)
	}
}

func TestVllmCacheAwareAppliesKVEvents(t *testing.T) {
	ws := fleet(2)
	a, b := ws[0], ws[1]
	prompt := caTokens(1, 64)
	p, err := policy.NewVllmCacheAware(policy.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	explain := func() policy.Decision {
		d, err := p.Select(context.Background(), &policy.Request{InputIDs: prompt, DryRun: true}, workers.Views(ws))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	p.SetKVEventMode(a.URL(), true)
	p.ApplyKVEvents(a.URL(), batch(0, engineChain(prompt, 16, 100, nil)...))
	if d := explain(); d.Worker != a || d.Matched.Of(a.URL()) != 64 || d.Matched.Of(b.URL()) != 0 {
		t.Fatalf("after a's stored events: %s matched %v, want a with 64", d.Worker.URL(), d.Matched)
	}
	// Removing the second page takes the pages below it: the engine cannot
	// reach them without it.
	p.ApplyKVEvents(a.URL(), batch(1, removed(101)))
	if d := explain(); d.Matched.Of(a.URL()) != 16 {
		t.Fatalf("after removing a's second page: matched %v, want 16 on a", d.Matched)
	}
	p.ApplyKVEvents(a.URL(), batch(2, workers.KVEvent{Kind: workers.KVCleared}))
	if d := explain(); d.Matched.Of(a.URL()) != 0 {
		t.Fatalf("after a clear: matched %v, want nothing", d.Matched)
	}
	// Two requests computed the prompt at once: vLLM caches both copies
	// under the same hashes, and evicting one leaves the other.
	p.ApplyKVEvents(a.URL(), batch(3, engineChain(prompt, 16, 100, nil)...))
	p.ApplyKVEvents(a.URL(), batch(4, engineChain(prompt, 16, 100, nil)...))
	p.ApplyKVEvents(a.URL(), batch(5, removed(101)))
	if d := explain(); d.Matched.Of(a.URL()) != 64 {
		t.Fatalf("after one of two copies of a's second page is evicted: matched %v, want 64 on a", d.Matched)
	}
}
