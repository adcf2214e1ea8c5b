package workers

// vLLM publishes its KV events over ZMQ as msgpack, written by msgspec from
// the structs of vllm/distributed/kv_events.py. The encoding has changed
// between releases, so the decoder reads every shape those structs have
// had rather than one:
//
//   - a batch is an array [ts, events, data_parallel_rank?] (array_like
//     structs, older releases) or a map {"ts", "events",
//     "data_parallel_rank"} (newer ones);
//   - an event is a tagged array ["BlockStored", block_hashes,
//     parent_block_hash, token_ids, block_size, lora_id, medium, ...] or a
//     tagged map {"type": "BlockStored", "block_hashes": ..., ...}; fields
//     holding their default may be left out at the end (omit_defaults);
//   - a block hash is an integer (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, and
//     releases before hashes became bytes) or bytes (a digest): bytes are
//     folded to the integer vLLM itself would send, the low 64 bits read
//     big-endian, so both settings name a block the same way;
//   - token_ids is flat (every stored block's tokens one after the other,
//     block_size each) or one list per block.
//
// A parent of nil or 0 is none. Events of a cache group that is not a plain
// prefix cache (kv_cache_spec_sliding_window set, or a kv_cache_spec_kind
// other than full or MLA attention) and events about another medium than
// the GPU (an offload tier) are left out, and so are later removals naming
// such a group: their blocks are not a prefix the router may match. Like the
// gRPC decoder, a batch that breaks these rules fails whole (a Corrupt fault), and
// every count is checked against the bytes left before anything is
// allocated for it.

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/fault"
)

// zmqMaxBatchBlocks bounds the blocks (stored or removed) of one batch: a
// block costs the router some 60 bytes decoded against 2 on the wire, so
// the frame bound alone would let one batch take hundreds of MiB. A busy
// engine's step stores and evicts a few thousand.
const zmqMaxBatchBlocks = 1 << 20

// maxZMQGroups bounds the cache groups a decoder remembers as not being a
// prefix cache; hybrid models have a handful.
const maxZMQGroups = 256

// zmqDecoder decodes one publisher's batches. It remembers which cache
// groups are not prefix caches, so it serves one stream (one goroutine).
type zmqDecoder struct {
	nonPrefix map[int64]bool
}

// zmqBatchError says why a payload is not a KV event batch.
func zmqBatchError(seq uint64, format string, args ...any) error {
	return fault.Newf(fault.Corrupt, "ZMQ KV event batch %d is not a valid vLLM KVEventBatch: "+format,
		append([]any{seq}, args...)...)
}

// decode parses the msgpack payload of the batch numbered seq.
func (d *zmqDecoder) decode(seq uint64, payload []byte) (*KVEventBatch, error) {
	out := &KVEventBatch{Seq: seq}
	var (
		ts     float64
		events []KVEvent
		got    bool // an events field was read
		rank   int64
		err    error
	)
	b := payload
	switch msgp.NextType(b) {
	case msgp.ArrayType:
		var n uint32
		if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, zmqBatchError(seq, "batch header: %v", err)
		}
		if n < 2 {
			return nil, zmqBatchError(seq, "batch has %d fields, want ts and events", n)
		}
		for i := range n {
			switch i {
			case 0:
				ts, b, err = readNumber(b)
			case 1:
				events, b, err = d.events(b)
				got = err == nil
			case 2:
				rank, b, err = readOptInt(b)
			default:
				b, err = msgp.Skip(b)
			}
			if err != nil {
				return nil, zmqBatchError(seq, "batch field %d: %v", i, err)
			}
		}
	case msgp.MapType:
		var n uint32
		if n, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
			return nil, zmqBatchError(seq, "batch header: %v", err)
		}
		for range n {
			var key []byte
			if key, b, err = msgp.ReadStringZC(b); err != nil {
				return nil, zmqBatchError(seq, "batch key: %v", err)
			}
			switch string(key) {
			case "ts":
				ts, b, err = readNumber(b)
			case "events":
				events, b, err = d.events(b)
				got = err == nil
			case "data_parallel_rank":
				rank, b, err = readOptInt(b)
			default:
				b, err = msgp.Skip(b)
			}
			if err != nil {
				return nil, zmqBatchError(seq, "batch field %q: %v", key, err)
			}
		}
		if !got {
			return nil, zmqBatchError(seq, "batch has no events")
		}
	default:
		return nil, zmqBatchError(seq, "payload is a msgpack %v, not an array or a map", msgp.NextType(b))
	}
	if len(b) != 0 {
		return nil, zmqBatchError(seq, "%d bytes after the batch", len(b))
	}
	switch {
	case math.IsNaN(ts) || ts < 0 || ts > maxKVTimestamp:
		return nil, zmqBatchError(seq, "ts %v is not a time", ts)
	case ts > 0:
		sec, frac := math.Modf(ts)
		out.Timestamp = time.Unix(int64(sec), int64(frac*1e9))
	}
	if rank < 0 || rank >= maxKVRank {
		return nil, zmqBatchError(seq, "data_parallel_rank %d outside [0, %d)", rank, maxKVRank)
	}
	out.DPRank = int(rank)

	out.Events = events
	return out, nil
}

