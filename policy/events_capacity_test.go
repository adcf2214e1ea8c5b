package policy_test

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCapacityLearnedFromEvictions specifies the KV capacity the wait
// mode prices eviction by for an engine that reports none (TensorRT-LLM
// reports no KV size): what its KV events showed it held as it evicted.
// Engine A holds the prompt's first 128 tokens, B only its first page;
// the rest of the 4,096-token prompt is new to both.
func TestCapacityLearnedFromEvictions(t *testing.T) {
	shared := caTokens(1, 16)
	history := caTokens(2, 240)
	prompt := caJoin(shared, history[:112], caTokens(9, 3968))
	tests := []struct {
		name string
		// evicted: A's engine filled its cache and evicted (it then holds
		// 512 tokens, all it can); reported: A reports this capacity.
		evicted  bool
		reported int
		want     string
	}{
		{name: "nothing reported, nothing evicted: A has room as far as anyone knows, and the longer match wins", want: "A"},
		{name: "A evicted holding 512 tokens: it is full, and writing the prompt there evicts as much, so B with room wins", evicted: true, want: "B"},
		{name: "a reported capacity counts before a learned one: A holds 0.5% of its 100,000 tokens", evicted: true, reported: 100000, want: "A"},
	}
	for _, name := range []string{"cache_aware", "vllm_cache_aware"} {
		for _, tc := range tests {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				a := workers.NewWorker("grpc://a:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{KVCapacityTokens: tc.reported}, nil, nil)
				b := workers.NewWorker("grpc://b:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
				pol, err := policy.New(name, policy.DefaultOptions())
				if err != nil {
					t.Fatal(err)
				}
				p := pol.(interface {
					policy.Policy
					workers.KVEventHandler
					SetKVEventMode(worker string, exact bool)
				})
				p.SetKVEventMode(a.URL(), true)
				p.SetKVEventMode(b.URL(), true)
				p.ApplyKVEvents(a.URL(), batch(0, engineChain(caJoin(shared, history), 16, 100, nil)...))
				p.ApplyKVEvents(b.URL(), batch(0, engineChain(shared, 16, 500, nil)...))
				if tc.evicted {
					// Another prompt's 16 pages fill the cache; the next
					// prompt's 16 evict them, one for one.
					p.ApplyKVEvents(a.URL(), batch(1, engineChain(caTokens(3, 256), 16, 200, nil)...))
					evs := engineChain(caTokens(4, 256), 16, 300, nil)
					for i := range 16 {
						evs = append(evs, removed(int64(215-i)))
					}
					p.ApplyKVEvents(a.URL(), batch(2, evs...))
				}
				d, err := p.Select(context.Background(), &policy.Request{InputIDs: prompt, DryRun: true}, workers.Views([]*workers.Worker{a, b}))
				if err != nil {
					t.Fatal(err)
				}
				if got := map[*workers.Worker]string{a: "A", b: "B"}[d.Worker]; got != tc.want {
					t.Fatalf("chose %s, want %s: %s", got, tc.want, d.Why())
				}
			})
		}
	}
}
