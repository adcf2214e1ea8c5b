package tree

import (
	"fmt"
	"slices"
	"testing"
)

func TestMirrorLeafAfter(t *testing.T) {
	// 1a 2b 3c off the root, 4d below 2, 7x waiting below the unknown 6.
	steps := []string{"store - 1a 2b 3c", "store 2 4d", "store 6 7x"}
	cases := []struct {
		h    int64
		gone []int64
		want bool
	}{
		{3, nil, true},              // a leaf
		{7, nil, true},              // a detached leaf
		{2, nil, false},             // two children
		{2, []int64{3}, false},      // one of them still there
		{2, []int64{3, 4}, true},    // both named before it
		{2, []int64{4, 9, 3}, true}, // in any order
		{1, []int64{3, 4}, false},   // 2 is still there
		{1, []int64{3, 4, 2}, true}, // the chain leaf first
		{6, nil, false},             // unknown, though blocks wait below it
		{9, nil, false},             // unknown
		{2, []int64{3, 4, 0, 0, 0, 0, 0, 0, 0, 0}, false}, // named too far back
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d after %v", c.h, c.gone), func(t *testing.T) {
			m := NewMirror(1, 100)
			if _, _, err := mirrorScript(t, m, steps); err != nil {
				t.Fatal(err)
			}
			var gone []Ref
			for _, h := range c.gone {
				gone = append(gone, m.Find(h))
			}
			if got := m.LeafAfter(m.Find(c.h), gone); got != c.want {
				t.Fatalf("LeafAfter(%d, %v) = %v, want %v", c.h, c.gone, got, c.want)
			}
		})
	}
	// 4d stored again: the engine holds it twice, and one removal leaves
	// it below 2.
	copied := NewMirror(1, 100)
	if _, _, err := mirrorScript(t, copied, append(slices.Clone(steps), "store 2 4d")); err != nil {
		t.Fatal(err)
	}
	if copied.LeafAfter(copied.Find(2), []Ref{copied.Find(3), copied.Find(4)}) {
		t.Errorf("LeafAfter(2, [3 4]) with 4 held twice = true, want false")
	}
	m := NewMirror(1, 100)
	mirrorScript(t, m, steps)
	for h, want := range map[int64]bool{1: true, 4: true, 7: true, 6: false, 9: false} {
		if m.Known(h) != want {
			t.Errorf("Known(%d) = %v, want %v", h, !want, want)
		}
	}
}
