package workers

import (
	"math"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestEmbedResultRefusesMangledVectors: what an engine's EmbedResponse may
// not hold, whichever protocol it came by, fails as DATA_LOSS naming it.
func TestEmbedResultRefusesMangledVectors(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(-1))
	tests := []struct {
		name string
		m    engineEmbedding
		want string // "" for a vector passed through
	}{
		{"sglang, as stated", &sglang.EmbedResponse{EmbeddingDim: 3, Embedding: []float32{0.6, 0, 0.8}, PromptTokens: 5}, ""},
		{"vllm, no dimension stated", &vllm.EmbedResponse{Embedding: []float32{1}, PromptTokens: 1}, ""},
		{"no vector", &vllm.EmbedResponse{EmbeddingDim: 4, PromptTokens: 2}, "empty embedding"},
		{"fewer values than stated", &sglang.EmbedResponse{EmbeddingDim: 4, Embedding: []float32{1, 0, 0}}, "3 values with embedding_dim 4"},
		{"NaN", &vllm.EmbedResponse{EmbeddingDim: 2, Embedding: []float32{0, nan}}, "value 1 is NaN"},
		{"infinity", &sglang.EmbedResponse{Embedding: []float32{inf}}, "value 0 is -Inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := embedResult("engine", tc.m)
			if tc.want == "" {
				if err != nil || len(got.Embedding) != len(tc.m.GetEmbedding()) || got.PromptTokens != tc.m.GetPromptTokens() {
					t.Fatalf("%+v, %v; want the vector and its %d tokens", got, err, tc.m.GetPromptTokens())
				}
				return
			}
			if !testutil.IsFault(err, fault.Corrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want DATA_LOSS naming %q", err, tc.want)
			}
		})
	}
}
