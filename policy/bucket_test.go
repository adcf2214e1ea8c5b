package policy_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

func ofLen(n int) *policy.Request { return &policy.Request{InputIDs: make([]uint32, n)} }

func TestBucketBandsByPromptLength(t *testing.T) {
	// Before any traffic is measured, lengths are spread over 0-4096.
	tests := []struct {
		workers int
		length  int
		want    int
	}{
		{2, 10, 0}, {2, 2047, 0}, {2, 2048, 1}, {2, 100000, 1},
		{4, 1000, 0}, {4, 1024, 1}, {4, 2500, 2}, {4, 3072, 3},
		{1, 100000, 0},
	}
	for _, tc := range tests {
		ws := fleet(tc.workers)
		d := mustSelect(t, must(policy.NewBucket(policy.DefaultOptions())), ofLen(tc.length), ws)
		if d.Worker != ws[tc.want] || d.Branch != "bucket" {
			t.Errorf("%d workers, %d tokens: %s by %q, want %s (%s)", tc.workers, tc.length, d.Worker, d.Branch, ws[tc.want], d.Why())
		}
	}
	if got := must(policy.NewBucket(policy.DefaultOptions())).Boundaries(4); !slices.Equal(got, []int{1024, 2048, 3072}) {
		t.Errorf("initial boundaries for 4 workers = %v, want [1024 2048 3072]", got)
	}
}

func TestBucketBoundariesFollowTheTokenMass(t *testing.T) {
	ws := fleet(2)
	b := must(policy.NewBucket(policy.DefaultOptions()))
	// Traffic of short prompts only: 10, 20, ..., 1000 tokens. Under the
	// initial boundary (2048) all of it lands on the first worker.
	send := func() map[*workers.Worker]int {
		got := map[*workers.Worker]int{}
		for l := 10; l <= 1000; l += 10 {
			got[mustSelect(t, b, ofLen(l), ws).Worker]++
		}
		return got
	}
	if got := send(); got[ws[0]] != 100 {
		t.Fatalf("before adjustment: %v, want all 100 on the first worker", got)
	}
	if !b.Adjust() {
		t.Fatal("Adjust with 100 prompts did nothing")
	}
	// Half the tokens of 10..1000 lie below about 707 (√½ × 1000).
	bd := b.Boundaries(2)
	if len(bd) != 1 || bd[0] < 650 || bd[0] > 760 {
		t.Fatalf("boundary after adjustment = %v, want about 707", bd)
	}
	tokens := map[*workers.Worker]int{}
	for l := 10; l <= 1000; l += 10 {
		tokens[mustSelect(t, b, ofLen(l), ws).Worker] += l
	}
	if lo, hi := tokens[ws[0]], tokens[ws[1]]; lo < 45*505 || hi < 45*505 {
		t.Fatalf("token shares after adjustment %d / %d, want about equal", lo, hi)
	}
	// A third worker splits the same distribution in three, at once.
	if bd3 := b.Boundaries(3); len(bd3) != 2 || bd3[0] >= bd[0] || bd3[1] <= bd[0] {
		t.Fatalf("3-worker boundaries %v do not bracket the 2-worker one %v", bd3, bd)
	}
}

func TestBucketAdjustNeedsEnoughTraffic(t *testing.T) {
	ws := fleet(2)
	b := must(policy.NewBucket(policy.DefaultOptions()))
	for range 31 {
		mustSelect(t, b, ofLen(100), ws)
	}
	for range 100 {
		mustSelect(t, b, &policy.Request{InputIDs: make([]uint32, 100), DryRun: true}, ws)
	}
	if b.Adjust() || !slices.Equal(b.Boundaries(2), []int{2048}) {
		t.Fatalf("adjusted on 31 prompts (dry runs do not count): %v", b.Boundaries(2))
	}
	// The 31 carry over: one more (short or long) makes 32.
	mustSelect(t, b, ofLen(3000), ws)
	if !b.Adjust() {
		t.Fatal("32 prompts carried over: no adjustment")
	}
	// 31×100 tokens, then 3000: the boundary falls between the two lengths.
	if bd := b.Boundaries(2)[0]; bd <= 100 || bd > 3000 {
		t.Fatalf("boundary %d, want between 100 and 3000", bd)
	}
	// An interval without traffic keeps the boundaries.
	before := b.Boundaries(2)
	if b.Adjust() || !slices.Equal(b.Boundaries(2), before) {
		t.Fatalf("idle interval moved the boundaries from %v to %v", before, b.Boundaries(2))
	}
}

func TestBucketImbalanceFallsBackToLeastLoaded(t *testing.T) {
	tests := []struct {
		name       string
		opts       policy.Options
		loads      []int
		wantBranch string
		want       int
	}{
		// A 100-token prompt belongs to worker 0.
		{"balanced", policy.DefaultOptions(), []int{5, 5, 5}, "bucket", 0},
		{"difference 32 is not over", policy.DefaultOptions(), []int{32, 0, 10}, "bucket", 0},
		{"difference 33 is", policy.DefaultOptions(), []int{34, 1, 10}, "imbalance", 1},
		{"relative threshold also needed", opts(func(o *policy.Options) { o.Bucket.BalanceRelThreshold = 2 }), []int{80, 45, 60}, "bucket", 0},
		{"both thresholds exceeded", opts(func(o *policy.Options) { o.Bucket.BalanceRelThreshold = 2 }), []int{80, 39, 60}, "imbalance", 1},
		{"own absolute threshold", opts(func(o *policy.Options) { o.Bucket.BalanceAbsThreshold = 4 }), []int{6, 3, 1}, "imbalance", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(len(tc.loads))
			for i, l := range tc.loads {
				defer busy(ws[i], l)()
			}
			d := mustSelect(t, must(policy.NewBucket(tc.opts)), ofLen(100), ws)
			if d.Worker != ws[tc.want] || d.Branch != tc.wantBranch {
				t.Fatalf("chose %s by %q, want %s by %q (%s)", d.Worker, d.Branch, ws[tc.want], tc.wantBranch, d.Why())
			}
		})
	}
}

func TestBucketBandsCoverHealthyWorkersOnly(t *testing.T) {
	ws := fleet(3)
	ws[0].SetHealthy(false)
	b := must(policy.NewBucket(policy.DefaultOptions()))
	// Two healthy workers: the bands are 0-2047 and 2048 up.
	if d := mustSelect(t, b, ofLen(10), ws); d.Worker != ws[1] {
		t.Fatalf("short prompt: %s, want %s", d.Worker, ws[1])
	}
	if d := mustSelect(t, b, ofLen(3000), ws); d.Worker != ws[2] {
		t.Fatalf("long prompt: %s, want %s", d.Worker, ws[2])
	}
}

func TestBucketRunStopsWithContext(t *testing.T) {
	b := must(policy.NewBucket(opts(func(o *policy.Options) { o.Bucket.AdjustInterval = time.Millisecond })))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	cancel()
	<-done
}