// events reads a batch's events from the front of b; a malformed one fails
// the batch.
func (d *zmqDecoder) events(b []byte) ([]KVEvent, []byte, error) {
	n, rest, err := listHeader(b)
	if err != nil {
		return nil, b, err
	}
	out := make([]KVEvent, 0, n)
	blocks := 0
	for i := range n {
		var ev zmqEvent
		if rest, err = ev.read(rest); err != nil {
			return nil, rest, fmt.Errorf("event %d: %w", i, err)
		}
		if blocks += len(ev.hashes); blocks > zmqMaxBatchBlocks {
			return nil, rest, fmt.Errorf("more than %d blocks in one batch", zmqMaxBatchBlocks)
		}
		keep, err := d.keep(&ev)
		if err != nil {
			return nil, rest, fmt.Errorf("event %d: %w", i, err)
		}
		if !keep {
			continue
		}
		e, err := ev.event()
		if err != nil {
			return nil, rest, fmt.Errorf("event %d: %w", i, err)
		}
		out = append(out, e)
	}
	return out, rest, nil
}

// keep reports whether ev is about the prefix cache, learning the groups
// that are not.
func (d *zmqDecoder) keep(ev *zmqEvent) (bool, error) {
	if ev.medium != "" && ev.medium != "GPU" {
		return false, nil
	}
	if ev.kind == KVStored && (ev.slidingWindow > 0 || (ev.specKind != "" && ev.specKind != "full_attention" && ev.specKind != "mla_attention")) {
		if !ev.hasGroup {
			return false, nil
		}
		if d.nonPrefix == nil {
			d.nonPrefix = map[int64]bool{}
		}
		if !d.nonPrefix[ev.group] && len(d.nonPrefix) >= maxZMQGroups {
			return false, fmt.Errorf("more than %d cache groups that are not prefix caches", maxZMQGroups)
		}
		d.nonPrefix[ev.group] = true
		return false, nil
	}
	return !(ev.hasGroup && d.nonPrefix[ev.group]), nil
}

// zmqEvent is one event as read, before it is checked.
type zmqEvent struct {
	kind          KVEventKind
	hashes        []int64
	parent        int64
	hasParent     bool
	flat          []uint32   // token_ids, flat
	perBlock      [][]uint32 // token_ids, one list per block
	blockSize     int64
	lora          int64
	hasLoRA       bool
	medium        string
	group         int64
	hasGroup      bool
	specKind      string
	slidingWindow int64
}

// The fields of vLLM's events in their array order, after the tag.
var (
	zmqStoredFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	zmqRemovedFields = []string{"block_hashes", "medium", "group_idx"}
)

func zmqFieldsOf(kind KVEventKind) []string {
	switch kind {
	case KVStored:
		return zmqStoredFields
	case KVRemoved:
		return zmqRemovedFields
	}
	return nil
}

func zmqKind(tag []byte) (KVEventKind, error) {
	switch string(tag) {
	case "BlockStored":
		return KVStored, nil
	case "BlockRemoved":
		return KVRemoved, nil
	case "AllBlocksCleared":
		return KVCleared, nil
	}
	return 0, fmt.Errorf("unknown event type %q", tag)
}

