package workers

import (
	"fmt"
	"math"

	"github.com/kvgate/kvgate/fault"
)

// EmbedRequest is one input to embed. Both engines' Embed RPCs take a single
// tokenized sequence per call, so a batch is as many requests, each with an
// id of its own.
type EmbedRequest struct {
	RequestID string
	InputIDs  []uint32
	// DPRank, when set, names the data-parallel rank to run on (SGLang's
	// EmbedRequest has the field; vLLM's has none and places it itself).
	DPRank *int
}

// EmbedResult is an engine's embedding of one input.
type EmbedResult struct {
	Embedding []float32
	// PromptTokens is the input's length as the engine counted it.
	PromptTokens uint32
}

// engineEmbedding is what both protocols' EmbedResponse messages carry.
type engineEmbedding interface {
	GetEmbedding() []float32
	GetEmbeddingDim() uint32
	GetPromptTokens() uint32
}

// embedResult checks an engine's EmbedResponse and translates it. An engine
// that sends no vector, a vector whose length contradicts the dimension it
// states, or values that are not finite numbers has failed at Embed
// (a fault.Corrupt wrapping ErrBadEmbedding): a client must never get a vector
// that compares as garbage with every other, and the router leaves the
// engine out of Embed (see Lacks) without holding it against Generate.
func embedResult(engine string, m engineEmbedding) (*EmbedResult, error) {
	v := m.GetEmbedding()
	if len(v) == 0 {
		return nil, badEmbedding("%s engine returned an empty embedding", engine)
	}
	if d := m.GetEmbeddingDim(); d != 0 && int(d) != len(v) {
		return nil, badEmbedding("%s engine returned an embedding of %d values with embedding_dim %d", engine, len(v), d)
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, badEmbedding("%s engine returned an embedding whose value %d is %v", engine, i, x)
		}
	}
	return &EmbedResult{Embedding: v, PromptTokens: m.GetPromptTokens()}, nil
}

// badEmbedding is a corrupt answer wrapping ErrBadEmbedding; its message is
// the format's alone, since the sentinel only tells callers what to do.
func badEmbedding(format string, args ...any) error {
	return &fault.Error{Kind: fault.Corrupt, Msg: fmt.Sprintf(format, args...), Err: ErrBadEmbedding}
}
