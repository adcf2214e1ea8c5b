package sim

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// KV events tell a router which pages (blocks) entered and left an engine's
// cache, so that it can hold an exact copy of the cache instead of guessing
// from its routing history. The router's recovery paths are tested against
// this stream, so it behaves as an engine's does:
//
//   - Numbering. Every engine step that changes the cache publishes one
//     batch with all of its changes, evictions included: queueing a request
//     (its prompt's pages, if admitted), ending one (a finished request's
//     output pages, then the prompts of requests admitted behind it), a
//     flush. Batches are numbered per engine process from 0, without gaps. A
//     new Engine (Server.Restart) starts at 0 again, which a subscriber sees
//     as numbers going backwards.
//   - Content. A stored event carries exactly one block: one page, its
//     tokens, block_size the page size, and parent_block_hash the hash of the
//     page before it (absent for a page off the root); a chain of k new pages
//     is k consecutive stored events. An eviction is a removed event naming
//     the evicted hashes; flushing an idle cache is one cleared event. A
//     subscriber that applies every event in order holds exactly the cache
//     (Engine.CachedPages).
//   - Names. Block hashes are chained from a seed each Engine draws at random
//     (see pageCache), as vLLM seeds its block hashes per process: nobody
//     outside the engine can compute them, and after a restart the same
//     content has new names.
//   - Replay. The last Config.KVEventHistory batches are kept. A subscription
//     with start_sequence_number 0 gets batches from now on. One with start >
//     0 that the history still covers (oldest kept <= start <= next) gets the
//     kept batches numbered start and later, then the live ones, with nothing
//     lost or sent twice in between: the replay is read and the subscriber
//     registered under the lock publishing holds. A start older than the
//     history is refused with OUT_OF_RANGE; a start beyond the next number
//     (the subscriber is talking to a restarted process) gets batches from
//     now on, numbered lower than it expected.
//   - Back-pressure. The engine never waits for a subscriber. Each one has a
//     buffer of kvSubscriberBuffer batches; one that falls further behind is
//     dropped, and its stream ends with RESOURCE_EXHAUSTED. It can resubscribe
//     from the next number it expected if the history still holds it.
//   - Off. With Config.KVEvents false, SubscribeKvEvents answers UNIMPLEMENTED
//     on both protocols, as an engine started without KV events does.
//   - Faults. Faults.KVEventDropEvery loses batches (numbered, never delivered
//     nor kept), Faults.KVEventDuplicateEvery sends batches twice,
//     Faults.KVEventDelay holds batches back; each is deterministic, so a test
//     can predict what a subscriber sees. Faults.KVEventFloodBlocks and
//     KVEventFloodRanks make the engine hostile (see flood.go).

// kvSubscriberBuffer is how many batches a subscriber may fall behind before
// it is dropped.
const kvSubscriberBuffer = 1024

// kvBatch is a published batch as the engine hands it to subscribers: the
// message and how the faults in force when it was published deliver it.
type kvBatch struct {
	msg       *smgcommon.KvEventBatch
	deliverAt time.Time // not before this (Faults.KVEventDelay); zero: at once
	twice     bool      // Faults.KVEventDuplicateEvery
}

// eventHub is the engine's side of the KV event stream; Engine.mu guards it.
type eventHub struct {
	next    uint64 // the sequence number of the next batch
	eventID uint64
	history kvHistory
	subs    map[*kvSubscriber]struct{}
	flood   kvFlood // Faults.KVEventFloodBlocks and KVEventFloodRanks
}

type kvSubscriber struct {
	ch      chan kvBatch
	dropped chan struct{} // closed when the subscriber fell behind
}

func newEventHub(historyLen int) eventHub {
	return eventHub{
		history: kvHistory{limit: historyLen},
		subs:    map[*kvSubscriber]struct{}{},
	}
}

// kvHistory holds the last limit batches kept for replay. It grows as
// batches come, so a large limit costs nothing until it is used, and once
// full it is a ring, so publishing costs the same however long it is.
type kvHistory struct {
	limit int
	ring  []kvBatch
	head  int // index of the oldest batch once the ring is full; 0 before
}

