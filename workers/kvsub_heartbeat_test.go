package workers_test

import (
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
)

// TestKVEventsLoadHeartbeatsAreNotDuplicates: SMG's vLLM servicer follows
// the batches of its SubscribeKvEvents stream with load-only batches
// (load.load_only) that repeat the last sequence number, one a second while
// the engine is idle. They carry no event: the subscription neither applies
// them nor counts them as duplicates, which would report a healthy stream as
// a faulty one.
func TestKVEventsLoadHeartbeatsAreNotDuplicates(t *testing.T) {
	cfg := simtest.Config("vllm")
	cfg.Faults.KVEventLoadEcho = true
	srv, w := simtest.Worker(t, cfg)
	reg := workers.NewRegistry()
	_ = reg.Add(w)
	rec := newKVRecorder()
	subs, _ := runKVSubscriptions(t, reg, rec)
	testutil.Eventually(t, "the engine to see the subscriber", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })

	for i := range 3 {
		generate(t, w, "p"+string(rune('a'+i)), testutil.Tokens(uint32(1000+500*i), 64))
	}
	// The stream is ordered: once a later prompt's pages are mirrored, the
	// echoes of the three prompts' batches have been read.
	fence := testutil.Tokens(9000, 64)
	generate(t, w, "fence", fence)
	var st workers.KVEventStatus
	testutil.Eventually(t, "every batch applied", func() bool {
		st, _ = subs.Status(w.URL())
		return hasPages(rec, w.URL(), fence, 16) && st.Batches == uint64(len(rec.applied(w.URL())))
	})
	if st.Duplicates != 0 || st.Gaps != 0 || st.Batches == 0 {
		t.Fatalf("status %+v: want the batches applied, no duplicate and no gap", st)
	}
	for _, b := range rec.applied(w.URL()) {
		if len(b.Events) == 0 {
			t.Errorf("batch %d applied without events: a load-only heartbeat", b.Seq)
		}
	}
}