// read parses one event, in either of its shapes, from the front of b.
func (ev *zmqEvent) read(b []byte) ([]byte, error) {
	var err error
	switch msgp.NextType(b) {
	case msgp.ArrayType:
		var n uint32
		if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return b, err
		}
		if n == 0 {
			return b, fmt.Errorf("an empty array, not a tagged event")
		}
		var tag []byte
		if tag, b, err = msgp.ReadStringZC(b); err != nil {
			return b, fmt.Errorf("tag: %w", err)
		}
		if ev.kind, err = zmqKind(tag); err != nil {
			return b, err
		}
		names := zmqFieldsOf(ev.kind)
		for i := range n - 1 {
			name := ""
			if int(i) < len(names) {
				name = names[i]
			}
			if b, err = ev.field(name, b); err != nil {
				return b, fmt.Errorf("%s: %w", name, err)
			}
		}
	case msgp.MapType:
		var n uint32
		if n, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
			return b, err
		}
		// The tag may come anywhere: a field means the same in every
		// kind of event, so each is read where it stands.
		for range n {
			var key []byte
			if key, b, err = msgp.ReadStringZC(b); err != nil {
				return b, fmt.Errorf("key: %w", err)
			}
			if string(key) == "type" {
				var tag []byte
				if tag, b, err = msgp.ReadStringZC(b); err != nil {
					return b, fmt.Errorf("type: %w", err)
				}
				if ev.kind, err = zmqKind(tag); err != nil {
					return b, err
				}
				continue
			}
			if b, err = ev.field(string(key), b); err != nil {
				return b, fmt.Errorf("%s: %w", key, err)
			}
		}
		if ev.kind == 0 {
			return b, fmt.Errorf("a map without a type")
		}
	default:
		return b, fmt.Errorf("a msgpack %v, not an event", msgp.NextType(b))
	}
	return b, nil
}

// field reads the value of the field name (the empty name and unknown names
// are skipped) from the front of b.
func (ev *zmqEvent) field(name string, b []byte) ([]byte, error) {
	var err error
	switch name {
	case "block_hashes":
		var n uint32
		if n, b, err = listHeader(b); err != nil {
			return b, err
		}
		ev.hashes = make([]int64, 0, n)
		for range n {
			var h int64
			if h, b, err = readHash(b); err != nil {
				return b, err
			}
			ev.hashes = append(ev.hashes, h)
		}
		return b, nil
	case "parent_block_hash":
		if msgp.IsNil(b) {
			return msgp.ReadNilBytes(b)
		}
		ev.parent, b, err = readHash(b)
		ev.hasParent = err == nil && ev.parent != 0
		return b, err
	case "token_ids":
		return ev.tokens(b)
	case "block_size":
		ev.blockSize, b, err = msgp.ReadInt64Bytes(b)
		return b, err
	case "lora_id":
		if msgp.IsNil(b) {
			return msgp.ReadNilBytes(b)
		}
		ev.lora, b, err = msgp.ReadInt64Bytes(b)
		ev.hasLoRA = err == nil
		return b, err
	case "medium":
		ev.medium, b, err = readOptString(b)
		return b, err
	case "group_idx":
		if msgp.IsNil(b) {
			return msgp.ReadNilBytes(b)
		}
		ev.group, b, err = msgp.ReadInt64Bytes(b)
		ev.hasGroup = err == nil
		return b, err
	case "kv_cache_spec_kind":
		ev.specKind, b, err = readOptString(b)
		return b, err
	case "kv_cache_spec_sliding_window":
		ev.slidingWindow, b, err = readOptInt(b)
		return b, err
	}
	return msgp.Skip(b)
}

// tokens reads token_ids, flat or one list per block.
func (ev *zmqEvent) tokens(b []byte) ([]byte, error) {
	n, b, err := listHeader(b)
	if err != nil {
		return b, err
	}
	if n > 0 && msgp.NextType(b) == msgp.ArrayType {
		ev.perBlock = make([][]uint32, 0, n)
		for range n {
			var ids []uint32
			if ids, b, err = readTokenList(b); err != nil {
				return b, err
			}
			ev.perBlock = append(ev.perBlock, ids)
		}
		return b, nil
	}
	ev.flat = make([]uint32, 0, n)
	for range n {
		var t uint32
		if t, b, err = msgp.ReadUint32Bytes(b); err != nil {
			return b, err
		}
		ev.flat = append(ev.flat, t)
	}
	return b, nil
}

