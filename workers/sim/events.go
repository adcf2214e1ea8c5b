package sim

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// KV events tell a router which blocks entered and left an engine's cache, so
// it can keep an exact picture of the cache instead of guessing from routing
// history. Every cache operation that changes the cache publishes one batch,
// numbered from 1 without gaps.
//
// A subscriber gets a bounded buffer. The engine never waits for a
// subscriber: one that falls kvSubscriberBuffer batches behind is dropped,
// and its stream ends with RESOURCE_EXHAUSTED; it can resubscribe, resuming
// from the last sequence number it saw if that is still in the history.
const (
	kvSubscriberBuffer = 1024 // batches buffered per subscriber
	kvHistoryLen       = 256  // batches kept for resuming subscribers
)

type eventHub struct {
	seq     uint64
	eventID uint64
	history []*smgcommon.KvEventBatch // the last kvHistoryLen batches, oldest first
	subs    map[*kvSubscriber]struct{}
}

type kvSubscriber struct {
	ch      chan *smgcommon.KvEventBatch
	dropped chan struct{} // closed when the subscriber fell behind
}

func newEventHub() eventHub {
	return eventHub{subs: map[*kvSubscriber]struct{}{}}
}

// publishLocked turns the cache's pending changes into one batch and hands
// it to every subscriber without blocking.
func (e *Engine) publishLocked() {
	changes := e.cache.drainChanges()
	if len(changes) == 0 {
		return
	}
	h := &e.events
	batch := &smgcommon.KvEventBatch{
		Timestamp: float64(time.Now().UnixNano()) / 1e9,
		DpRank:    proto.Int32(0),
	}
	for _, c := range changes {
		h.eventID++
		ev := &smgcommon.KvCacheEvent{EventId: h.eventID}
		switch {
		case c.cleared:
			ev.Data = &smgcommon.KvCacheEvent_Cleared{Cleared: &smgcommon.KvCacheCleared{}}
		case c.removed != nil:
			ev.Data = &smgcommon.KvCacheEvent_Removed{Removed: &smgcommon.KvBlocksRemoved{BlockHashes: c.removed}}
		default:
			stored := &smgcommon.KvBlocksStored{Blocks: make([]*smgcommon.KvBlock, len(c.stored))}
			if c.parent != nil {
				stored.ParentBlockHash = proto.Int64(c.parent.hash)
			}
			for i, p := range c.stored {
				stored.Blocks[i] = &smgcommon.KvBlock{BlockHash: p.hash, TokenIds: p.tokens, BlockSize: int32(e.cfg.PageSize)}
			}
			ev.Data = &smgcommon.KvCacheEvent_Stored{Stored: stored}
		}
		batch.Events = append(batch.Events, ev)
	}
	h.seq++
	batch.SequenceNumber = h.seq
	h.history = append(h.history, batch)
	if len(h.history) > kvHistoryLen {
		h.history = append(h.history[:0], h.history[len(h.history)-kvHistoryLen:]...)
	}
	for s := range h.subs {
		select {
		case s.ch <- batch:
		default:
			delete(h.subs, s)
			close(s.dropped)
			e.log.Warn("dropped slow KV event subscriber", "sequence_number", h.seq)
		}
	}
}

// subscribeKvEvents streams event batches until ctx ends, the engine closes
// or the subscriber falls behind. start 0 means from now; otherwise batches
// from start on are replayed first, as far as the history reaches (a
// subscriber sees a gap in sequence numbers if it does not reach far enough).
func (e *Engine) subscribeKvEvents(ctx context.Context, start uint64, send func(*smgcommon.KvEventBatch) error) error {
	sub := &kvSubscriber{ch: make(chan *smgcommon.KvEventBatch, kvSubscriberBuffer), dropped: make(chan struct{})}
	e.mu.Lock()
	select {
	case <-e.closed:
		e.mu.Unlock()
		return errClosed
	default:
	}
	var replay []*smgcommon.KvEventBatch
	if start > 0 {
		for _, b := range e.events.history {
			if b.SequenceNumber >= start {
				replay = append(replay, b)
			}
		}
	}
	e.events.subs[sub] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.events.subs, sub)
		e.mu.Unlock()
	}()

	for _, b := range replay {
		if err := send(b); err != nil {
			return err
		}
	}
	for {
		select {
		case b := <-sub.ch:
			if err := send(b); err != nil {
				return err
			}
		case <-sub.dropped:
			return status.Errorf(codes.ResourceExhausted,
				"sim: KV event subscriber fell %d batches behind and was dropped; resubscribe", kvSubscriberBuffer)
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-e.closed:
			return errClosed
		}
	}
}
