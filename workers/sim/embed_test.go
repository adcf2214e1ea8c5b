package sim

import (
	"math"
	"testing"
)

// TestEmbeddingFunction pins Embedding to its documented formula, computed
// here independently for a two-token input, and checks what the doc
// promises: unit length, determinism, and higher similarity for inputs that
// share tokens.
func TestEmbeddingFunction(t *testing.T) {
	// splitmix64's finalizer, written out again rather than calling mix64.
	finalize := func(x uint64) uint64 {
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		return x ^ x>>31
	}
	u := func(tok, k uint64) float64 {
		h := finalize(0x9e3779b97f4a7c15 * (tok<<32 | k + 1))
		return 2*float64(h>>11)/math.Exp2(53) - 1
	}
	const dim = 8
	ids := []uint32{7, 7, 128000}
	raw := make([]float64, dim)
	var norm float64
	for k := range raw {
		raw[k] = 2*u(7, uint64(k)) + u(128000, uint64(k))
		norm += raw[k] * raw[k]
	}
	got := Embedding(ids, dim)
	for k := range raw {
		if want := float32(raw[k] / math.Sqrt(norm)); got[k] != want {
			t.Errorf("component %d = %v; want %v", k, got[k], want)
		}
	}

	cos := func(a, b []float32) float64 {
		var s float64
		for i := range a {
			s += float64(a[i]) * float64(b[i])
		}
		return s
	}
	a := Embedding([]uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4096)
	if n := cos(a, a); math.Abs(n-1) > 1e-5 {
		t.Errorf("|v|^2 = %v; want 1", n)
	}
	near := Embedding([]uint32{1, 2, 3, 4, 5, 6, 7, 9}, 4096)
	far := Embedding([]uint32{11, 12, 13, 14, 15, 16, 17, 19}, 4096)
	if cn, cf := cos(a, near), cos(a, far); !(cn > 0.8 && math.Abs(cf) < 0.2) {
		t.Errorf("cosine with 7 shared tokens of 8 is %v, with none %v; want > 0.8 and about 0", cn, cf)
	}
	if z := Embedding(nil, 4); z[0] != 0 || len(z) != 4 {
		t.Errorf("empty input embeds to %v; want the zero vector", z)
	}
}