// event checks ev and returns it in the protocol-neutral form.
func (ev *zmqEvent) event() (KVEvent, error) {
	switch ev.kind {
	case KVCleared:
		return KVEvent{Kind: KVCleared}, nil
	case KVRemoved:
		return KVEvent{Kind: KVRemoved, Hashes: ev.hashes}, nil
	}
	nb := len(ev.hashes)
	switch {
	case nb == 0:
		return KVEvent{}, fmt.Errorf("stores no blocks")
	case ev.blockSize < 0 || ev.blockSize > math.MaxInt32:
		return KVEvent{}, fmt.Errorf("block_size %d", ev.blockSize)
	}
	out := KVEvent{Kind: KVStored, Parent: ev.parent, HasParent: ev.hasParent, Blocks: make([]KVBlock, nb)}
	var lora *int64
	if ev.hasLoRA {
		lora = &ev.lora
	}
	per := make([][]uint32, nb)
	switch {
	case ev.perBlock != nil:
		if len(ev.perBlock) != nb {
			return KVEvent{}, fmt.Errorf("%d token lists for %d blocks", len(ev.perBlock), nb)
		}
		per = ev.perBlock
	case nb == 1:
		per[0] = ev.flat
	case ev.blockSize > 0 && int64(len(ev.flat)) == int64(nb)*ev.blockSize:
		for i := range per {
			per[i] = ev.flat[i*int(ev.blockSize) : (i+1)*int(ev.blockSize) : (i+1)*int(ev.blockSize)]
		}
	default:
		return KVEvent{}, fmt.Errorf("%d token ids do not split into %d blocks of block_size %d", len(ev.flat), nb, ev.blockSize)
	}
	for i, h := range ev.hashes {
		if len(per[i]) == 0 {
			return KVEvent{}, fmt.Errorf("block %d has no tokens", i)
		}
		out.Blocks[i] = KVBlock{Hash: h, Tokens: per[i], BlockSize: int(ev.blockSize), LoRAID: lora}
	}
	return out, nil
}

// listHeader reads an array header whose elements (a byte each at least)
// fit in what is left.
func listHeader(b []byte) (uint32, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err == nil && uint64(n) > uint64(len(b)) {
		err = fmt.Errorf("%d elements announced in %d bytes", n, len(b))
	}
	return n, b, err
}

func readTokenList(b []byte) ([]uint32, []byte, error) {
	n, b, err := listHeader(b)
	if err != nil {
		return nil, b, err
	}
	ids := make([]uint32, 0, n)
	for range n {
		var t uint32
		if t, b, err = msgp.ReadUint32Bytes(b); err != nil {
			return nil, b, err
		}
		ids = append(ids, t)
	}
	return ids, b, nil
}

// readHash reads a block hash: an integer (signed or not: the same 64 bits)
// or bytes, folded as vLLM folds them into integers.
func readHash(b []byte) (int64, []byte, error) {
	switch msgp.NextType(b) {
	case msgp.BinType, msgp.StrType:
		var raw []byte
		var err error
		if msgp.NextType(b) == msgp.BinType {
			raw, b, err = msgp.ReadBytesZC(b)
		} else {
			raw, b, err = msgp.ReadStringZC(b)
		}
		if err != nil {
			return 0, b, err
		}
		var tail [8]byte
		copy(tail[8-min(len(raw), 8):], raw[max(len(raw)-8, 0):])
		return int64(binary.BigEndian.Uint64(tail[:])), b, nil
	case msgp.UintType:
		u, b, err := msgp.ReadUint64Bytes(b)
		return int64(u), b, err
	}
	return msgp.ReadInt64Bytes(b)
}

// readNumber reads a float or an integer as a float.
func readNumber(b []byte) (float64, []byte, error) {
	switch msgp.NextType(b) {
	case msgp.IntType:
		i, b, err := msgp.ReadInt64Bytes(b)
		return float64(i), b, err
	case msgp.UintType:
		u, b, err := msgp.ReadUint64Bytes(b)
		return float64(u), b, err
	}
	return msgp.ReadFloat64Bytes(b)
}

// readOptInt reads an integer or nil (0).
func readOptInt(b []byte) (int64, []byte, error) {
	if msgp.IsNil(b) {
		b, err := msgp.ReadNilBytes(b)
		return 0, b, err
	}
	return msgp.ReadInt64Bytes(b)
}

// readOptString reads a string or nil ("").
func readOptString(b []byte) (string, []byte, error) {
	if msgp.IsNil(b) {
		b, err := msgp.ReadNilBytes(b)
		return "", b, err
	}
	s, b, err := msgp.ReadStringZC(b)
	return string(s), b, err
}
