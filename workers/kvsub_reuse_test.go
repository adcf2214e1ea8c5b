package workers_test

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"unsafe"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
)

// keepingHandler breaks KVEventHandler's contract on purpose: besides a
// copy of each batch (the recorder's), it keeps the batch it was handed and
// the address of its first stored block's tokens.
type keepingHandler struct {
	*kvRecorder
	mu     sync.Mutex
	kept   []*workers.KVEventBatch
	tokens []*uint32
}

func (h *keepingHandler) ApplyKVEvents(w string, b *workers.KVEventBatch) {
	h.kvRecorder.ApplyKVEvents(w, b)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kept = append(h.kept, b)
	for _, e := range b.Events {
		if len(e.Blocks) > 0 {
			h.tokens = append(h.tokens, unsafe.SliceData(e.Blocks[0].Tokens))
			break
		}
	}
}

// TestKVEventBatchesLiveForOneCall: over real gRPC from the simulated
// engine, the batches the subscription hands on are decoded into memory
// used again two batches later (KVEventHandler's contract: a handler keeps
// nothing past its call), and each was whole while its call ran: the
// copies taken then are the engine's pages.
func TestKVEventBatchesLiveForOneCall(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name)) // 16-token pages
			reg := workers.NewRegistry()
			_ = reg.Add(w)
			h := &keepingHandler{kvRecorder: newKVRecorder()}
			subs, stop := runKVSubscriptions(t, reg, h.kvRecorder, func(c *workers.KVSubscriptionConfig) { c.Handler = h })
			testutil.Eventually(t, "the engine to see the subscriber", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })

			var prompts [][]uint32
			for i := range 4 {
				prompts = append(prompts, testutil.Tokens(uint32(1000+500*i), 64))
				generate(t, w, fmt.Sprint("r", i), prompts[i])
			}
			testutil.Eventually(t, "every prompt's pages as stored events", func() bool {
				for _, pr := range prompts {
					if !hasPages(h.kvRecorder, w.URL(), pr, 16) {
						return false
					}
				}
				st, _ := subs.Status(w.URL())
				return st.Batches == uint64(len(h.kvRecorder.applied(w.URL())))
			})
			stop() // nothing decodes any more

			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.kept) < 3 || len(h.tokens) < 3 {
				t.Fatalf("%d batches, %d with stored blocks; want at least 3", len(h.kept), len(h.tokens))
			}
			// Two decoders take turns (KVEventStream lets a reader receive
			// a batch while the one before is applied): batches two apart
			// share memory.
			for i := 2; i < len(h.kept); i++ {
				if h.kept[i] != h.kept[i-2] {
					t.Errorf("batch %d was handed on in fresh memory; batches are decoded into two by turns", i)
				}
			}
			if h.kept[0] == h.kept[1] {
				t.Errorf("batches 0 and 1 share memory: a reader receiving ahead could decode into a batch being applied")
			}
			// The tokens are the decoder's own scratch, not a copy: a batch's
			// first page sits where one two batches before sat (its scratch
			// may have grown in between, when that batch was smaller).
			inPlace := 0
			for i := 2; i < len(h.tokens); i++ {
				if h.tokens[i] == h.tokens[i-2] {
					inPlace++
				}
			}
			if inPlace == 0 {
				t.Errorf("the stored tokens of %d batches were each in fresh memory; they are decoded in place", len(h.tokens))
			}
			// The last batch kept is whole: its copy taken during the call
			// agrees with it.
			copies := h.kvRecorder.applied(w.URL())
			if last := h.kept[len(h.kept)-1]; !reflect.DeepEqual(last.Clone(), copies[len(copies)-1]) {
				t.Errorf("the last batch is %+v, its copy %+v", last, copies[len(copies)-1])
			}
		})
	}
}
