package workers

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestKVEventBatchProtocolViolations: a batch no engine sends on purpose is
// refused whole, with DATA_LOSS naming what is wrong, so that the
// subscription starts again from a clean state instead of applying part of
// it.
func TestKVEventBatchProtocolViolations(t *testing.T) {
	block := func(tokens ...uint32) *smgcommon.KvBlock {
		return &smgcommon.KvBlock{BlockHash: 1, TokenIds: tokens, BlockSize: 2}
	}
	stored := func(blocks ...*smgcommon.KvBlock) *smgcommon.KvCacheEvent {
		return &smgcommon.KvCacheEvent{Data: &smgcommon.KvCacheEvent_Stored{Stored: &smgcommon.KvBlocksStored{Blocks: blocks}}}
	}
	fine := stored(block(1, 2))
	tests := []struct {
		name  string
		batch *smgcommon.KvEventBatch
		says  string
	}{
		{"an event with no data", &smgcommon.KvEventBatch{Events: []*smgcommon.KvCacheEvent{fine, {EventId: 3}}},
			"event 1 carries no data"},
		{"a stored event with no blocks", &smgcommon.KvEventBatch{Events: []*smgcommon.KvCacheEvent{stored()}},
			"event 0 stores no blocks"},
		{"a block with no tokens", &smgcommon.KvEventBatch{Events: []*smgcommon.KvCacheEvent{stored(block(1, 2), block())}},
			"event 0 block 1 has no tokens"},
		{"a negative block size", &smgcommon.KvEventBatch{Events: []*smgcommon.KvCacheEvent{
			stored(&smgcommon.KvBlock{TokenIds: []uint32{1}, BlockSize: -16})}}, "block_size -16"},
		{"a negative rank", &smgcommon.KvEventBatch{DpRank: proto.Int32(-1), Events: []*smgcommon.KvCacheEvent{fine}},
			"dp_rank -1"},
		{"a rank beyond any deployment", &smgcommon.KvEventBatch{DpRank: proto.Int32(1 << 20)}, "dp_rank 1048576"},
		{"a timestamp that is not a number", &smgcommon.KvEventBatch{Timestamp: math.NaN()}, "timestamp NaN"},
		{"a negative timestamp", &smgcommon.KvEventBatch{Timestamp: -1}, "timestamp -1"},
		{"an infinite timestamp", &smgcommon.KvEventBatch{Timestamp: math.Inf(1)}, "timestamp +Inf"},
		{"a timestamp beyond what time.Time holds", &smgcommon.KvEventBatch{Timestamp: 1e300}, "timestamp 1e+300"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.batch.SequenceNumber = 41
			for name, decode := range decoders {
				b, err := decode(t, tt.batch)
				if b != nil || !testutil.IsFault(err, fault.Corrupt) {
					t.Fatalf("%s: got %+v, %v; want no batch and DATA_LOSS", name, b, err)
				}
				if msg := status.Convert(err).Message(); !strings.Contains(msg, "batch 41") || !strings.Contains(msg, tt.says) {
					t.Errorf("%s: message %q does not name batch 41 and %q", name, msg, tt.says)
				}
			}
		})
	}
}

// decoders are the two ways a batch is read: the wire decoder the stream
// uses, and the generated types with kvEventBatchOf, its reference.
var decoders = map[string]func(t *testing.T, m *smgcommon.KvEventBatch) (*KVEventBatch, error){
	"wire": func(t *testing.T, m *smgcommon.KvEventBatch) (*KVEventBatch, error) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return new(kvWire).decode(b)
	},
	"generated": func(_ *testing.T, m *smgcommon.KvEventBatch) (*KVEventBatch, error) { return kvEventBatchOf(m) },
}

// TestKVEventBatchLenient: what is unusual but harmless passes.
func TestKVEventBatchLenient(t *testing.T) {
	tests := []struct {
		name  string
		batch *smgcommon.KvEventBatch
	}{
		{"no events at all", &smgcommon.KvEventBatch{SequenceNumber: 1}},
		{"a removal of nothing", &smgcommon.KvEventBatch{Events: []*smgcommon.KvCacheEvent{
			{Data: &smgcommon.KvCacheEvent_Removed{Removed: &smgcommon.KvBlocksRemoved{}}}}}},
		{"a block with fewer tokens than its size", &smgcommon.KvEventBatch{Events: []*smgcommon.KvCacheEvent{
			{Data: &smgcommon.KvCacheEvent_Stored{Stored: &smgcommon.KvBlocksStored{Blocks: []*smgcommon.KvBlock{
				{TokenIds: []uint32{1, 2, 3}, BlockSize: 16}}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, decode := range decoders {
				if _, err := decode(t, tt.batch); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}

// FuzzKVEventBatchOf: whatever bytes an engine sends, the translation never
// panics, and a batch it accepts is whole.
func FuzzKVEventBatchOf(f *testing.F) {
	seed, _ := proto.Marshal(&smgcommon.KvEventBatch{SequenceNumber: 3, Timestamp: 1.5, DpRank: proto.Int32(1),
		Events: []*smgcommon.KvCacheEvent{
			{Data: &smgcommon.KvCacheEvent_Stored{Stored: &smgcommon.KvBlocksStored{ParentBlockHash: proto.Int64(-2),
				Blocks: []*smgcommon.KvBlock{{BlockHash: 5, TokenIds: []uint32{1, 2}, BlockSize: 2, LoraId: proto.Int64(1)}}}}},
			{Data: &smgcommon.KvCacheEvent_Removed{Removed: &smgcommon.KvBlocksRemoved{BlockHashes: []int64{5}}}},
			{Data: &smgcommon.KvCacheEvent_Cleared{Cleared: &smgcommon.KvCacheCleared{}}},
		}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m smgcommon.KvEventBatch
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		b, err := kvEventBatchOf(&m)
		if err != nil {
			if !testutil.IsFault(err, fault.Corrupt) {
				t.Fatalf("refused with %v, want DATA_LOSS", err)
			}
			return
		}
		if b.DPRank < 0 || b.DPRank >= maxKVRank || len(b.Events) != len(m.GetEvents()) {
			t.Fatalf("accepted a batch with rank %d and %d of %d events", b.DPRank, len(b.Events), len(m.GetEvents()))
		}
		for _, e := range b.Events {
			if e.Kind < KVStored || e.Kind > KVCleared || (e.Kind == KVStored && len(e.Blocks) == 0) {
				t.Fatalf("accepted event %+v", e)
			}
			for _, bl := range e.Blocks {
				if len(bl.Tokens) == 0 || bl.BlockSize < 0 {
					t.Fatalf("accepted block %+v", bl)
				}
			}
		}
	})
}
