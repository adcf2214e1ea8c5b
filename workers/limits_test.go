package workers

import (
	"strings"
	"testing"
)

// TestIdentityChange: what names a worker changed only where both the
// engine's first answer and its latest report a figure and they differ.
func TestIdentityChange(t *testing.T) {
	joined := ModelInfo{Model: "m", VocabSize: 1000, EOSTokenIDs: []uint32{2, 7}, PageSize: 16}
	tests := []struct {
		name string
		next func(*ModelInfo)
		says string // "": no change
	}{
		{"the same", func(*ModelInfo) {}, ""},
		{"only the limits differ", func(i *ModelInfo) { i.MaxContextLength, i.KVCapacityTokens = 4096, 1<<20 }, ""},
		{"another model", func(i *ModelInfo) { i.Model = "n" }, `model "n" (joined with "m")`},
		{"another vocabulary", func(i *ModelInfo) { i.VocabSize = 2000 }, "vocab_size 2000 (joined with 1000)"},
		{"another page size", func(i *ModelInfo) { i.PageSize = 32 }, "page size 32 (joined with 16)"},
		{"other end-of-sequence tokens", func(i *ModelInfo) { i.EOSTokenIDs = []uint32{2} }, "end-of-sequence tokens [2] (joined with [2 7])"},
		{"the same end-of-sequence tokens in another order", func(i *ModelInfo) { i.EOSTokenIDs = []uint32{7, 2} }, ""},
		{"a page size no longer reported", func(i *ModelInfo) { i.PageSize = 0 }, ""},
		{"nothing reported", func(i *ModelInfo) { *i = ModelInfo{} }, ""},
		{"model and page size", func(i *ModelInfo) { i.Model, i.PageSize = "n", 1 }, `model "n" (joined with "m"), page size 1 (joined with 16)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := joined
			next.EOSTokenIDs = append([]uint32(nil), joined.EOSTokenIDs...)
			tt.next(&next)
			got := identityChange(joined, next)
			if (tt.says == "") != (got == "") || !strings.Contains(got, tt.says) {
				t.Errorf("identityChange = %q; want %q", got, tt.says)
			}
			if joined.EOSTokenIDs[0] != 2 {
				t.Error("identityChange reordered the worker's own end-of-sequence tokens")
			}
		})
	}
}
