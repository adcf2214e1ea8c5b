package sim

import (
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// The flood faults play an engine that attacks its subscribers' memory
// rather than its own cache: every batch stores blocks no router can place
// (their parents are never stored) and never removes them, on rank 0 and on
// ranks the engine does not have. A router that keeps whatever an engine
// tells it grows without bound; one that bounds its mirror does not.

// maxFloodBlocks and maxFloodRanks bound the flood faults, so that a
// mistyped flag does not exhaust the simulator's own memory first.
const (
	maxFloodBlocks = 1 << 20
	maxFloodRanks  = 4096
)

// kvFlood is the state of the flood faults; Engine.mu guards it.
type kvFlood struct {
	next map[int32]uint64 // per fake rank (1 and up), the next sequence number
}

// floodLocked appends n stored events to evs, each one block of PageSize
// tokens under a parent hash drawn at random and never stored.
func (e *Engine) floodLocked(evs []*smgcommon.KvCacheEvent, n int) []*smgcommon.KvCacheEvent {
	for range n {
		e.events.eventID++
		tokens := make([]uint32, e.cfg.PageSize)
		for i := range tokens {
			tokens[i] = uint32(rand.IntN(max(e.cfg.VocabSize, 1)))
		}
		evs = append(evs, &smgcommon.KvCacheEvent{EventId: e.events.eventID, Data: &smgcommon.KvCacheEvent_Stored{
			Stored: &smgcommon.KvBlocksStored{
				ParentBlockHash: proto.Int64(rand.Int64()),
				Blocks:          []*smgcommon.KvBlock{{BlockHash: rand.Int64(), TokenIds: tokens, BlockSize: int32(e.cfg.PageSize)}},
			},
		}})
	}
	return evs
}

// floodRanksLocked publishes f's flood as one batch on each rank from 1 to
// f.KVEventFloodRanks-1, to live subscribers only. An engine with ranks of
// its own publishes on them instead (each rank floods its own batches).
func (e *Engine) floodRanksLocked(f Faults) {
	if f.KVEventFloodBlocks == 0 || f.KVEventFloodRanks < 2 || e.ranks != nil {
		return
	}
	fl := &e.events.flood
	if fl.next == nil {
		fl.next = map[int32]uint64{}
	}
	for r := int32(1); r < int32(f.KVEventFloodRanks); r++ {
		msg := &smgcommon.KvEventBatch{
			SequenceNumber: fl.next[r],
			Timestamp:      float64(time.Now().UnixNano()) / 1e9,
			DpRank:         proto.Int32(r),
			Events:         e.floodLocked(nil, f.KVEventFloodBlocks),
		}
		fl.next[r]++
		for s := range e.events.subs {
			select {
			case s.ch <- kvBatch{msg: msg}:
			default:
				delete(e.events.subs, s)
				close(s.dropped)
			}
		}
	}
}
