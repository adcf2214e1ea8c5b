package workers_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/workers"
)

// kvBurst is an engine whose stream has n batches ready at once (numbered
// 0 to n-1), as a burst already in the transport's buffers, and then
// nothing. It counts the Recv calls and when each batch left Recv.
type kvBurst struct {
	workers.Backend
	n int

	mu    sync.Mutex
	recvs int
	out   []time.Time // by sequence number
}

func (e *kvBurst) SubscribeKVEvents(ctx context.Context, _ uint64) (workers.KVEventStream, error) {
	return kvBurstStream{e: e, ctx: ctx}, nil
}

type kvBurstStream struct {
	e   *kvBurst
	ctx context.Context
}

func (s kvBurstStream) Recv() (*workers.KVEventBatch, error) {
	// Let the subscription's other goroutine park in its select first:
	// receiveChecker waits for the bubble to block while the subscription
	// holds its lock, and a goroutine that reaches for that lock then is
	// not durably blocked, so the wait would never end.
	synctest.Wait()
	e := s.e
	e.mu.Lock()
	seq := e.recvs
	e.recvs++
	if seq < e.n {
		e.out = append(e.out, time.Now())
	}
	e.mu.Unlock()
	if seq < e.n {
		return batchOf(0, uint64(seq)), nil
	}
	<-s.ctx.Done()
	return nil, status.FromContextError(s.ctx.Err()).Err()
}

// receiveChecker is a handler that, when a batch is applied, waits for
// every other goroutine of the bubble to block and then writes down how
// many Recv calls had been made and how long after its Recv the batch was
// applied.
type receiveChecker struct {
	e   *kvBurst
	all chan struct{} // closed when the burst's last batch is applied

	mu      sync.Mutex
	applied []uint64
	ahead   []int           // Recv calls beyond the batch's own, by batch
	waited  []time.Duration // from Recv returning the batch to its call
}

func (c *receiveChecker) ApplyKVEvents(_ string, b *workers.KVEventBatch) {
	synctest.Wait()
	c.e.mu.Lock()
	ahead, waited := c.e.recvs-int(b.Seq)-1, time.Since(c.e.out[b.Seq])
	c.e.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applied = append(c.applied, b.Seq)
	c.ahead = append(c.ahead, ahead)
	c.waited = append(c.waited, waited)
	if len(c.applied) == c.e.n {
		close(c.all)
	}
}

func (c *receiveChecker) ResetKVEvents(string, int)   {}
func (c *receiveChecker) SetKVEventMode(string, bool) {}

// TestKVSubscriptionAppliesEachBatchBeforeReceivingTheNext: with a burst of
// batches ready at once, the subscription applies each in the engine's
// order, at the instant Recv returned it, and asks for the next only once
// it has been applied. No batch waits behind a later one or for a timer:
// what delays a batch's application is its own decoding, never a hand-off
// or a gathering of batches.
func TestKVSubscriptionAppliesEachBatchBeforeReceivingTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const url, n = "grpc://10.0.0.1:30000", 50
		e := &kvBurst{n: n}
		reg := workers.NewRegistry()
		if err := reg.Add(workers.NewWorker(url, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, e, nil)); err != nil {
			t.Fatal(err)
		}
		c := &receiveChecker{e: e, all: make(chan struct{})}
		subs, err := workers.NewKVSubscriptions(kvTestConfig(c))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- subs.Run(ctx, reg) }()
		<-c.all
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}

		for i, seq := range c.applied {
			if seq != uint64(i) {
				t.Fatalf("batches applied in the order %v; want the engine's, 0 to %d", c.applied, n-1)
			}
			if c.ahead[i] != 0 {
				t.Errorf("batch %d: %d more batches received before it was applied; want each applied before the next is received", i, c.ahead[i])
			}
			if c.waited[i] != 0 {
				t.Errorf("batch %d applied %v after it was received; want at once", i, c.waited[i])
			}
		}
	})
}
