package workers

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
)

// wireSeeds are batches as engines send them and as protobuf allows them to
// be sent: packed and unpacked repeated fields, a message field repeated
// (merged), a oneof case replaced by another, unknown fields and fields of
// the wrong wire type (both skipped), negative int32s (ten-byte varints).
func wireSeeds(t testing.TB) [][]byte {
	full, err := proto.Marshal(&smgcommon.KvEventBatch{SequenceNumber: 3, Timestamp: 1.5, DpRank: proto.Int32(1),
		Events: []*smgcommon.KvCacheEvent{
			{Data: &smgcommon.KvCacheEvent_Stored{Stored: &smgcommon.KvBlocksStored{ParentBlockHash: proto.Int64(-2),
				Blocks: []*smgcommon.KvBlock{
					{BlockHash: 5, TokenIds: []uint32{1, 2}, BlockSize: 2, LoraId: proto.Int64(1)},
					{BlockHash: -6, TokenIds: []uint32{3, 1 << 31}, BlockSize: 2}}}}},
			{Data: &smgcommon.KvCacheEvent_Removed{Removed: &smgcommon.KvBlocksRemoved{BlockHashes: []int64{5, -6}}}},
			{Data: &smgcommon.KvCacheEvent_Cleared{Cleared: &smgcommon.KvCacheCleared{}}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	tag := protowire.AppendTag
	msg := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	field := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(tag(nil, num, protowire.BytesType), body)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(nil, num, protowire.VarintType), v)
	}
	block := msg(varint(fBlockHash, 9), varint(fBlockTokens, 4), varint(fBlockTokens, 1<<40), // unpacked, a token past 32 bits
		varint(fBlockSize, uint64(1<<64-16)), varint(99, 1)) // a negative size (refused) and an unknown field
	okBlock := msg(varint(fBlockHash, 9), field(fBlockTokens, protowire.AppendVarint(nil, 7)), varint(fBlockSize, 16))
	stored := func(blocks ...[]byte) []byte {
		var b []byte
		for _, bl := range blocks {
			b = append(b, field(fStoredBlocks, bl)...)
		}
		return b
	}
	return [][]byte{
		full,
		nil, // an empty batch
		msg(varint(fBatchSeq, 1), field(fBatchEvents, field(fEventStored, stored(block)))),
		// stored twice in one event: merged, two blocks, the second parent wins.
		msg(field(fBatchEvents, msg(field(fEventStored, msg(stored(okBlock), varint(fStoredParent, 1))),
			field(fEventStored, msg(stored(okBlock), varint(fStoredParent, 2)))))),
		// stored, then removed: the oneof keeps the last case.
		msg(field(fBatchEvents, msg(field(fEventStored, stored(okBlock)), field(fEventRemoved, varint(fRemovedHashes, 3))))),
		// removed, stored, removed: the second removed starts afresh.
		msg(field(fBatchEvents, msg(field(fEventRemoved, varint(fRemovedHashes, 3)), field(fEventStored, stored(okBlock)),
			field(fEventRemoved, field(fRemovedHashes, protowire.AppendVarint(protowire.AppendVarint(nil, 4), 5)))))),
		// a events field of the wrong wire type, skipped; a negative dp_rank.
		msg(varint(fBatchEvents, 4), varint(fBatchDPRank, uint64(1<<64-1))),
		// a hybrid model's groups: a sliding-window store in a remote pool,
		// a removal from its group; a kind that is not UTF-8.
		msg(field(fBatchEvents, msg(field(fEventStored, msg(stored(okBlock), varint(fStoredGroup, 1),
			field(fStoredKind, []byte("sliding_window")), varint(fStoredWindow, 32), varint(fStoredLocality, kvLocalityRemote))))),
			field(fBatchEvents, msg(field(fEventRemoved, msg(varint(fRemovedHashes, 3), varint(fRemovedGroup, 1), varint(fRemovedLocality, 1)))))),
		msg(field(fBatchEvents, msg(field(fEventStored, msg(stored(okBlock), field(fStoredKind, []byte{0xff, 0xfe})))))),
		// truncated: a block's bytes end inside a varint.
		msg(field(fBatchEvents, field(fEventStored, stored([]byte{byte(fBlockHash << 3), 0x80})))),
	}
}

// TestKVWireIsTheGeneratedDecoding: on every seed the wire decoder returns
// what the generated types and kvEventBatchOf return, or both refuse.
func TestKVWireIsTheGeneratedDecoding(t *testing.T) {
	for i, b := range wireSeeds(t) {
		checkWireAgrees(t, i, b)
	}
}

// FuzzKVEventWire: whatever bytes an engine sends, the wire decoder never
// panics and agrees with the generated decoding: the same batch, or both
// refuse (the wire decoder always with DATA_LOSS).
func FuzzKVEventWire(f *testing.F) {
	for _, b := range wireSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkWireAgrees(t, 0, data) })
}

