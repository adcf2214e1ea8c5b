package workers

// The msgpack batches below are written value by value with the msgpack
// library's appenders, in the shapes vLLM's msgspec structs produce
// (vllm/distributed/kv_events.py): KVEventBatch(ts, events,
// data_parallel_rank), BlockStored(block_hashes, parent_block_hash,
// token_ids, block_size, lora_id, medium, lora_name, extra_keys, group_idx,
// kv_cache_spec_kind, kv_cache_spec_sliding_window), BlockRemoved(
// block_hashes, medium, group_idx), AllBlocksCleared(); array_like structs
// encode as arrays in that order with the tag (the class name) first,
// the others as maps with the tag under "type".

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
)

// mp builds msgpack bytes.
type mp []byte

func (m mp) arr(n int) mp    { return msgp.AppendArrayHeader(m, uint32(n)) }
func (m mp) mapN(n int) mp   { return msgp.AppendMapHeader(m, uint32(n)) }
func (m mp) str(s string) mp { return msgp.AppendString(m, s) }
func (m mp) i(v int64) mp    { return msgp.AppendInt64(m, v) }
func (m mp) u(v uint64) mp   { return msgp.AppendUint64(m, v) }
func (m mp) f(v float64) mp  { return msgp.AppendFloat64(m, v) }
func (m mp) nil() mp         { return msgp.AppendNil(m) }
func (m mp) bin(b []byte) mp { return msgp.AppendBytes(m, b) }
func (m mp) ints(vs ...int64) mp {
	m = m.arr(len(vs))
	for _, v := range vs {
		m = m.i(v)
	}
	return m
}

// digest is a 32-byte hash whose low 64 bits are v.
func digest(v uint64) []byte {
	d := make([]byte, 32)
	d[0] = 0xAB // high bytes vLLM drops when it folds a digest
	binary.BigEndian.PutUint64(d[24:], v)
	return d
}

const zmqTS = 1767225600.5 // 2026-01-01T00:00:00.5Z

