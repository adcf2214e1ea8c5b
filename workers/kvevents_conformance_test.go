package workers

// Wire conformance of the KV event messages. The batches below are written
// byte by byte with protowire, from the engines' own declaration of the
// messages, not from our generated code: if our .proto drifted from the
// engines' (a field number, a type, a lost `optional`), unmarshalling these
// bytes into smgcommon would lose or misread a field and the translation
// would not match.
//
// Upstream: github.com/smg-project/smg, crates/grpc_client/proto/common.proto
// (package smg.grpc.common), read at commit
// f8daa8835a8b4419b53125a837aaab2b3ce895c3:
//
//	SubscribeKvEventsRequest { uint64 start_sequence_number = 1; }
//	KvEventBatch    { uint64 sequence_number = 1; double timestamp = 2;
//	                  repeated KvCacheEvent events = 3; optional int32 dp_rank = 4; }
//	KvCacheEvent    { uint64 event_id = 1;
//	                  oneof data { KvBlocksStored stored = 2; KvBlocksRemoved removed = 3;
//	                               KvCacheCleared cleared = 4; } }
//	KvBlocksStored  { repeated KvBlock blocks = 1; optional int64 parent_block_hash = 2; }
//	KvBlock         { int64 block_hash = 1; repeated uint32 token_ids = 2; int32 block_size = 3;
//	                  optional int64 lora_id = 4; optional int32 cache_level = 5; }
//	KvBlocksRemoved { repeated int64 block_hashes = 1; optional int32 cache_level = 2; }
//	KvCacheCleared  {}

