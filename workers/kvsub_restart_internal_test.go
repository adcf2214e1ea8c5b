package workers

import (
	"testing"
	"time"
)

// TestKVDigest: a batch sent again digests as it did; a batch of another
// process under the same number differs in what kvDigest reads.
func TestKVDigest(t *testing.T) {
	batch := func() *KVEventBatch {
		return &KVEventBatch{Seq: 7, Timestamp: time.Unix(1_700_000_000, 5), Events: []KVEvent{
			{Kind: KVRemoved, Hashes: []int64{11, 12}},
			{Kind: KVStored, Parent: 3, HasParent: true, Blocks: []KVBlock{{Hash: 21}, {Hash: 22}}},
			{Kind: KVStored, Blocks: []KVBlock{{Hash: 31}}},
		}}
	}
	want := kvDigest(batch())
	if got := kvDigest(batch().Clone()); got != want {
		t.Errorf("a copy digests as %x, the batch as %x", got, want)
	}
	for _, tc := range []struct {
		name   string
		change func(b *KVEventBatch)
	}{
		{"another stamp", func(b *KVEventBatch) { b.Timestamp = b.Timestamp.Add(time.Microsecond) }},
		{"no stamp", func(b *KVEventBatch) { b.Timestamp = time.Time{} }},
		{"one event fewer", func(b *KVEventBatch) { b.Events = b.Events[:2] }},
		{"the first event's first hash", func(b *KVEventBatch) { b.Events[0].Hashes[0] = 13 }},
		{"the first event's last hash", func(b *KVEventBatch) { b.Events[0].Hashes[1] = 13 }},
		{"the first event's kind", func(b *KVEventBatch) { b.Events[0].Kind = KVCleared }},
		{"the last event's block hash", func(b *KVEventBatch) { b.Events[2].Blocks[0].Hash = 32 }},
		{"the last event's parent", func(b *KVEventBatch) { b.Events[2].Parent, b.Events[2].HasParent = 0, true }},
		{"the last event's kind", func(b *KVEventBatch) { b.Events[2].Kind = KVRemoved }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := batch()
			tc.change(b)
			if kvDigest(b) == want {
				t.Errorf("digest %x unchanged", want)
			}
		})
	}
}
