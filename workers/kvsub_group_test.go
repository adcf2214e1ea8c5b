package workers

import "testing"

// TestPrefixGroups: which events of a hybrid model's cache groups reach the
// worker's mirror, in the order an engine sends them.
func TestPrefixGroups(t *testing.T) {
	full := KVGroup{Index: 0, HasIndex: true, Kind: "full_attention"}
	window := KVGroup{Index: 1, HasIndex: true, Kind: "sliding_window", SlidingWindow: 4096}
	steps := []struct {
		name string
		ev   KVEvent
		keep bool
	}{
		{"a store without group information (one-group engines)", KVEvent{Kind: KVStored}, true},
		{"a removal without group information", KVEvent{Kind: KVRemoved}, true},
		{"a removal from a group not seen yet", KVEvent{Kind: KVRemoved, Group: KVGroup{Index: 1, HasIndex: true}}, true},
		{"a full-attention store", KVEvent{Kind: KVStored, Group: full}, true},
		{"an MLA store", KVEvent{Kind: KVStored, Group: KVGroup{Index: 2, HasIndex: true, Kind: "mla_attention"}}, true},
		{"a sliding-window store", KVEvent{Kind: KVStored, Group: window}, false},
		{"a removal from the sliding-window group, known now", KVEvent{Kind: KVRemoved, Group: KVGroup{Index: 1, HasIndex: true}}, false},
		{"a removal from the full-attention group", KVEvent{Kind: KVRemoved, Group: KVGroup{Index: 0, HasIndex: true}}, true},
		{"a window without a kind", KVEvent{Kind: KVStored, Group: KVGroup{SlidingWindow: 128}}, false},
		{"a linear-attention store", KVEvent{Kind: KVStored, Group: KVGroup{Index: 3, HasIndex: true, Kind: "mamba"}}, false},
		{"a store in a remote pool", KVEvent{Kind: KVStored, Group: KVGroup{Kind: "full_attention", Remote: true}}, false},
		{"a removal from a remote pool", KVEvent{Kind: KVRemoved, Group: KVGroup{Remote: true}}, false},
		{"a clear", KVEvent{Kind: KVCleared}, true},
	}
	var p prefixGroups
	for _, s := range steps {
		if got := p.keep(&s.ev); got != s.keep {
			t.Errorf("%s: kept %v, want %v", s.name, got, s.keep)
		}
	}
}