import (
	"math"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// wireMsg builds one message's wire bytes, field by field.
type wireMsg []byte

func (m wireMsg) varint(n protowire.Number, v uint64) wireMsg {
	return protowire.AppendVarint(protowire.AppendTag(m, n, protowire.VarintType), v)
}

// int64 and int32 values travel as the varint of their two's complement:
// ten bytes for a negative number.
func (m wireMsg) int64(n protowire.Number, v int64) wireMsg { return m.varint(n, twos(v)) }

func twos(v int64) uint64 { return uint64(v) }

func (m wireMsg) double(n protowire.Number, v float64) wireMsg {
	return protowire.AppendFixed64(protowire.AppendTag(m, n, protowire.Fixed64Type), math.Float64bits(v))
}

func (m wireMsg) sub(n protowire.Number, inner wireMsg) wireMsg {
	return protowire.AppendBytes(protowire.AppendTag(m, n, protowire.BytesType), inner)
}

// packed is a repeated scalar as proto3 writes it by default.
func (m wireMsg) packed(n protowire.Number, vs ...uint64) wireMsg {
	var body []byte
	for _, v := range vs {
		body = protowire.AppendVarint(body, v)
	}
	return m.sub(n, body)
}

// unpacked is a repeated scalar one tag per element, as older writers do;
// readers must accept both.
func (m wireMsg) unpacked(n protowire.Number, vs ...uint64) wireMsg {
	for _, v := range vs {
		m = m.varint(n, v)
	}
	return m
}

func TestKVEventWireConformance(t *testing.T) {
	// Field numbers, from the upstream declaration above.
	const (
		batchSeq, batchTimestamp, batchEvents, batchDPRank            = 1, 2, 3, 4
		eventID, eventStored, eventRemoved, eventCleared              = 1, 2, 3, 4
		storedBlocks, storedParent                                    = 1, 2
		blockHash, blockTokens, blockSize, blockLoRA, blockCacheLevel = 1, 2, 3, 4, 5
		removedHashes, removedCacheLevel                              = 1, 2
	)
	const negHash int64 = -0x6000000000000000 // 0xA000000000000000 as an int64
	// 2026-01-01T00:00:00.25Z, exact in a double.
	const stamp = 1767225600.25
	at := time.Unix(1767225600, 250_000_000)
	lora := int64(12)

	tests := []struct {
		name string
		wire wireMsg
		want *KVEventBatch
	}{
		{
			name: "sequence number, timestamp and dp_rank",
			wire: wireMsg{}.varint(batchSeq, 1<<40+7).double(batchTimestamp, stamp).varint(batchDPRank, 3),
			want: &KVEventBatch{Seq: 1<<40 + 7, Timestamp: at, DPRank: 3, Events: []KVEvent{}},
		},
		{
			name: "dp_rank absent is rank 0, and no timestamp is the zero time",
			wire: wireMsg{}.varint(batchSeq, 9),
			want: &KVEventBatch{Seq: 9, Events: []KVEvent{}},
		},
		{
			name: "dp_rank present as 0, and sequence number 0",
			wire: wireMsg{}.varint(batchSeq, 0).varint(batchDPRank, 0),
			want: &KVEventBatch{Seq: 0, Events: []KVEvent{}},
		},
		{
			name: "stored from the root: several blocks, token ids packed and unpacked, block size, LoRA, cache level dropped",
			wire: wireMsg{}.varint(batchSeq, 1).sub(batchEvents, wireMsg{}.varint(eventID, 77).sub(eventStored, wireMsg{}.
				sub(storedBlocks, wireMsg{}.int64(blockHash, negHash).packed(blockTokens, 1, 2, 3, math.MaxUint32).varint(blockSize, 4)).
				sub(storedBlocks, wireMsg{}.int64(blockHash, 1<<62).unpacked(blockTokens, 5, 6, 7, 8).varint(blockSize, 4).
					int64(blockLoRA, lora).varint(blockCacheLevel, 1)))),
			want: &KVEventBatch{Seq: 1, Events: []KVEvent{{Kind: KVStored, Blocks: []KVBlock{
				{Hash: negHash, Tokens: []uint32{1, 2, 3, math.MaxUint32}, BlockSize: 4},
				{Hash: 1 << 62, Tokens: []uint32{5, 6, 7, 8}, BlockSize: 4, LoRAID: &lora},
			}}}},
		},
		{
			name: "stored under a parent, which may be negative; block_size unset is 0",
			wire: wireMsg{}.varint(batchSeq, 2).sub(batchEvents, wireMsg{}.sub(eventStored, wireMsg{}.
				sub(storedBlocks, wireMsg{}.int64(blockHash, 42).packed(blockTokens, 9)).
				int64(storedParent, -1))),
			want: &KVEventBatch{Seq: 2, Events: []KVEvent{{Kind: KVStored, Parent: -1, HasParent: true,
				Blocks: []KVBlock{{Hash: 42, Tokens: []uint32{9}}}}}},
		},
		{
			name: "stored under parent 0 is not stored from the root",
			wire: wireMsg{}.varint(batchSeq, 2).sub(batchEvents, wireMsg{}.sub(eventStored, wireMsg{}.
				sub(storedBlocks, wireMsg{}.int64(blockHash, 42).packed(blockTokens, 9)).int64(storedParent, 0))),
			want: &KVEventBatch{Seq: 2, Events: []KVEvent{{Kind: KVStored, Parent: 0, HasParent: true,
				Blocks: []KVBlock{{Hash: 42, Tokens: []uint32{9}}}}}},
		},
		{
			name: "removed hashes, negative ones included, cache level dropped",
			wire: wireMsg{}.varint(batchSeq, 3).sub(batchEvents, wireMsg{}.varint(eventID, 5).sub(eventRemoved, wireMsg{}.
				packed(removedHashes, twos(negHash), 0, 1<<63-1, math.MaxUint64).varint(removedCacheLevel, 0))),
			want: &KVEventBatch{Seq: 3, Events: []KVEvent{{Kind: KVRemoved,
				Hashes: []int64{negHash, 0, math.MaxInt64, -1}}}},
		},
		{
			name: "cleared",
			wire: wireMsg{}.varint(batchSeq, 4).sub(batchEvents, wireMsg{}.varint(eventID, 6).sub(eventCleared, wireMsg{})),
			want: &KVEventBatch{Seq: 4, Events: []KVEvent{{Kind: KVCleared}}},
		},
		{
			name: "events of every kind keep their order",
			wire: wireMsg{}.varint(batchSeq, 5).double(batchTimestamp, stamp).varint(batchDPRank, 1).
				sub(batchEvents, wireMsg{}.sub(eventCleared, wireMsg{})).
				sub(batchEvents, wireMsg{}.sub(eventStored, wireMsg{}.sub(storedBlocks, wireMsg{}.int64(blockHash, 7).packed(blockTokens, 1, 2)))).
				sub(batchEvents, wireMsg{}.sub(eventRemoved, wireMsg{}.packed(removedHashes, 7))),
			want: &KVEventBatch{Seq: 5, Timestamp: at, DPRank: 1, Events: []KVEvent{
				{Kind: KVCleared},
				{Kind: KVStored, Blocks: []KVBlock{{Hash: 7, Tokens: []uint32{1, 2}}}},
				{Kind: KVRemoved, Hashes: []int64{7}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m smgcommon.KvEventBatch
			if err := proto.Unmarshal(tt.wire, &m); err != nil {
				t.Fatalf("our KvEventBatch cannot read the engines' bytes: %v", err)
			}
			if unknown := m.ProtoReflect().GetUnknown(); len(unknown) > 0 {
				t.Errorf("fields our proto does not know: % x", unknown)
			}
			got, err := kvEventBatchOf(&m)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Timestamp.Equal(tt.want.Timestamp) {
				t.Errorf("Timestamp %v, want %v", got.Timestamp, tt.want.Timestamp)
			}
			got.Timestamp, tt.want.Timestamp = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("translated\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestSubscribeKvEventsRequestWire: the start we ask for is field 1.
func TestSubscribeKvEventsRequestWire(t *testing.T) {
	b, err := proto.Marshal(&smgcommon.SubscribeKvEventsRequest{StartSequenceNumber: 1<<33 + 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := (wireMsg{}).varint(1, 1<<33+1); string(b) != string(want) {
		t.Errorf("request bytes % x, want % x", b, want)
	}
}

// TestKVEventMessagesMatchUpstream compares our generated descriptors with the
// upstream declaration (smg-grpc-proto 0.4.28; make proto-parity compares
// every message) field by field: number, type, repetition and presence
// (an `optional` lost in our .proto would make an absent dp_rank or parent
// indistinguishable from 0).
func TestKVEventMessagesMatchUpstream(t *testing.T) {
	type field struct {
		name     protoreflect.Name
		number   protoreflect.FieldNumber
		kind     protoreflect.Kind
		repeated bool
		presence bool
	}
	upstream := []struct {
		msg    proto.Message
		fields []field
	}{
		{&smgcommon.SubscribeKvEventsRequest{}, []field{
			{"start_sequence_number", 1, protoreflect.Uint64Kind, false, false},
			{"load_records_before_first_batch", 2, protoreflect.BoolKind, false, false},
		}},
		{&smgcommon.KvEventBatch{}, []field{
			{"sequence_number", 1, protoreflect.Uint64Kind, false, false},
			{"timestamp", 2, protoreflect.DoubleKind, false, false},
			{"events", 3, protoreflect.MessageKind, true, false},
			{"dp_rank", 4, protoreflect.Int32Kind, false, true},
			{"snapshot", 7, protoreflect.MessageKind, false, true},
			{"load", 8, protoreflect.MessageKind, false, true},
		}},
		{&smgcommon.KvCacheEvent{}, []field{
			{"event_id", 1, protoreflect.Uint64Kind, false, false},
			{"stored", 2, protoreflect.MessageKind, false, true},
			{"removed", 3, protoreflect.MessageKind, false, true},
			{"cleared", 4, protoreflect.MessageKind, false, true},
		}},
		{&smgcommon.KvBlocksStored{}, []field{
			{"blocks", 1, protoreflect.MessageKind, true, false},
			{"parent_block_hash", 2, protoreflect.Int64Kind, false, true},
			{"tier", 3, protoreflect.EnumKind, false, true},
			{"medium", 4, protoreflect.StringKind, false, true},
			{"group_idx", 5, protoreflect.Uint32Kind, false, true},
			{"kv_cache_spec_kind", 6, protoreflect.StringKind, false, true},
			{"kv_cache_spec_sliding_window", 7, protoreflect.Uint32Kind, false, true},
			{"locality", 8, protoreflect.EnumKind, false, true},
			{"ownership", 9, protoreflect.StringKind, false, true},
			{"session_id", 10, protoreflect.StringKind, false, true},
			{"lora_name", 11, protoreflect.StringKind, false, true},
			{"cache_salt", 12, protoreflect.StringKind, false, true},
		}},
		{&smgcommon.KvBlock{}, []field{
			{"block_hash", 1, protoreflect.Int64Kind, false, false},
			{"token_ids", 2, protoreflect.Uint32Kind, true, false},
			{"block_size", 3, protoreflect.Int32Kind, false, false},
			{"lora_id", 4, protoreflect.Int64Kind, false, true},
			{"cache_level", 5, protoreflect.Int32Kind, false, true},
			{"extra_keys", 6, protoreflect.MessageKind, true, false},
		}},
		{&smgcommon.KvBlocksRemoved{}, []field{
			{"block_hashes", 1, protoreflect.Int64Kind, true, false},
			{"cache_level", 2, protoreflect.Int32Kind, false, true},
			{"tier", 3, protoreflect.EnumKind, false, true},
			{"medium", 4, protoreflect.StringKind, false, true},
			{"group_idx", 5, protoreflect.Uint32Kind, false, true},
			{"locality", 6, protoreflect.EnumKind, false, true},
			{"ownership", 7, protoreflect.StringKind, false, true},
		}},
		{&smgcommon.KvCacheCleared{}, []field{
			{"ownership", 1, protoreflect.StringKind, false, true},
		}},
	}
	for _, u := range upstream {
		d, fields := u.msg.ProtoReflect().Descriptor(), u.fields
		t.Run(string(d.Name()), func(t *testing.T) {
			if d.ParentFile().Package() != "smg.grpc.common" {
				t.Errorf("package %s, want smg.grpc.common", d.ParentFile().Package())
			}
			if d.Fields().Len() != len(fields) {
				t.Errorf("%d fields, upstream has %d", d.Fields().Len(), len(fields))
			}
			for _, want := range fields {
				f := d.Fields().ByName(want.name)
				if f == nil {
					t.Errorf("no field %s", want.name)
					continue
				}
				got := field{f.Name(), f.Number(), f.Kind(), f.Cardinality() == protoreflect.Repeated, f.HasPresence()}
				if got != want {
					t.Errorf("field %+v, upstream %+v", got, want)
				}
			}
		})
	}
}
