package workers

import (
	"math"
	"time"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/fault"
)

// kvEventBatchOf translates one engine batch decoded through the generated
// types: the reference kvWire is held to (it was the production path before
// kvWire, and what follows is its contract). It refuses, with a DATA_LOSS
// status naming the event and block, what no engine sends on purpose and no
// mirror could apply faithfully: an event without data, a stored event
// without blocks, a block without tokens, a negative block size, a rank
// outside [0, maxKVRank), a timestamp that is not a time. Fields the router
// does not use (event_id, cache_level) are dropped.
func kvEventBatchOf(m *smgcommon.KvEventBatch) (*KVEventBatch, error) {
	seq := m.GetSequenceNumber()
	bad := func(format string, args ...any) error {
		return fault.Newf(fault.Corrupt, "KV event batch %d breaks the protocol: "+format, append([]any{seq}, args...)...)
	}
	b := &KVEventBatch{Seq: seq, Events: make([]KVEvent, 0, len(m.GetEvents()))}

	switch ts := m.GetTimestamp(); {
	case math.IsNaN(ts) || ts < 0 || ts > maxKVTimestamp:
		return nil, bad("timestamp %v is not a time", ts)
	case ts > 0: // 0: the engine did not say
		sec, frac := math.Modf(ts)
		b.Timestamp = time.Unix(int64(sec), int64(frac*1e9))
	}
	if m.DpRank != nil {
		if *m.DpRank < 0 || *m.DpRank >= maxKVRank {
			return nil, bad("dp_rank %d outside [0, %d)", *m.DpRank, maxKVRank)
		}
		b.DPRank = int(*m.DpRank)
	}

	for i, e := range m.GetEvents() {
		var ev KVEvent
		switch d := e.GetData().(type) {
		case *smgcommon.KvCacheEvent_Stored:
			blocks := d.Stored.GetBlocks()
			if len(blocks) == 0 {
				return nil, bad("event %d stores no blocks", i)
			}
			ev = KVEvent{Kind: KVStored, Blocks: make([]KVBlock, len(blocks))}
			if p := d.Stored.ParentBlockHash; p != nil {
				ev.Parent, ev.HasParent = *p, true
			}
			for j, bl := range blocks {
				if len(bl.GetTokenIds()) == 0 {
					return nil, bad("event %d block %d has no tokens", i, j)
				}
				if bl.GetBlockSize() < 0 {
					return nil, bad("event %d block %d has block_size %d", i, j, bl.GetBlockSize())
				}
				kb := KVBlock{Hash: bl.GetBlockHash(), Tokens: bl.GetTokenIds(), BlockSize: int(bl.GetBlockSize())}
				if bl.LoraId != nil {
					id := *bl.LoraId
					kb.LoRAID = &id
				}
				ev.Blocks[j] = kb
			}
			st := d.Stored
			ev.Group = KVGroup{Index: st.GetGroupIdx(), HasIndex: st.GroupIdx != nil, Kind: st.GetKvCacheSpecKind(),
				SlidingWindow: st.GetKvCacheSpecSlidingWindow(), Remote: st.GetLocality() == smgcommon.KvCacheLocality_KV_CACHE_LOCALITY_REMOTE}
		case *smgcommon.KvCacheEvent_Removed:
			rm := d.Removed
			ev = KVEvent{Kind: KVRemoved, Hashes: rm.GetBlockHashes(), Group: KVGroup{Index: rm.GetGroupIdx(), HasIndex: rm.GroupIdx != nil,
				Remote: rm.GetLocality() == smgcommon.KvCacheLocality_KV_CACHE_LOCALITY_REMOTE}}
		case *smgcommon.KvCacheEvent_Cleared:
			ev = KVEvent{Kind: KVCleared}
		default:
			return nil, bad("event %d carries no data", i)
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}
