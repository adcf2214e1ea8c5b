package testutil

import "fmt"

// Tokens returns n consecutive token ids from start (start, start+1, ...):
// prompts that share no prefix unless their ranges overlap.
func Tokens(start uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = start + uint32(i)
	}
	return out
}

// FirstDiff describes where got and want first differ, for a failure
// message that points at the difference instead of printing two long
// sequences; "" when they are equal.
func FirstDiff[T comparable](got, want []T) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: got %v, want %v (lengths %d and %d)", i, got[i], want[i], len(got), len(want))
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("one is a prefix of the other: got length %d, want %d", len(got), len(want))
	}
	return ""
}
