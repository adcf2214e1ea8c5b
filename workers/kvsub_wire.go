package workers

// A KV event batch is decoded from its wire bytes straight into a
// KVEventBatch. Through the generated types a batch cost an allocation per
// event, per oneof wrapper, per block and per token slice, and then a
// translation allocating again: with a full engine (a removal and a store
// for every page of every request) that decoding and its garbage were most
// of what the KV event mirror cost the router. Here a batch is parsed once
// into scratch space the stream reuses, and the batch handed on is laid out
// over that space (its tokens and hashes are the scratch slices): nothing
// is copied or allocated per batch, which KVEventHandler's contract allows
// (a handler keeps no part of a batch past its call). It is checked as
// kvEventBatchOf checks the generated message: the two agree on every
// input (FuzzKVEventWire), the generated path being the reference.

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/pbwire"
)

// Field numbers of smg.grpc.common's KV event messages (common.proto).
const (
	fBatchSeq       = 1 // KvEventBatch.sequence_number, uint64
	fBatchTimestamp = 2 // KvEventBatch.timestamp, double
	fBatchEvents    = 3 // KvEventBatch.events, repeated KvCacheEvent
	fBatchDPRank    = 4 // KvEventBatch.dp_rank, optional int32
	fBatchSnapshot  = 7 // KvEventBatch.snapshot, KvSnapshotChunk
	fBatchLoad      = 8 // KvEventBatch.load, EngineLoad

	fEventStored  = 2 // KvCacheEvent.stored, KvBlocksStored (oneof data)
	fEventRemoved = 3 // KvCacheEvent.removed, KvBlocksRemoved (oneof data)
	fEventCleared = 4 // KvCacheEvent.cleared, KvCacheCleared (oneof data)

	fStoredBlocks   = 1 // KvBlocksStored.blocks, repeated KvBlock
	fStoredParent   = 2 // KvBlocksStored.parent_block_hash, optional int64
	fStoredGroup    = 5 // KvBlocksStored.group_idx, optional uint32
	fStoredKind     = 6 // KvBlocksStored.kv_cache_spec_kind, optional string
	fStoredWindow   = 7 // KvBlocksStored.kv_cache_spec_sliding_window, optional uint32
	fStoredLocality = 8 // KvBlocksStored.locality, optional KvCacheLocality

	fBlockHash      = 1 // KvBlock.block_hash, int64
	fBlockTokens    = 2 // KvBlock.token_ids, repeated uint32
	fBlockSize      = 3 // KvBlock.block_size, int32
	fBlockLoRA      = 4 // KvBlock.lora_id, optional int64
	fBlockExtraKeys = 6 // KvBlock.extra_keys, repeated KvBlockExtraKey

	fRemovedHashes    = 1 // KvBlocksRemoved.block_hashes, repeated int64
	fRemovedMedium    = 4 // KvBlocksRemoved.medium, optional string
	fRemovedGroup     = 5 // KvBlocksRemoved.group_idx, optional uint32
	fRemovedLocality  = 6 // KvBlocksRemoved.locality, optional KvCacheLocality
	fRemovedOwnership = 7 // KvBlocksRemoved.ownership, optional string

	// kvLocalityRemote is KV_CACHE_LOCALITY_REMOTE.
	kvLocalityRemote = 2
)

// kvWire decodes one stream's batches; its scratch space, and the batch it
// returns, are reused from batch to batch, so it serves one goroutine and
// a batch lives until the next decode.
type kvWire struct {
	events []wireEvent
	blocks []wireBlock
	tokens []uint32
	hashes []int64
	out    wireOut
}

// wireOut is the memory of the batch decode returns: its tokens and hashes
// are kvWire's scratch slices, the rest lives here.
type wireOut struct {
	batch  KVEventBatch
	events []KVEvent
	blocks []KVBlock
	loras  []int64
}

// wireEvent is an event as parsed: its blocks and hashes are ranges of the
// decoder's scratch slices.
type wireEvent struct {
	kind             KVEventKind
	set              bool // a oneof case was present
	parent           int64
	hasParent        bool
	blockLo, blockHi int
	hashLo, hashHi   int
	group            KVGroup
}

type wireBlock struct {
	hash         int64
	tokLo, tokHi int
	size         int32
	lora         int64
	hasLoRA      bool
}

// errWire says the bytes are not a KvEventBatch at all.
type errWire struct{ why string }

func (e errWire) Error() string { return e.why }

