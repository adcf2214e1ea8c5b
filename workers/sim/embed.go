package sim

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// Embedding is the simulated model's embedding of a token sequence, of
// dimension dim: a bag of tokens. Token id t adds to component k the value
//
//	u(t, k) = 2 * (mix64(golden * ((uint64(t)<<32 | uint64(k)) + 1)) >> 11) / 2^53 - 1
//
// (uniform in [-1, 1); mix64 is the splitmix64 finalizer), once per
// occurrence; the sum is scaled to unit length (L2, in float64) and rounded
// to float32. An empty sequence, or one whose sum is zero, embeds to the
// zero vector.
//
// The vector depends on the tokens alone, not on the engine, its protocol
// or its seed, so every replica of a model returns the same vector, as real
// replicas do; and inputs that share tokens have a high cosine similarity,
// as texts about the same things do.
func Embedding(ids []uint32, dim int) []float32 {
	sum := make([]float64, dim)
	for _, t := range ids {
		for k := range sum {
			h := mix64(golden * ((uint64(t)<<32 | uint64(k)) + 1))
			sum[k] += 2*float64(h>>11)/(1<<53) - 1
		}
	}
	var norm float64
	for _, x := range sum {
		norm += x * x
	}
	out := make([]float32, dim)
	if norm == 0 {
		return out
	}
	norm = math.Sqrt(norm)
	for k, x := range sum {
		out[k] = float32(x / norm)
	}
	return out
}

// embed answers one Embed call for either protocol: the input checked as the
// engine checks a prompt, a wait as long as its prefill would take
// (RequestOverhead plus its tokens at PrefillTokensPerSec, times TimeScale;
// embeddings do not queue behind generations, nor touch the KV cache), then
// Embedding of it. The faults that refuse or hold a generation before its
// first token (Unavailable, StallBeforeFirstToken) refuse or hold it too;
// GarbageStream makes the stated embedding_dim contradict the vector.
func (e *Engine) embed(ctx context.Context, ids []uint32) (vec []float32, dim uint32, err error) {
	if e.cfg.EmbeddingDim == 0 {
		return nil, 0, status.Error(codes.Unimplemented, "sim: this engine serves no embeddings (EmbeddingDim 0)")
	}
	f := e.Faults()
	if f.Unavailable {
		e.mu.Lock()
		e.counters.rejected++
		e.mu.Unlock()
		return nil, 0, status.Error(codes.Unavailable, "sim: injected fault: engine unavailable")
	}
	if len(ids) == 0 {
		return nil, 0, e.invalid("input_ids must not be empty")
	}
	for i, t := range ids {
		if int64(t) >= int64(e.cfg.VocabSize) {
			return nil, 0, e.invalid("input_ids[%d] = %d is out of vocabulary (size %d)", i, t, e.cfg.VocabSize)
		}
	}
	if len(ids) > e.cfg.MaxContextLength {
		return nil, 0, e.invalid("input (%d tokens) exceeds the context length %d", len(ids), e.cfg.MaxContextLength)
	}
	wait := e.scale(e.cfg.RequestOverhead + time.Duration(float64(len(ids))/e.cfg.PrefillTokensPerSec*float64(time.Second)))
	var timer <-chan time.Time
	if f.StallBeforeFirstToken {
		timer = nil // until the caller leaves
	} else {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
	case <-ctx.Done():
		return nil, 0, status.FromContextError(ctx.Err()).Err()
	case <-e.closed:
		return nil, 0, errClosed
	}
	vec = Embedding(ids, e.cfg.EmbeddingDim)
	dim = uint32(len(vec))
	if f.GarbageStream {
		dim++
	}
	e.mu.Lock()
	e.counters.embeds++
	e.counters.embedTokens += uint64(len(ids))
	e.mu.Unlock()
	return vec, dim, nil
}

// Embed serves SGLang's Embed for token input; cross-encoder, multimodal and
// text input are refused as the simulator has no such model.
func (s *sglangServer) Embed(ctx context.Context, req *sglang.EmbedRequest) (*sglang.EmbedResponse, error) {
	if req.GetIsCrossEncoder() || len(req.GetTexts()) > 0 || req.GetMmInputs() != nil {
		return nil, s.e.invalid("only token-id input is supported: the simulated model is no cross-encoder and has no vision")
	}
	ids := req.GetTokenized().GetInputIds()
	vec, dim, err := s.e.embed(ctx, ids)
	if err != nil {
		return nil, err
	}
	return &sglang.EmbedResponse{EmbeddingDim: dim, Embedding: vec, PromptTokens: uint32(len(ids))}, nil
}

// Embed serves vLLM's Embed.
func (s *vllmServer) Embed(ctx context.Context, req *vllm.EmbedRequest) (*vllm.EmbedResponse, error) {
	ids := req.GetTokenized().GetInputIds()
	vec, dim, err := s.e.embed(ctx, ids)
	if err != nil {
		return nil, err
	}
	return &vllm.EmbedResponse{Embedding: vec, PromptTokens: uint32(len(ids)), EmbeddingDim: dim}, nil
}
