package workers

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// KV events are an engine's account of its prefix cache: which blocks entered
// it and which left. A router that applies them in order holds an exact copy
// of what every engine can reuse, instead of guessing from its own routing
// decisions. These are the protocol-neutral forms of the engines'
// SubscribeKvEvents messages; the adapters translate.

// KVEventKind says what a KVEvent did to the cache.
type KVEventKind uint8

const (
	// KVStored: Blocks entered the cache, as a chain hanging off Parent.
	KVStored KVEventKind = iota + 1
	// KVRemoved: the blocks named by Hashes left the cache.
	KVRemoved
	// KVCleared: the cache was emptied.
	KVCleared
)

func (k KVEventKind) String() string {
	switch k {
	case KVStored:
		return "stored"
	case KVRemoved:
		return "removed"
	case KVCleared:
		return "cleared"
	}
	return "unknown"
}

// KVBlock is one cached block (page) as the engine names it. Hash is the
// engine's own name for the block: opaque to the router, which never tries
// to compute it (vLLM seeds it per process), and used only to find a block's
// parent and to resolve removals.
type KVBlock struct {
	Hash   int64
	Tokens []uint32
	// BlockSize is the engine's block size as the event states it; 0 when
	// the event does not say.
	BlockSize int
	// LoRAID is the adapter the block's KV was computed with, when any.
	LoRAID *int64
}

// KVEvent is one change to an engine's cache.
type KVEvent struct {
	Kind KVEventKind
	// Stored: Blocks form a chain, the first hanging off Parent (when
	// HasParent) or off the root; each following block hangs off the one
	// before it.
	Blocks    []KVBlock
	Parent    int64
	HasParent bool
	// Removed: the blocks' hashes.
	Hashes []int64
	// Group is what the engine says of the cache group the blocks belong
	// to (stored and removed); zero when it says nothing.
	Group KVGroup
}

// KVGroup describes the cache group of an event's blocks. A hybrid model
// (full attention beside sliding-window, linear or other layers) keeps one
// group per kind of layer and publishes each group's blocks under the same
// hashes; only a full-attention group's blocks are a prefix a later prompt
// reuses whole. See prefixGroups.
type KVGroup struct {
	// Index is the engine's group_idx; HasIndex says it named one.
	Index    uint32
	HasIndex bool
	// Kind is the group's kv_cache_spec_kind ("" when unsaid) and
	// SlidingWindow its window in tokens (0 when unsaid); stored events
	// only.
	Kind          string
	SlidingWindow uint32
	// Remote: the blocks are in a pool the engine shares, not its own cache.
	Remote bool
}

// KVEventBatch is one numbered batch of an engine's events. Sequence numbers
// count batches per engine process (and per data-parallel rank), from 0, with
// no gaps: a skipped number means lost events, a number going backwards an
// engine that restarted.
type KVEventBatch struct {
	Seq       uint64
	Timestamp time.Time
	// DPRank is the data-parallel rank the batch comes from; 0 when the
	// engine does not say.
	DPRank int
	Events []KVEvent
	// LoadOnly marks a batch that carries only the engine's load
	// (load.load_only) and no event: SMG's vLLM servicer sends one, under
	// the number of the last batch, after a batch and each second the
	// stream is idle. It is a heartbeat, neither applied nor a duplicate.
	LoadOnly bool
}

// KVEventHandler applies a worker's KV events to whatever mirrors its cache.
// A subscription calls it from one goroutine per worker and rank, in
// sequence order: ApplyKVEvents sees every batch once and without gaps
// since the last ResetKVEvents for that worker and rank. Calls for different
// workers may run concurrently.
//
// A handler must keep no part of a batch once ApplyKVEvents returns: not b,
// nor its Events, nor the Blocks, Tokens, Hashes and LoRAIDs they hold. The
// subscription decodes the next batch into the same memory (a full engine
// sends a store and a removal for every page it admits, and a fresh copy of
// each batch was most of what decoding cost). Copy what must outlive the
// call (KVEventBatch.Clone).
type KVEventHandler interface {
	// ApplyKVEvents applies one batch of worker's events. b and all it
	// points to are valid only until it returns.
	ApplyKVEvents(worker string, b *KVEventBatch)
	// ResetKVEvents forgets what worker's rank told so far: the stream lost
	// events or the engine restarted, and the batches that follow start a
	// new account of the cache.
	ResetKVEvents(worker string, rank int)
	// SetKVEventMode says whether worker's cache is known from its events
	// (true: the events are the truth) or must be approximated from routing
	// decisions and reported cached tokens (false: the engine publishes no
	// events, or its stream failed for good).
	SetKVEventMode(worker string, exact bool)
}

// KVEventSource is implemented by the backends whose protocol has
// SubscribeKvEvents (both adapters); the subscription asks for it.
type KVEventSource interface {
	// SubscribeKVEvents opens the engine's event stream, replaying from
	// batch start when the engine still has it (0: from now on).
	SubscribeKVEvents(ctx context.Context, start uint64) (KVEventStream, error)
}

// KVEventsLostError is what a KVEventStream's Recv returns when it knows
// batches are lost that the numbers it could pass on would not show: a
// publisher that restarted (numbering again from 0) and whose first
// batches, From up to To, the stream could neither receive nor replay.
// Passing the batch numbered To on would read as the new process's start
// and leave the mirror without the lost batches' pages; instead the
// subscription counts the restart and the gap, resets the worker's mirror
// and subscribes afresh from 0, where the stream may yet replay them.
type KVEventsLostError struct {
	Rank     int
	From, To uint64
	// Err says why they could not be replayed.
	Err error
}

func (e *KVEventsLostError) Error() string {
	return fmt.Sprintf("KV event batches %d to %d of the restarted engine's rank %d were lost: %v", e.From, e.To-1, e.Rank, e.Err)
}

func (e *KVEventsLostError) Unwrap() error { return e.Err }

// Clone returns a deep copy of b that shares no memory with it, for a
// handler that keeps a batch past its call.
func (b *KVEventBatch) Clone() *KVEventBatch {
	c := *b
	c.Events = make([]KVEvent, len(b.Events))
	for i, e := range b.Events {
		e.Hashes = slices.Clone(e.Hashes)
		if e.Blocks != nil {
			bs := make([]KVBlock, len(e.Blocks))
			for j, bl := range e.Blocks {
				bl.Tokens = slices.Clone(bl.Tokens)
				if bl.LoRAID != nil {
					id := *bl.LoRAID
					bl.LoRAID = &id
				}
				bs[j] = bl
			}
			e.Blocks = bs
		}
		c.Events[i] = e
	}
	if b.Events == nil {
		c.Events = nil
	}
	return &c
}

// KVEventStream yields an engine's event batches in order. A batch Recv
// returns, and all it points to, is valid until the second call of Recv
// after it: a stream may decode every other batch into the same memory, and
// its reader may receive one batch while the one before is applied. Errors are gRPC
// status errors (UNIMPLEMENTED: the engine publishes no events; DATA_LOSS:
// a batch broke the protocol), or io.EOF when the engine closed the stream.
// The stream has no Close: it belongs to the ctx given to SubscribeKVEvents,
// and Recv returns once that ctx ends.
type KVEventStream interface {
	Recv() (*KVEventBatch, error)
}