func (h *kvHistory) push(b kvBatch) {
	switch {
	case h.limit == 0:
	case len(h.ring) < h.limit:
		h.ring = append(h.ring, b)
	default:
		h.ring[h.head] = b
		h.head = (h.head + 1) % len(h.ring)
	}
}

// held is the number of batches held; at(0) is the oldest of them.
func (h *kvHistory) held() int        { return len(h.ring) }
func (h *kvHistory) at(i int) kvBatch { return h.ring[(h.head+i)%len(h.ring)] }

// replay decides where a subscription that asks to start at start begins:
// the kept batches to send before the live ones, or OUT_OF_RANGE when
// batches it asks for are no longer kept. See the numbering and replay rules
// above.
func (hub *eventHub) replay(start uint64) ([]kvBatch, error) {
	if start == kvFromKept {
		out := make([]kvBatch, 0, hub.history.held())
		for i := range hub.history.held() {
			out = append(out, hub.history.at(i))
		}
		return out, nil
	}
	if start == 0 || start >= hub.next {
		return nil, nil // from now on: nothing missed, or a restarted process
	}
	h := &hub.history
	oldest := hub.next // with nothing kept, only the next batch is available
	if h.held() > 0 {
		oldest = h.at(0).msg.GetSequenceNumber()
	}
	if start < oldest {
		return nil, status.Errorf(codes.OutOfRange,
			"sim: KV event batch %d is no longer kept; the oldest available is %d (history of %d batches); resubscribe from 0 and resynchronize",
			start, oldest, h.limit)
	}
	var out []kvBatch
	for i := range h.held() {
		if b := h.at(i); b.msg.GetSequenceNumber() >= start {
			out = append(out, b)
		}
	}
	return out, nil
}

// kvFromKept, as the start of a subscription, asks for every batch the
// engine still keeps (its first among them until the history wraps), then
// the live ones. No engine RPC can ask for it: it is how a publisher that
// lives in the engine's process, as vLLM's ZMQ publisher does, sees every
// batch from the process's start even when it subscribes after the engine
// began serving.
const kvFromKept = ^uint64(0)

// everyNth reports whether the batch numbered seq is one of every n-th
// batches of the process (the n-th, 2n-th, ...: seq n-1, 2n-1, ...); never
// when n <= 0.
func everyNth(n int, seq uint64) bool {
	return n > 0 && (seq+1)%uint64(n) == 0
}

// publishLocked turns the cache's pending changes into one batch, keeps it
// for replay and hands it to every subscriber without blocking.
func (e *Engine) publishLocked() {
	changes := e.cache.drainChanges()
	e.noteEvictedLocked(changes)
	if len(changes) == 0 || !e.cfg.KVEvents {
		return
	}
	h := &e.events
	msg := &smgcommon.KvEventBatch{
		SequenceNumber: h.next,
		Timestamp:      float64(time.Now().UnixNano()) / 1e9,
		DpRank:         e.dpRankField(),
		Events:         make([]*smgcommon.KvCacheEvent, len(changes)),
	}
	h.next++
	for i, c := range changes {
		h.eventID++
		msg.Events[i] = e.kvEvent(h.eventID, c)
	}
	if e.cfg.HybridSlidingWindow > 0 {
		msg.Events = hybridEvents(msg.Events, uint32(e.cfg.HybridSlidingWindow), &h.eventID)
	}
	f := e.Faults()
	msg.Events = e.floodLocked(msg.Events, f.KVEventFloodBlocks)

	if everyNth(f.KVEventDropEvery, msg.SequenceNumber) {
		e.log.Debug("injected fault: KV event batch lost", "sequence_number", msg.SequenceNumber)
		return
	}
	b := kvBatch{msg: msg, twice: everyNth(f.KVEventDuplicateEvery, msg.SequenceNumber)}
	if f.KVEventDelay > 0 {
		b.deliverAt = time.Now().Add(f.KVEventDelay)
	}
	h.history.push(b)
	for s := range h.subs {
		select {
		case s.ch <- b:
		default:
			delete(h.subs, s)
			close(s.dropped)
			e.log.Warn("dropped slow KV event subscriber", "sequence_number", msg.SequenceNumber)
		}
	}
	e.floodRanksLocked(f)
}