// decode parses b into a batch, with the checks of kvEventBatchOf.
func (d *kvWire) decode(b []byte) (*KVEventBatch, error) {
	d.events, d.blocks, d.tokens, d.hashes = d.events[:0], d.blocks[:0], d.tokens[:0], d.hashes[:0]
	var (
		seq       uint64
		ts        float64
		rank      int32
		hasRank   bool
		loadOnly  bool
		malformed error
	)
	fail := func(why string) { malformed = errWire{why} }
	for len(b) > 0 && malformed == nil {
		num, typ, n := pbwire.ConsumeTag(b)
		if n < 0 {
			fail("a field's tag")
			break
		}
		b = b[n:]
		switch {
		case num == fBatchSeq && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				fail("sequence_number")
				break
			}
			seq, b = v, b[m:]
		case num == fBatchTimestamp && typ == protowire.Fixed64Type:
			v, m := protowire.ConsumeFixed64(b)
			if m < 0 {
				fail("timestamp")
				break
			}
			ts, b = math.Float64frombits(v), b[m:]
		case num == fBatchDPRank && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				fail("dp_rank")
				break
			}
			rank, hasRank, b = int32(v), true, b[m:]
		case num == fBatchEvents && typ == protowire.BytesType:
			v, m := pbwire.ConsumeBytes(b)
			if m < 0 {
				fail("events")
				break
			}
			b = b[m:]
			if err := d.event(v); err != nil {
				malformed = err
			}
		case (num == fBatchSnapshot || num == fBatchLoad) && typ == protowire.BytesType:
			// Not read by the router; checked as protobuf checks it.
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				fail(fmt.Sprintf("field %d", num))
				break
			}
			b = b[m:]
			md := (&smgcommon.KvEventBatch{}).ProtoReflect().Descriptor().Fields().ByNumber(num).Message()
			if err := wellFormed(v, md); err != nil {
				malformed = err
			} else if num == fBatchLoad {
				loadOnly = loadOnlyOf(v)
			}
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				fail(fmt.Sprintf("field %d", num))
				break
			}
			b = b[m:]
		}
	}
	bad := func(format string, args ...any) error {
		return fault.Newf(fault.Corrupt, "KV event batch %d breaks the protocol: "+format, append([]any{seq}, args...)...)
	}
	if malformed != nil {
		return nil, fault.Newf(fault.Corrupt, "a KV event batch is not a valid smg.grpc.common.KvEventBatch: %v is malformed", malformed)
	}

	out := &d.out.batch
	*out = KVEventBatch{Seq: seq, LoadOnly: loadOnly && len(d.events) == 0}
	switch {
	case math.IsNaN(ts) || ts < 0 || ts > maxKVTimestamp:
		return nil, bad("timestamp %v is not a time", ts)
	case ts > 0:
		sec, frac := math.Modf(ts)
		out.Timestamp = time.Unix(int64(sec), int64(frac*1e9))
	}
	if hasRank {
		if rank < 0 || rank >= maxKVRank {
			return nil, bad("dp_rank %d outside [0, %d)", rank, maxKVRank)
		}
		out.DPRank = int(rank)
	}

	// Check, then lay the batch out over the scratch space: its tokens and
	// hashes are the scratch slices themselves, its events and blocks
	// slices the decoder keeps. Nothing is copied or allocated once the
	// slices have grown; the batch is valid until the next decode (see
	// KVEventHandler: handlers keep no part of it).
	nb, nl := 0, 0
	for i := range d.events {
		e := &d.events[i]
		switch {
		case !e.set:
			return nil, bad("event %d carries no data", i)
		case e.kind == KVStored && e.blockHi == e.blockLo:
			return nil, bad("event %d stores no blocks", i)
		}
		if e.kind != KVStored {
			continue
		}
		for j := e.blockLo; j < e.blockHi; j++ {
			bl := &d.blocks[j]
			if bl.tokHi == bl.tokLo {
				return nil, bad("event %d block %d has no tokens", i, j-e.blockLo)
			}
			if bl.size < 0 {
				return nil, bad("event %d block %d has block_size %d", i, j-e.blockLo, bl.size)
			}
			if bl.hasLoRA {
				nl++
			}
		}
		nb += e.blockHi - e.blockLo
	}
	out.Events = resize(&d.out.events, len(d.events))
	blocks := resize(&d.out.blocks, nb)[:0]
	loras := resize(&d.out.loras, nl)[:0] // never grows below: LoRAID points into it
	for i := range d.events {
		e := &d.events[i]
		ev := &out.Events[i]
		*ev = KVEvent{Kind: e.kind}
		switch e.kind {
		case KVStored:
			ev.Parent, ev.HasParent = e.parent, e.hasParent
			lo := len(blocks)
			for j := e.blockLo; j < e.blockHi; j++ {
				bl := &d.blocks[j]
				kb := KVBlock{Hash: bl.hash, Tokens: d.tokens[bl.tokLo:bl.tokHi:bl.tokHi], BlockSize: int(bl.size)}
				if bl.hasLoRA {
					loras = append(loras, bl.lora)
					kb.LoRAID = &loras[len(loras)-1]
				}
				blocks = append(blocks, kb)
			}
			ev.Blocks = blocks[lo:len(blocks):len(blocks)]
			ev.Group = e.group
		case KVRemoved:
			ev.Group = e.group
			ev.Hashes = d.hashes[e.hashLo:e.hashHi:e.hashHi]
		}
	}
	return out, nil
}

