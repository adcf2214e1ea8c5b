package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestKvEventLossAndDuplicates: the drop and duplicate faults hit every N-th
// batch of the process, so a test knows in advance which sequence numbers a
// live subscriber and a replaying one see.
func TestKvEventLossAndDuplicates(t *testing.T) {
	tests := []struct {
		name      string
		faults    Faults
		published int      // batches published with the fault on, from 0
		live      []uint64 // what a subscriber from the start sees
		replay    []uint64 // what a subscriber resuming from 1 sees afterwards
	}{
		{
			name:   "every 3rd batch is numbered but lost, for replay too",
			faults: Faults{KVEventDropEvery: 3}, published: 7,
			live:   []uint64{0, 1, 3, 4, 6},
			replay: []uint64{1, 3, 4, 6},
		},
		{
			name:   "every 2nd batch is delivered twice in a row, on replay too",
			faults: Faults{KVEventDuplicateEvery: 2}, published: 5,
			live:   []uint64{0, 1, 1, 2, 3, 3, 4},
			replay: []uint64{1, 1, 2, 3, 3, 4},
		},
		{
			name:   "a batch due for both is lost",
			faults: Faults{KVEventDropEvery: 2, KVEventDuplicateEvery: 3}, published: 6,
			live:   []uint64{0, 2, 2, 4},
			replay: []uint64{2, 2, 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				e := srv.Engine()
				e.SetFaults(tt.faults)
				recv, err := c.subscribe(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				testutil.Eventually(t, "the subscription", func() bool { return e.Stats().KVSubscribers == 1 })
				for i := range tt.published {
					oneBatch(t, c, i)
				}
				// One more batch without faults marks the end of each stream.
				e.SetFaults(Faults{})
				oneBatch(t, c, tt.published)
				end := uint64(tt.published)
				if n := e.Stats().KVNextSequence; n != end+1 {
					t.Fatalf("Stats.KVNextSequence %d, want %d: lost batches are numbered too", n, end+1)
				}
				if got, want := recvUntil(t, recv, end), append(slices.Clone(tt.live), end); !slices.Equal(got, want) {
					t.Fatalf("live subscriber got %v, want %v", got, want)
				}
				again, err := c.subscribe(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := recvUntil(t, again, end), append(slices.Clone(tt.replay), end); !slices.Equal(got, want) {
					t.Fatalf("subscriber resuming from 1 got %v, want %v", got, want)
				}
			})
		})
	}
}

// TestKvEventDelay: with the delay fault, each batch reaches subscribers no
// sooner than the delay after it was published, in order, while the engine
// goes on serving and publishing.
func TestKvEventDelay(t *testing.T) {
	t.Run("batches arrive late, in order", func(t *testing.T) {
		const delay = 100 * time.Millisecond
		forEachProtocol(t, func(c *Config) { c.Faults.KVEventDelay = delay }, func(t *testing.T, srv *Process, c client) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			recv, err := c.subscribe(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
			// Each batch is published after the request starts, so it is
			// due no sooner than delay after started[i].
			var started []time.Time
			for i := range 3 {
				started = append(started, time.Now())
				oneBatch(t, c, i)
			}
			for i, at := range started {
				b, err := recv()
				if err != nil || b.GetSequenceNumber() != uint64(i) {
					t.Fatalf("batch %v, %v, want %d", b.GetSequenceNumber(), err, i)
				}
				if waited := time.Since(at); waited < delay {
					t.Fatalf("batch %d arrived %v after its request started, before the %v delay", i, waited, delay)
				}
			}
		})
	})
	t.Run("the engine does not wait for a delayed subscriber", func(t *testing.T) {
		forEachProtocol(t, func(c *Config) { c.Faults.KVEventDelay = time.Hour }, func(t *testing.T, srv *Process, c client) {
			ctx, cancel := context.WithCancel(context.Background())
			recv, err := c.subscribe(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
			got := make(chan *smgcommon.KvEventBatch, 1)
			errc := make(chan error, 1)
			go func() {
				b, err := recv()
				got <- b
				errc <- err
			}()
			for i := range 3 {
				oneBatch(t, c, i)
			}
			if n := srv.Engine().Stats().KVNextSequence; n != 3 {
				t.Fatalf("published %d batches, want 3", n)
			}
			// The subscriber is still waiting out the delay; leaving ends it.
			cancel()
			if err := <-errc; status.Code(err) != codes.Canceled {
				t.Fatalf("delayed subscription after cancel: %v, want CANCELLED", err)
			}
			if b := <-got; b != nil {
				t.Fatalf("batch %d delivered before its delay", b.GetSequenceNumber())
			}
			testutil.Eventually(t, "the subscriber to leave", func() bool { return srv.Engine().Stats().KVSubscribers == 0 })
		})
	})
}