// kvEvent is the wire form of one cache change.
func (e *Engine) kvEvent(id uint64, c cacheChange) *smgcommon.KvCacheEvent {
	ev := &smgcommon.KvCacheEvent{EventId: id}
	switch {
	case c.cleared:
		ev.Data = &smgcommon.KvCacheEvent_Cleared{Cleared: &smgcommon.KvCacheCleared{}}
	case c.removed != nil:
		ev.Data = &smgcommon.KvCacheEvent_Removed{Removed: &smgcommon.KvBlocksRemoved{BlockHashes: c.removed}}
	default:
		p := c.stored
		stored := &smgcommon.KvBlocksStored{Blocks: []*smgcommon.KvBlock{
			{BlockHash: p.hash, TokenIds: p.tokens, BlockSize: int32(e.cfg.PageSize)},
		}}
		if parent, ok := e.cache.parentHash(p); ok {
			stored.ParentBlockHash = proto.Int64(parent)
		}
		ev.Data = &smgcommon.KvCacheEvent_Stored{Stored: stored}
	}
	return ev
}

// openKvEvents sends a subscription's headers at once, as the engines'
// servicers do once they are subscribed to their publishers: a subscriber
// learns the stream is open without waiting for a first batch, which an idle
// engine may not publish for a long time (SMG drops a subscription that has
// not answered in 2 s). An engine without events sends none: its
// SubscribeKvEvents fails instead.
func (e *Engine) openKvEvents(stream grpc.ServerStream) error {
	if !e.cfg.KVEvents {
		return nil
	}
	return stream.SendHeader(metadata.MD{})
}

// Cache groups of a hybrid model (Config.HybridSlidingWindow), as vLLM
// publishes them: one group per kind of attention layer, each storing and
// freeing blocks under the same hashes.
const (
	fullAttentionGroup, slidingWindowGroup = 0, 1
	fullAttentionKind                      = "full_attention"
	slidingWindowKind                      = "sliding_window"
)

// hybridEvents tags events as the full-attention group's and adds the
// sliding-window group's: each stored block again, then the removal of the
// block before it, which has slid out of that group's window. Those
// removals name blocks the full-attention group still holds: a subscriber
// that applied them to its prefix index would lose what the engine can
// reuse. nextID numbers the added events.
func hybridEvents(events []*smgcommon.KvCacheEvent, window uint32, nextID *uint64) []*smgcommon.KvCacheEvent {
	out := make([]*smgcommon.KvCacheEvent, 0, 3*len(events))
	add := func(ev *smgcommon.KvCacheEvent) {
		*nextID++
		ev.EventId = *nextID
		out = append(out, ev)
	}
	for _, ev := range events {
		out = append(out, ev)
		switch d := ev.Data.(type) {
		case *smgcommon.KvCacheEvent_Stored:
			d.Stored.GroupIdx, d.Stored.KvCacheSpecKind = proto.Uint32(fullAttentionGroup), proto.String(fullAttentionKind)
			sw := proto.CloneOf(d.Stored)
			sw.GroupIdx, sw.KvCacheSpecKind = proto.Uint32(slidingWindowGroup), proto.String(slidingWindowKind)
			sw.KvCacheSpecSlidingWindow = proto.Uint32(window)
			add(&smgcommon.KvCacheEvent{Data: &smgcommon.KvCacheEvent_Stored{Stored: sw}})
			if d.Stored.ParentBlockHash != nil {
				add(&smgcommon.KvCacheEvent{Data: &smgcommon.KvCacheEvent_Removed{Removed: &smgcommon.KvBlocksRemoved{
					BlockHashes: []int64{d.Stored.GetParentBlockHash()}, GroupIdx: proto.Uint32(slidingWindowGroup)}}})
			}
		case *smgcommon.KvCacheEvent_Removed:
			d.Removed.GroupIdx = proto.Uint32(fullAttentionGroup)
		}
	}
	return out
}

