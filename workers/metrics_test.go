package workers

import (
	"slices"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestCollectorsReadTheRegistry: the per-worker series and the KV event
// mode follow the registry's workers at scrape time; breaker transitions
// are counted by the state entered.
func TestCollectorsReadTheRegistry(t *testing.T) {
	reg := NewRegistry()
	for _, url := range []string{"grpc://a:1", "grpc://b:1"} {
		if err := reg.Add(newPlaceholder(url, ConnectOptions{Protocol: ProtocolSGLang, Role: RoleRegular})); err != nil {
			t.Fatal(err)
		}
	}
	events := kvStatusFunc(func(url string) (KVEventStatus, bool) {
		return KVEventStatus{Mode: KVModeEvents}, url == "grpc://b:1"
	})
	bt := NewBreakerTransitions()
	bt.Changed(BreakerOpen)
	bt.Changed(BreakerOpen)
	bt.Changed(BreakerHalfOpen)
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"in flight per worker", testutil.Series(t, NewCollector(reg), "kvgate_worker_active_requests"), []string{
			`kvgate_worker_active_requests{worker="grpc://a:1"} 0`, `kvgate_worker_active_requests{worker="grpc://b:1"} 0`}},
		{"KV event mode per worker", testutil.Series(t, NewKVModeCollector(reg, events), "kvgate_worker_kv_events"), []string{
			`kvgate_worker_kv_events{worker="grpc://a:1"} 0`, `kvgate_worker_kv_events{worker="grpc://b:1"} 1`}},
		{"no subscriptions: approximated", testutil.Series(t, NewKVModeCollector(reg, nil), "kvgate_worker_kv_events"), []string{
			`kvgate_worker_kv_events{worker="grpc://a:1"} 0`, `kvgate_worker_kv_events{worker="grpc://b:1"} 0`}},
		{"breaker transitions by state", testutil.Series(t, bt, "kvgate_circuit_breaker_transitions_total"), []string{
			`kvgate_circuit_breaker_transitions_total{state="half_open"} 1`, `kvgate_circuit_breaker_transitions_total{state="open"} 2`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !slices.Equal(tt.got, tt.want) {
				t.Errorf("series:\n%q\nwant:\n%q", tt.got, tt.want)
			}
		})
	}
}

// kvStatusFunc is a KVStatuser from a function.
type kvStatusFunc func(url string) (KVEventStatus, bool)

func (f kvStatusFunc) Status(url string) (KVEventStatus, bool) { return f(url) }