// resize returns *s at length n, growing it when short; the elements are
// whatever the last batch left, for the caller to overwrite.
func resize[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n, n+n/4)
	}
	*s = (*s)[:n]
	return *s
}

// event parses one KvCacheEvent. As protobuf merges a message field that
// appears twice, a second stored (or removed) of the same event adds its
// blocks (hashes) to the first's; a different case replaces it, as a oneof
// does.
func (d *kvWire) event(b []byte) error {
	d.events = append(d.events, wireEvent{})
	e := &d.events[len(d.events)-1]
	for len(b) > 0 {
		num, typ, n := pbwire.ConsumeTag(b)
		if n < 0 {
			return errWire{"an event's tag"}
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == fEventStored || num == fEventRemoved || num == fEventCleared) {
			v, m := pbwire.ConsumeBytes(b)
			if m < 0 {
				return errWire{"an event's data"}
			}
			b = b[m:]
			kind := KVCleared
			switch num {
			case fEventStored:
				kind = KVStored
			case fEventRemoved:
				kind = KVRemoved
			}
			if !e.set || e.kind != kind {
				*e = wireEvent{kind: kind, set: true, blockLo: len(d.blocks), blockHi: len(d.blocks),
					hashLo: len(d.hashes), hashHi: len(d.hashes)}
			}
			var err error
			switch kind {
			case KVStored:
				err = d.stored(e, v)
			case KVRemoved:
				err = d.removed(e, v)
			case KVCleared:
				err = wellFormed(v, (&smgcommon.KvCacheCleared{}).ProtoReflect().Descriptor())
			}
			if err != nil {
				return err
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return errWire{fmt.Sprintf("an event's field %d", num)}
		}
		b = b[m:]
	}
	return nil
}

func (d *kvWire) stored(e *wireEvent, b []byte) error {
	for len(b) > 0 {
		num, typ, n := pbwire.ConsumeTag(b)
		if n < 0 {
			return errWire{"a stored event's tag"}
		}
		b = b[n:]
		switch {
		case num == fStoredBlocks && typ == protowire.BytesType:
			v, m := pbwire.ConsumeBytes(b)
			if m < 0 {
				return errWire{"a block"}
			}
			b = b[m:]
			if err := d.block(v); err != nil {
				return err
			}
			e.blockHi = len(d.blocks)
		case num == fStoredParent && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return errWire{"parent_block_hash"}
			}
			b = b[m:]
			e.parent, e.hasParent = int64(v), true
		case num == fStoredKind && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errWire{"kv_cache_spec_kind"}
			}
			b = b[m:]
			if !utf8.Valid(v) {
				return errWire{"kv_cache_spec_kind is not UTF-8"}
			}
			e.group.Kind = kvGroupKind(v)
		case typ == protowire.BytesType && kvStoredStrings(num):
			v, m := protowire.ConsumeBytes(b)
			if m < 0 || !utf8.Valid(v) {
				return errWire{fmt.Sprintf("a stored event's field %d", num)}
			}
			b = b[m:]
		case typ == protowire.VarintType && (num == fStoredGroup || num == fStoredWindow || num == fStoredLocality):
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return errWire{fmt.Sprintf("a stored event's field %d", num)}
			}
			b = b[m:]
			switch num {
			case fStoredGroup:
				e.group.Index, e.group.HasIndex = uint32(v), true
			case fStoredWindow:
				e.group.SlidingWindow = uint32(v)
			default:
				e.group.Remote = int32(v) == kvLocalityRemote
			}
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return errWire{fmt.Sprintf("a stored event's field %d", num)}
			}
			b = b[m:]
		}
	}
	return nil
}

func (d *kvWire) block(b []byte) error {
	bl := wireBlock{tokLo: len(d.tokens)}
	for len(b) > 0 {
		num, typ, n := pbwire.ConsumeTag(b)
		if n < 0 {
			return errWire{"a block's tag"}
		}
		b = b[n:]
		var m int
		switch {
		case num == fBlockHash && typ == protowire.VarintType:
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			bl.hash = int64(v)
		case num == fBlockSize && typ == protowire.VarintType:
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			bl.size = int32(v)
		case num == fBlockLoRA && typ == protowire.VarintType:
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			bl.lora, bl.hasLoRA = int64(v), true
		case num == fBlockTokens && (typ == protowire.VarintType || typ == protowire.BytesType):
			m = pbwire.AppendVarints(&d.tokens, typ, b)
		case num == fBlockExtraKeys && typ == protowire.BytesType:
			var v []byte
			if v, m = protowire.ConsumeBytes(b); m >= 0 && wellFormed(v, (&smgcommon.KvBlockExtraKey{}).ProtoReflect().Descriptor()) != nil {
				m = -1
			}
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return errWire{fmt.Sprintf("a block's field %d", num)}
		}
		b = b[m:]
	}
	bl.tokHi = len(d.tokens)
	d.blocks = append(d.blocks, bl)
	return nil
}