// subscribeKvEvents streams event batches from start (see the replay rules
// above) until ctx ends, the engine closes or the subscriber falls behind.
func (e *Engine) subscribeKvEvents(ctx context.Context, start uint64, send func(*smgcommon.KvEventBatch) error) error {
	if start == kvFromKept {
		start-- // an RPC's largest number is beyond the next one: from now on
	}
	return e.subscribeKvEventsThen(ctx, start, send, nil)
}

// subscribeKvEventsThen is subscribeKvEvents calling registered, when not
// nil, once the subscriber is registered: every batch published after that
// reaches it (the ZMQ publisher must not lose the engine's first batches).
func (e *Engine) subscribeKvEventsThen(ctx context.Context, start uint64, send func(*smgcommon.KvEventBatch) error, registered func()) error {
	if !e.cfg.KVEvents {
		return status.Error(codes.Unimplemented,
			"sim: this engine publishes no KV events (started with --kv-events off); SubscribeKvEvents is not available")
	}
	if e.ranks != nil {
		return e.subscribeRanks(ctx, start, send)
	}
	sub := &kvSubscriber{ch: make(chan kvBatch, kvSubscriberBuffer), dropped: make(chan struct{})}
	e.mu.Lock()
	select {
	case <-e.closed:
		e.mu.Unlock()
		return errClosed
	default:
	}
	replay, err := e.events.replay(start)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	// Registered under the same lock as the replay was read: every batch is
	// either in the replay or published to sub.ch, never both.
	e.events.subs[sub] = struct{}{}
	e.mu.Unlock()
	if registered != nil {
		registered()
	}
	defer func() {
		e.mu.Lock()
		delete(e.events.subs, sub)
		e.mu.Unlock()
	}()

	for _, b := range replay {
		if err := e.deliver(ctx, sub, b, send); err != nil {
			return err
		}
	}
	for {
		select {
		case b := <-sub.ch:
			if err := e.deliver(ctx, sub, b, send); err != nil {
				return err
			}
		case <-sub.dropped:
			return errSubscriberDropped
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-e.closed:
			return errClosed
		}
	}
}

// errSubscriberDropped ends the stream of a subscriber that fell behind.
var errSubscriberDropped = status.Errorf(codes.ResourceExhausted,
	"sim: KV event subscriber fell %d batches behind and was dropped; resubscribe", kvSubscriberBuffer)

// deliver sends b once it is due (Faults.KVEventDelay), twice if the
// duplicate fault marked it. Waiting here holds back only this subscriber;
// the engine keeps publishing into its buffer meanwhile.
func (e *Engine) deliver(ctx context.Context, sub *kvSubscriber, b kvBatch, send func(*smgcommon.KvEventBatch) error) error {
	if d := time.Until(b.deliverAt); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-sub.dropped:
			return errSubscriberDropped
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-e.closed:
			return errClosed
		}
	}
	copies := 1
	if b.twice {
		copies = 2
	}
	for range copies {
		if err := send(b.msg); err != nil {
			return err
		}
	}
	return nil
}

// streamSend is what a SubscribeKvEvents stream sends each batch with:
// send, then, with Faults.KVEventLoadEcho, a load-only batch repeating the
// batch's number, as SMG's vLLM servicer sends its load heartbeats. The
// ZMQ publisher never echoes: vLLM's publisher has no such batches.
func (e *Engine) streamSend(send func(*smgcommon.KvEventBatch) error) func(*smgcommon.KvEventBatch) error {
	return func(b *smgcommon.KvEventBatch) error {
		if err := send(b); err != nil {
			return err
		}
		if !e.Faults().KVEventLoadEcho {
			return nil
		}
		return send(&smgcommon.KvEventBatch{
			SequenceNumber: b.GetSequenceNumber(),
			Timestamp:      float64(time.Now().UnixNano()) / 1e9,
			DpRank:         b.DpRank,
			Load:           &smgcommon.EngineLoad{RunningRequests: uint32(e.activeRequests()), LoadOnly: true},
		})
	}
}
