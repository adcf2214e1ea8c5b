package workers

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestZMQBatchGolden decodes batches msgspec encoded with the struct
// options vLLM's publisher uses, now (maps, digests) and in earlier
// releases (array_like, integer hashes); scripts/kvzmq-golden.py wrote
// them (make kvzmq-golden).
func TestZMQBatchGolden(t *testing.T) {
	lora := int64(7)
	plain := &KVEventBatch{Timestamp: time.Unix(1767225600, 5e8), Events: []KVEvent{
		{Kind: KVStored, Blocks: []KVBlock{{Hash: 11, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4}, {Hash: 12, Tokens: []uint32{5, 6, 7, 8}, BlockSize: 4}}},
		{Kind: KVStored, Parent: 12, HasParent: true, Blocks: []KVBlock{{Hash: 13, Tokens: []uint32{9, 10, 11, 12}, BlockSize: 4, LoRAID: &lora}}},
		{Kind: KVRemoved, Hashes: []int64{11}},
		{Kind: KVCleared},
	}}
	// The sliding-window group's store and removal, and the CPU tier's
	// store, are left out.
	hybrid := &KVEventBatch{Timestamp: time.Unix(1767225601, 0), DPRank: 2, Events: []KVEvent{
		{Kind: KVStored, Blocks: []KVBlock{{Hash: 21, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4}}},
	}}
	for _, tc := range []struct {
		file string
		want *KVEventBatch
	}{
		{"current_plain", plain},
		{"current_hybrid", hybrid},
		{"array_like_plain", plain},
		{"array_like_hybrid", hybrid},
	} {
		t.Run(tc.file, func(t *testing.T) {
			payload, err := os.ReadFile(filepath.Join("testdata", "kvzmq", tc.file+".msgpack"))
			if err != nil {
				t.Fatal(err)
			}
			var d zmqDecoder
			got, err := d.decode(0, payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