func (d *kvWire) removed(e *wireEvent, b []byte) error {
	for len(b) > 0 {
		num, typ, n := pbwire.ConsumeTag(b)
		if n < 0 {
			return errWire{"a removed event's tag"}
		}
		b = b[n:]
		var m int
		switch {
		case num == fRemovedHashes && (typ == protowire.VarintType || typ == protowire.BytesType):
			m = pbwire.AppendVarints(&d.hashes, typ, b)
		case typ == protowire.BytesType && (num == fRemovedMedium || num == fRemovedOwnership):
			var v []byte
			v, m = protowire.ConsumeBytes(b)
			if m >= 0 && !utf8.Valid(v) {
				m = -1
			}
		case typ == protowire.VarintType && (num == fRemovedGroup || num == fRemovedLocality):
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			if num == fRemovedGroup {
				e.group.Index, e.group.HasIndex = uint32(v), true
			} else {
				e.group.Remote = int32(v) == kvLocalityRemote
			}
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return errWire{fmt.Sprintf("a removed event's field %d", num)}
		}
		b = b[m:]
	}
	e.hashHi = len(d.hashes)
	return nil
}

// kvStoredStrings reports whether num is one of KvBlocksStored's string
// fields the router does not read (medium, ownership, session_id, lora_name,
// cache_salt): checked as protobuf checks them, then skipped.
func kvStoredStrings(num protowire.Number) bool {
	return num == 4 || num >= 9 && num <= 12
}

// wellFormed checks b as protobuf decodes a message of type md: fields well
// formed, and a string or message known to md (of the right wire type)
// UTF-8 or well formed in turn. It is for the parts of a batch the router
// skips (a block's extra keys, a snapshot chunk, an engine load), so that the
// wire decoder refuses exactly what the generated types refuse.
func wellFormed(b []byte, md protoreflect.MessageDescriptor) error {
	for len(b) > 0 {
		num, typ, n := pbwire.ConsumeTag(b)
		if n < 0 {
			return errWire{fmt.Sprintf("a %s's tag", md.Name())}
		}
		b = b[n:]
		f := md.Fields().ByNumber(num)
		if f != nil && typ == protowire.BytesType && !f.IsList() && (f.Kind() == protoreflect.StringKind || f.Kind() == protoreflect.MessageKind) {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errWire{fmt.Sprintf("a %s's field %d", md.Name(), num)}
			}
			b = b[m:]
			if f.Kind() == protoreflect.StringKind && !utf8.Valid(v) {
				return errWire{fmt.Sprintf("a %s's field %d is not UTF-8", md.Name(), num)}
			}
			if f.Kind() == protoreflect.MessageKind {
				if err := wellFormed(v, f.Message()); err != nil {
					return err
				}
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return errWire{fmt.Sprintf("a %s's field %d", md.Name(), num)}
		}
		b = b[m:]
	}
	return nil
}

// kvGroupKind is a group's kind as a string, without allocating for the
// kinds engines publish.
func kvGroupKind(b []byte) string {
	// The kinds of vLLM's KV cache specs.
	for _, k := range [...]string{"full_attention", "sliding_window", "mla_attention", "chunked_local_attention", "mamba", "cross_attention"} {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

// skipAll checks that b is a sequence of well-formed fields.
func skipAll(b []byte) error {
	for len(b) > 0 {
		num, typ, n := pbwire.ConsumeTag(b)
		if n < 0 {
			return errWire{"a field's tag"}
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return errWire{fmt.Sprintf("field %d", num)}
		}
		b = b[m:]
	}
	return nil
}

// kvWireCodec sends the subscription request as protobuf does and hands
// each received message over as its bytes (into a *[]byte, reusing its
// capacity), for kvWire to decode.
type kvWireCodec struct{ encoding.CodecV2 }

func newKVWireCodec() kvWireCodec { return kvWireCodec{encoding.GetCodecV2("proto")} }

func (c kvWireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	*p = (*p)[:0]
	for _, buf := range data {
		*p = append(*p, buf.ReadOnlyData()...)
	}
	return nil
}

// fLoadOnly is EngineLoad.load_only, bool.
const fLoadOnly = 9

// loadOnlyOf reads load_only from a well-formed EngineLoad (the last value
// wins, as protobuf's).
func loadOnlyOf(b []byte) bool {
	on := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == fLoadOnly && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return false
			}
			on, b = v != 0, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false
		}
		b = b[m:]
	}
	return on
}
