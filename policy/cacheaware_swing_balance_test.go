package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareSwingIsNotAHotSpot is the absolute balance rule on engines
// that report their running-request limit: a difference in in-flight
// counts moves a request off its cache only where the cached engine makes
// it wait, because it is at its limit or its prefill backlog exceeds the
// least loaded one's by more than the move would recompute. A swing of
// in-flight requests that are decoding is not a hot spot: on a starved
// machine such swings (34 against 1) moved conversations off their caches
// mid-run in bench's multiturn at 256 users (load CoV 0.25–0.58).
//
// w0 holds the 64-token prompt, the others a prompt of their own; each row
// gives every worker's running-request limit (0: not reported), load and
// prompt tokens sent whose first token has not come back.
func TestCacheAwareSwingIsNotAHotSpot(t *testing.T) {
	const s = 256
	for _, tc := range []struct {
		name    string
		limits  [4]int
		loads   [4]int
		backlog [4]int
		waiting [4]int // requests the engine's last load poll reported in its queue
		capOff  bool   // --balance-capacity-threshold 0
		want    int
		branch  string
	}{
		{name: "34 against 1 decoding, nothing queued: the cache (a swing)",
			limits: [4]int{s, s, s, s}, loads: [4]int{34, 1, 1, 1}, want: 0, branch: "cache_hit"},
		{name: "34 against 1 with a prefill backlog of 4,096 tokens on the cached engine: the least loaded (a hot spot)",
			limits: [4]int{s, s, s, s}, loads: [4]int{34, 1, 1, 1}, backlog: [4]int{4096, 0, 0, 0}, want: 1, branch: "imbalance"},
		{name: "a backlog of 64 tokens, no more than the 64 a move would recompute: the cache",
			limits: [4]int{s, s, s, s}, loads: [4]int{34, 1, 1, 1}, backlog: [4]int{64, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "a backlog of 65 tokens, one more than a move recomputes: the least loaded",
			limits: [4]int{s, s, s, s}, loads: [4]int{34, 1, 1, 1}, backlog: [4]int{65, 0, 0, 0}, want: 1, branch: "imbalance"},
		{name: "backlogs alike everywhere: the cache (waiting is the same anywhere)",
			limits: [4]int{s, s, s, s}, loads: [4]int{34, 1, 1, 1}, backlog: [4]int{4096, 4096, 4096, 4096}, want: 0, branch: "cache_hit"},
		{name: "the cached engine at its limit of 40: the least loaded (the request would queue)",
			limits: [4]int{40, 40, 40, 40}, loads: [4]int{40, 1, 1, 1}, want: 1, branch: "imbalance"},
		{name: "34 against 1, the cached engine's last poll reported 3 requests in its queue: the least loaded",
			limits: [4]int{s, s, s, s}, loads: [4]int{34, 1, 1, 1}, waiting: [4]int{3, 0, 0, 0}, want: 1, branch: "imbalance"},
		{name: "one below its limit of 40, nothing queued: the cache",
			limits: [4]int{40, 40, 40, 40}, loads: [4]int{39, 1, 1, 1}, want: 0, branch: "cache_hit"},
		{name: "no limits reported: SMG's rule, 34 against 1 is imbalanced",
			loads: [4]int{34, 1, 1, 1}, want: 1, branch: "imbalance"},
		{name: "the capacity rule turned off: SMG's rule, 34 against 1 is imbalanced",
			limits: [4]int{s, s, s, s}, loads: [4]int{34, 1, 1, 1}, capOff: true, want: 1, branch: "imbalance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := make([]*workers.Worker, 4)
			for i, n := range tc.limits {
				ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolSGLang,
					workers.RoleRegular, workers.ModelInfo{MaxRunningRequests: n}, nil, nil)
				defer ws[i].Prefilling(tc.backlog[i]).End()
				ws[i].SetEngineLoad(workers.Load{Waiting: tc.waiting[i], MaxRunning: n})
			}
			p := newCA(t, func(o *policy.Options) {
				if tc.capOff {
					o.CacheAware.BalanceCapacityThreshold = 0
				}
			})
			wantHeldPrompt(t, p, ws, true, tc.loads[:], tc.want, tc.branch)
		})
	}
	t.Run("Explain says why a swing kept the cache", func(t *testing.T) {
		ws := limitedFleet(s, s, s, s)
		p := newCA(t, nil)
		prompt := caTokens(1, 64)
		place(t, p, ws[0], prompt)
		defer busy(ws[0], 34)()
		for i, w := range ws[1:] {
			place(t, p, w, caTokens(10+i, 64))
			defer busy(w, 1)()
		}
		d := caExplain(t, p, prompt, ws...)
		want := "loads 1..34 differ by more than 32, but grpc://127.0.0.1:9000 is below its running-request limit and its prefill backlog (0 tokens) is within the 64 a move would recompute"
		if d.Branch != "cache_hit" || !strings.Contains(d.Reason, want) {
			t.Fatalf("%s: reason %q, want it to contain %q", d.Branch, d.Reason, want)
		}
	})
}