func TestZMQBatchDecode(t *testing.T) {
	at := time.Unix(1767225600, 5e8)
	tok := func(vs ...uint32) []uint32 { return vs }
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name    string
		payload mp
		want    *KVEventBatch
	}{
		{
			name: "arrays: stored with flat tokens split by block_size, removed, cleared",
			payload: mp{}.arr(3).f(zmqTS).arr(3).
				arr(7).str("BlockStored").ints(11, 12).nil().ints(1, 2, 3, 4).i(2).nil().str("GPU").
				arr(3).str("BlockRemoved").ints(7).str("GPU").
				arr(1).str("AllBlocksCleared").
				i(3),
			want: &KVEventBatch{Seq: 9, Timestamp: at, DPRank: 3, Events: []KVEvent{
				{Kind: KVStored, Blocks: []KVBlock{{Hash: 11, Tokens: tok(1, 2), BlockSize: 2}, {Hash: 12, Tokens: tok(3, 4), BlockSize: 2}}},
				{Kind: KVRemoved, Hashes: []int64{7}},
				{Kind: KVCleared},
			}},
		},
		{
			name: "arrays, trailing defaults left out: no rank, no medium",
			payload: mp{}.arr(2).f(zmqTS).arr(1).
				arr(6).str("BlockStored").ints(5).i(4).ints(9, 9).i(2).i(77),
			want: &KVEventBatch{Seq: 9, Timestamp: at, Events: []KVEvent{
				{Kind: KVStored, Parent: 4, HasParent: true, Blocks: []KVBlock{{Hash: 5, Tokens: tok(9, 9), BlockSize: 2, LoRAID: i64(77)}}},
			}},
		},
		{
			name: "maps: digests folded to their low 64 bits, the tag anywhere",
			payload: mp{}.mapN(3).str("events").arr(2).
				mapN(7).str("block_hashes").arr(1).bin(digest(0xFFFF_FFFF_FFFF_FFFE)).str("type").str("BlockStored").
				str("parent_block_hash").bin(digest(3)).str("token_ids").ints(1, 2).str("block_size").i(2).
				str("lora_id").nil().str("medium").str("GPU").
				mapN(3).str("type").str("BlockRemoved").str("block_hashes").arr(1).bin(digest(3)).str("medium").nil().
				str("ts").f(zmqTS).str("data_parallel_rank").i(1),
			want: &KVEventBatch{Seq: 9, Timestamp: at, DPRank: 1, Events: []KVEvent{
				{Kind: KVStored, Parent: 3, HasParent: true, Blocks: []KVBlock{{Hash: -2, Tokens: tok(1, 2), BlockSize: 2}}},
				{Kind: KVRemoved, Hashes: []int64{3}},
			}},
		},
		{
			name: "unsigned hashes above int64 keep their 64 bits; parent 0 is none; tokens per block",
			payload: mp{}.arr(3).f(zmqTS).arr(1).
				arr(7).str("BlockStored").arr(2).u(1<<63).u(2).u(0).arr(2).ints(1, 2).ints(3, 4).i(2).nil().nil().
				nil(),
			want: &KVEventBatch{Seq: 9, Timestamp: at, Events: []KVEvent{
				{Kind: KVStored, Blocks: []KVBlock{{Hash: -1 << 63, Tokens: tok(1, 2), BlockSize: 2}, {Hash: 2, Tokens: tok(3, 4), BlockSize: 2}}},
			}},
		},
		{
			name: "a sliding-window group is not a prefix: its stores and later removals are left out",
			payload: mp{}.arr(3).f(zmqTS).arr(4).
				arr(12).str("BlockStored").ints(1).nil().ints(5).i(1).nil().str("GPU").nil().nil().i(1).str("sliding_window").i(128).
				arr(12).str("BlockStored").ints(2).nil().ints(5).i(1).nil().str("GPU").nil().nil().i(0).str("full_attention").nil().
				arr(4).str("BlockRemoved").ints(1).str("GPU").i(1).
				arr(4).str("BlockRemoved").ints(2).str("GPU").i(0).
				i(0),
			want: &KVEventBatch{Seq: 9, Timestamp: at, Events: []KVEvent{
				{Kind: KVStored, Blocks: []KVBlock{{Hash: 2, Tokens: tok(5), BlockSize: 1}}},
				{Kind: KVRemoved, Hashes: []int64{2}},
			}},
		},
		{
			name: "an offload tier's blocks are not the GPU cache",
			payload: mp{}.arr(2).f(zmqTS).arr(2).
				arr(7).str("BlockStored").ints(1).nil().ints(5).i(1).nil().str("CPU").
				arr(3).str("BlockRemoved").ints(1).str("CPU"),
			want: &KVEventBatch{Seq: 9, Timestamp: at, Events: []KVEvent{}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d zmqDecoder
			got, err := d.decode(9, tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// TestZMQBatchDecodeRefuses: a batch that breaks vLLM's shapes fails whole,
// with DATA_LOSS naming what is wrong, before anything is allocated for a
// count the bytes cannot hold.
func TestZMQBatchDecodeRefuses(t *testing.T) {
	stored := func(m mp) mp { return m.arr(7).str("BlockStored").ints(1).nil().ints(1, 2).i(2).nil().str("GPU") }
	for _, tc := range []struct {
		name    string
		payload mp
		want    string
	}{
		{"not msgpack", mp{0xc1}, "not an array or a map"},
		{"a number", mp{}.i(4), "not an array or a map"},
		{"too few fields", mp{}.arr(1).f(zmqTS), "want ts and events"},
		{"bytes after the batch", stored(mp{}.arr(2).f(zmqTS).arr(1)).i(1), "bytes after the batch"},
		{"a map without events", mp{}.mapN(1).str("ts").f(zmqTS), "no events"},
		{"unknown event type", mp{}.arr(2).f(zmqTS).arr(1).arr(1).str("BlockMoved"), `unknown event type "BlockMoved"`},
		{"an event map without a type", mp{}.arr(2).f(zmqTS).arr(1).mapN(1).str("block_hashes").ints(1), "without a type"},
		{"a store of no blocks", mp{}.arr(2).f(zmqTS).arr(1).arr(7).str("BlockStored").ints().nil().ints().i(2).nil().nil(), "stores no blocks"},
		{"tokens that do not split", mp{}.arr(2).f(zmqTS).arr(1).arr(7).str("BlockStored").ints(1, 2).nil().ints(1, 2, 3).i(2).nil().nil(), "do not split"},
		{"a block without tokens", mp{}.arr(2).f(zmqTS).arr(1).arr(7).str("BlockStored").ints(1).nil().ints().i(2).nil().nil(), "has no tokens"},
		{"a negative token", mp{}.arr(2).f(zmqTS).arr(1).arr(7).str("BlockStored").ints(1).nil().ints(-1).i(2).nil().nil(), "token_ids"},
		{"a rank beyond the bound", stored(mp{}.arr(3).f(zmqTS).arr(1)).i(maxKVRank), "data_parallel_rank 4096 outside"},
		{"a negative rank", stored(mp{}.arr(3).f(zmqTS).arr(1)).i(-1), "data_parallel_rank -1 outside"},
		{"a timestamp that is no time", mp{}.arr(2).f(-1).arr(0), "is not a time"},
		{"more blocks than a batch may hold", zmqManyBlocks(zmqMaxBatchBlocks + 1), "more than 1048576 blocks"},
		{"a billion events announced", append(mp{}.arr(2).f(zmqTS), 0xdd, 0x3b, 0x9a, 0xca, 0x00), "announced in 0 bytes"},
		{"a billion hashes announced", append(mp{}.arr(2).f(zmqTS).arr(1).arr(2).str("BlockRemoved"), 0xdd, 0x3b, 0x9a, 0xca, 0x00), "announced in 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d zmqDecoder
			_, err := d.decode(4, tc.payload)
			if !testutil.IsFault(err, fault.Corrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want DATA_LOSS containing %q", err, tc.want)
			}
		})
	}
}

// zmqManyBlocks is a batch removing n blocks, in two events.
func zmqManyBlocks(n int) mp {
	m := mp{}.arr(2).f(zmqTS).arr(2)
	for _, k := range []int{n / 2, n - n/2} {
		m = m.arr(2).str("BlockRemoved").arr(k)
		for i := range k {
			m = m.i(int64(i % 100))
		}
	}
	return m
}

// FuzzZMQBatch: no payload makes the decoder panic, and what it accepts is
// a batch the mirror can apply: stored events with blocks, every block
// with tokens, ranks within the bound.
func FuzzZMQBatch(f *testing.F) {
	f.Add([]byte(mp{}.arr(3).f(zmqTS).arr(2).
		arr(7).str("BlockStored").ints(11, 12).nil().ints(1, 2, 3, 4).i(2).nil().str("GPU").
		arr(3).str("BlockRemoved").ints(7).str("GPU").i(0)))
	f.Add([]byte(mp{}.mapN(2).str("ts").f(zmqTS).str("events").arr(1).
		mapN(4).str("type").str("BlockStored").str("block_hashes").arr(1).bin(digest(5)).str("token_ids").ints(1).str("block_size").i(1)))
	f.Add([]byte(mp{}.arr(2).f(zmqTS).arr(1).arr(1).str("AllBlocksCleared")))
	golden, _ := filepath.Glob(filepath.Join("testdata", "kvzmq", "*.msgpack"))
	for _, name := range golden {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var d zmqDecoder
		b, err := d.decode(1, payload)
		if err != nil {
			if !testutil.IsFault(err, fault.Corrupt) {
				t.Fatalf("error %v is not DATA_LOSS", err)
			}
			return
		}
		if b.DPRank < 0 || b.DPRank >= maxKVRank {
			t.Fatalf("rank %d accepted", b.DPRank)
		}
		for _, e := range b.Events {
			if e.Kind == KVStored && len(e.Blocks) == 0 {
				t.Fatal("a store of no blocks accepted")
			}
			for _, bl := range e.Blocks {
				if len(bl.Tokens) == 0 || bl.BlockSize < 0 {
					t.Fatalf("block %+v accepted", bl)
				}
			}
		}
	})
}

// TestZMQFrameBound: the transport fails a connection at the header of a
// frame above the bound, in whatever pieces the bytes arrive, and lets
// frames up to it through.
func TestZMQFrameBound(t *testing.T) {
	greeting := make([]byte, 64)
	short := func(size byte) []byte { return []byte{0x01, size} }                                 // more flag, 1-byte size
	long := func(size uint64) []byte { return binary.BigEndian.AppendUint64([]byte{0x02}, size) } // long flag
	for _, tc := range []struct {
		name   string
		stream []byte
		ok     bool
	}{
		{"short frames", append(append(append(greeting, short(3)...), 'a', 'b', 'c'), short(0)...), true},
		{"a long frame at the bound", append(greeting, long(100)...), true},
		{"a long frame above the bound", append(greeting, long(101)...), false},
		{"a terabyte announced", append(greeting, long(1<<40)...), false},
	} {
		for _, piece := range []int{1, 3, 1000} {
			c := &zmqLimitedConn{max: 100, greeting: 64}
			var err error
			for b := tc.stream; len(b) > 0 && err == nil; {
				k := min(piece, len(b))
				err = c.scan(b[:k])
				b = b[k:]
			}
			if (err == nil) != tc.ok {
				t.Errorf("%s in pieces of %d: err = %v", tc.name, piece, err)
			}
		}
	}
}

// BenchmarkZMQBatchDecode decodes a busy step's batch in vLLM's current
// shape: 64 stored blocks of 16 tokens (digest hashes, chained) and 64
// removed.
func BenchmarkZMQBatchDecode(b *testing.B) {
	m := mp{}.mapN(3).str("ts").f(zmqTS).str("events").arr(128)
	for i := range 64 {
		m = m.mapN(7).str("type").str("BlockStored").str("block_hashes").arr(1).bin(digest(uint64(1000 + i))).
			str("parent_block_hash").bin(digest(uint64(999 + i))).str("token_ids").arr(16)
		for k := range 16 {
			m = m.i(int64(100_000 + 16*i + k))
		}
		m = m.str("block_size").i(16).str("lora_id").nil().str("medium").str("GPU")
	}
	for i := range 64 {
		m = m.mapN(3).str("type").str("BlockRemoved").str("block_hashes").arr(1).bin(digest(uint64(i))).str("medium").str("GPU")
	}
	m = m.str("data_parallel_rank").i(0)
	var d zmqDecoder
	b.SetBytes(int64(len(m)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.decode(1, m); err != nil {
			b.Fatal(err)
		}
	}
}