func checkWireAgrees(t *testing.T, i int, data []byte) {
	t.Helper()
	var d kvWire
	got, gotErr := d.decode(data)
	var m smgcommon.KvEventBatch
	var want *KVEventBatch
	wantErr := proto.Unmarshal(data, &m)
	if wantErr == nil {
		want, wantErr = kvEventBatchOf(&m)
	}
	if gotErr != nil {
		if !testutil.IsFault(gotErr, fault.Corrupt) {
			t.Fatalf("seed %d: refused with %v, want DATA_LOSS", i, gotErr)
		}
		if wantErr == nil {
			t.Fatalf("seed %d: the wire decoder refuses what the generated types accept: %v", i, gotErr)
		}
		if testutil.IsFault(wantErr, fault.Corrupt) && gotErr.Error() != wantErr.Error() {
			t.Fatalf("seed %d: refused with %q, the reference with %q", i, gotErr, wantErr)
		}
		return
	}
	if wantErr != nil {
		t.Fatalf("seed %d: the wire decoder accepts what the generated types refuse (%v): %+v", i, wantErr, got)
	}
	if !reflect.DeepEqual(normalize(got), normalize(want)) {
		t.Fatalf("seed %d: wire decoder\n%+v\ngenerated\n%+v", i, normalize(got), normalize(want))
	}
	// The decoder reuses its memory: after a batch of another shape went
	// through it (more events, blocks, tokens and hashes, a LoRA id), the
	// same bytes give the same batch again, with nothing of the other left.
	if _, err := d.decode(otherBatch(t)); err != nil {
		t.Fatal(err)
	}
	again, err := d.decode(data)
	if err != nil || !reflect.DeepEqual(normalize(again), normalize(want)) {
		t.Fatalf("seed %d: decoding again after another batch gave %+v, %v", i, again, err)
	}
}

// otherBatch is a batch larger than the seeds, to dirty a decoder's memory.
func otherBatch(t testing.TB) []byte {
	var evs []*smgcommon.KvCacheEvent
	for i := range 40 {
		lora := int64(i)
		evs = append(evs,
			&smgcommon.KvCacheEvent{Data: &smgcommon.KvCacheEvent_Stored{Stored: &smgcommon.KvBlocksStored{ParentBlockHash: proto.Int64(int64(i)),
				Blocks: []*smgcommon.KvBlock{{BlockHash: int64(1000 + i), TokenIds: []uint32{9, 9, 9, uint32(i)}, BlockSize: 4, LoraId: &lora}}}}},
			&smgcommon.KvCacheEvent{Data: &smgcommon.KvCacheEvent_Removed{Removed: &smgcommon.KvBlocksRemoved{BlockHashes: []int64{int64(i), 7, 8}}}})
	}
	b, err := proto.Marshal(&smgcommon.KvEventBatch{SequenceNumber: 99, Timestamp: 2, DpRank: proto.Int32(3), Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// normalize makes empty slices nil, so a batch compares by content.
func normalize(b *KVEventBatch) *KVEventBatch {
	c := *b
	c.Events = nil
	for _, e := range b.Events {
		if len(e.Blocks) == 0 {
			e.Blocks = nil
		}
		if len(e.Hashes) == 0 {
			e.Hashes = nil
		}
		bs := make([]KVBlock, len(e.Blocks))
		for j, bl := range e.Blocks {
			if len(bl.Tokens) == 0 {
				bl.Tokens = nil
			}
			bs[j] = bl
		}
		if e.Blocks != nil {
			e.Blocks = bs
		}
		c.Events = append(c.Events, e)
	}
	return &c
}

// BenchmarkKVEventDecode: one full engine's batch for an 8K-token request
// (a removal and a store per page, 512 of each), through the generated
// types and through the wire decoder.
func BenchmarkKVEventDecode(b *testing.B) {
	var events []*smgcommon.KvCacheEvent
	for p := range 512 {
		events = append(events, &smgcommon.KvCacheEvent{Data: &smgcommon.KvCacheEvent_Removed{
			Removed: &smgcommon.KvBlocksRemoved{BlockHashes: []int64{int64(1e6 + p)}}}})
		toks := make([]uint32, 16)
		for k := range toks {
			toks[k] = uint32(p*16 + k)
		}
		events = append(events, &smgcommon.KvCacheEvent{Data: &smgcommon.KvCacheEvent_Stored{Stored: &smgcommon.KvBlocksStored{
			ParentBlockHash: proto.Int64(int64(p)), Blocks: []*smgcommon.KvBlock{{BlockHash: int64(p + 1), TokenIds: toks, BlockSize: 16}}}}})
	}
	data, err := proto.Marshal(&smgcommon.KvEventBatch{SequenceNumber: 1, Events: events})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m smgcommon.KvEventBatch
			if err := proto.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
			if _, err := kvEventBatchOf(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		var d kvWire
		for b.Loop() {
			if _, err := d.decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkKVEventDecodeSim: a 1K-token request's batch as a full
// workers/sim engine sends it: 64 removals and 64 stores, each of one
// 16-token page, with 64-bit block hashes, event ids and token ids drawn
// from a 128K vocabulary (3-byte varints), as the router receives them in
// `kvgate bench --overhead --cpu`.
func BenchmarkKVEventDecodeSim(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var events []*smgcommon.KvCacheEvent
	id := uint64(1)
	for range 64 {
		events = append(events, &smgcommon.KvCacheEvent{EventId: id, Data: &smgcommon.KvCacheEvent_Removed{
			Removed: &smgcommon.KvBlocksRemoved{BlockHashes: []int64{rng.Int64()}}}})
		toks := make([]uint32, 16)
		for k := range toks {
			toks[k] = uint32(rng.IntN(128256))
		}
		events = append(events, &smgcommon.KvCacheEvent{EventId: id + 1, Data: &smgcommon.KvCacheEvent_Stored{Stored: &smgcommon.KvBlocksStored{
			ParentBlockHash: proto.Int64(rng.Int64()), Blocks: []*smgcommon.KvBlock{{BlockHash: rng.Int64(), TokenIds: toks, BlockSize: 16}}}}})
		id += 2
	}
	data, err := proto.Marshal(&smgcommon.KvEventBatch{SequenceNumber: 1, Timestamp: 1.7e9, Events: events})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	// The thread's CPU time as well: on the shared machine ns/op counts
	// other processes' work too.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, cpuOK := testutil.ThreadCPU()
	var d kvWire
	for b.Loop() {
		if _, err := d.decode(data); err != nil {
			b.Fatal(err)
		}
	}
	if c1, _ := testutil.ThreadCPU(); cpuOK {
		b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
	}
}
