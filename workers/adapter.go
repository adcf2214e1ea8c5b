package workers

// What the SGLang and vLLM adapters share: the stream wrapper that enforces
// "chunks, one completion, then io.EOF", load summation over data-parallel
// ranks, and small conversions. Only protocol-neutral code lives here; each
// adapter's file holds everything that knows a protocol's messages.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/fault"
)

// engineStream adapts an engine's server stream of M to Stream. decode turns one
// engine message into a Chunk; ok is false for a message that carries neither a
// chunk nor a completion, which is skipped, and an error (a Corrupt fault) is a
// message whose content breaks the protocol, which ends the stream.
//
// The wrapper guarantees what the router relies on: the completion is followed
// by io.EOF, and a stream that ends without a completion is an error, never a
// quiet success with half the tokens.
type engineStream[M any] struct {
	in        grpc.ServerStreamingClient[M]
	decode    func(*M) (c Chunk, ok bool, err error)
	engine    string // "sglang", "vllm" or "trtllm", for messages
	requestID string

	completed bool  // the completion has been returned
	err       error // sticky terminal error, io.EOF after a clean end
}

func (s *engineStream[M]) Recv() (Chunk, error) {
	if s.err != nil {
		return Chunk{}, s.err
	}
	if s.completed {
		s.drain()
		s.err = io.EOF
		return Chunk{}, io.EOF
	}
	for {
		m, err := s.in.Recv()
		if errors.Is(err, io.EOF) {
			// The engine closed the stream with an OK status but never sent the
			// completion: a crashed or misbehaving worker. An Unavailable fault lets the
			// caller retry elsewhere, and nobody mistakes the partial output for
			// a finished generation.
			s.err = fault.Newf(fault.Unavailable,
				"%s engine ended the stream of request %q before its completion", s.engine, s.requestID)
			return Chunk{}, s.err
		}
		if err != nil {
			// Already a gRPC status from the engine or the transport; pass it
			// through unchanged so status.Code works for the caller.
			s.err = err
			return Chunk{}, err
		}
		c, ok, err := s.decode(m)
		if err != nil {
			s.err = err
			return Chunk{}, err
		}
		if !ok {
			continue
		}
		if c.Final != nil {
			s.completed = true
		}
		return c, nil
	}
}

// drain reads the stream to its end after the completion, so that gRPC sees the
// trailers and releases the call without the caller having to cancel its
// context. Engines close the stream right after the completion, so this does
// not wait; anything they send after it is ignored.
func (s *engineStream[M]) drain() {
	for {
		if _, err := s.in.Recv(); err != nil {
			return
		}
	}
}

// rankLoad is one data-parallel rank's load report (sglang.SchedulerLoad,
// vllm.SchedulerLoad), through the getters both engines' messages share.
type rankLoad interface {
	GetNumRunningReqs() int32
	GetNumWaitingReqs() int32
	GetNumUsedTokens() int32
	GetMaxTotalNumTokens() int32
	GetMaxRunningRequests() int32
	GetTokenUsage() float64
	GetCacheHitRate() float64
}

// sumLoads combines per-rank reports into the engine's load. Counts add up.
// Token usage is recomputed from the summed token counts when the engine
// reports them, because an average of per-rank fractions misweights ranks of
// different sizes; otherwise it is the average of the reported fractions. The
// cache hit rate is averaged.
func sumLoads[L rankLoad](ranks []L) Load {
	var l Load
	if len(ranks) == 0 {
		return l
	}
	var usage, hit float64
	for _, r := range ranks {
		l.Running += int(r.GetNumRunningReqs())
		l.Waiting += int(r.GetNumWaitingReqs())
		l.UsedTokens += int(r.GetNumUsedTokens())
		l.MaxTotalTokens += int(r.GetMaxTotalNumTokens())
		l.MaxRunning += max(int(r.GetMaxRunningRequests()), 0)
		usage += r.GetTokenUsage()
		hit += r.GetCacheHitRate()
	}
	n := float64(len(ranks))
	if l.MaxTotalTokens > 0 {
		l.TokenUsage = float64(l.UsedTokens) / float64(l.MaxTotalTokens)
	} else {
		l.TokenUsage = usage / n
	}
	l.CacheHitRate = hit / n
	return l
}

// healthError turns a HealthCheck answer into Backend.Health's result.
func healthError(healthy bool, message string) error {
	if healthy {
		return nil
	}
	if message == "" {
		return ErrEmptyHealth
	}
	return fmt.Errorf("%w: %s", ErrUnhealthy, message)
}

// tokenIDs converts the engines' int32 token ids (eos_token_ids) to the
// router's uint32, dropping negative placeholders.
func tokenIDs(ids []int32) []uint32 {
	if len(ids) == 0 {
		return nil
	}
	out := make([]uint32, 0, len(ids))
	for _, id := range ids {
		if id >= 0 {
			out = append(out, uint32(id))
		}
	}
	return out
}

// orDefault returns *p, or def when p is nil (the field was unset).
func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// modelName prefers the name the engine serves the model under over its path.
func modelName(served, path string) string {
	if served != "" {
		return served
	}
	return path
}

// engineCounts is what both protocols' chunk and completion messages report.
type engineCounts interface {
	GetPromptTokens() uint32
	GetCompletionTokens() uint32
	GetCachedTokens() uint32
}

// chunkOf translates an engine's stream chunk (sglang.GenerateStreamChunk,
// vllm.GenerateStreamChunk).
func chunkOf(c interface {
	engineCounts
	GetTokenIds() []uint32
}) Chunk {
	return Chunk{
		TokenIDs:         c.GetTokenIds(),
		PromptTokens:     c.GetPromptTokens(),
		CompletionTokens: c.GetCompletionTokens(),
		CachedTokens:     c.GetCachedTokens(),
	}
}

// completionOf translates an engine's completion (sglang.GenerateComplete,
// vllm.GenerateComplete); matched is its stop token, if one matched.
func completionOf(c interface {
	engineCounts
	GetOutputIds() []uint32
	GetFinishReason() string
	GetSpecAcceptedTokens() uint32
	GetSpecDraftTokens() uint32
}, matched *uint32) Chunk {
	fin := &Completion{
		OutputIDs:          c.GetOutputIds(),
		FinishReason:       c.GetFinishReason(),
		MatchedStopTokenID: matched,
		PromptTokens:       c.GetPromptTokens(),
		CompletionTokens:   c.GetCompletionTokens(),
		CachedTokens:       c.GetCachedTokens(),
		SpecAcceptedTokens: c.GetSpecAcceptedTokens(),
		SpecDraftTokens:    c.GetSpecDraftTokens(),
	}
	return Chunk{
		PromptTokens:     fin.PromptTokens,
		CompletionTokens: fin.CompletionTokens,
		CachedTokens:     fin.CachedTokens,
		Final:            fin,
	}
}

// maxTokenizerArchive bounds a GetTokenizer download. The largest tokenizers
// in use (Gemma's 262k vocabulary) zip to about 20 MB.
const maxTokenizerArchive = 256 << 20

// readTokenizer collects a GetTokenizer stream: the chunks' bytes
// concatenated, verified against the SHA-256 the last chunk carries.
func readTokenizer(st grpc.ServerStreamingClient[smgcommon.GetTokenizerChunk]) ([]byte, error) {
	var buf bytes.Buffer
	sum := ""
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if buf.Len()+len(c.GetData()) > maxTokenizerArchive {
			return nil, fmt.Errorf("tokenizer archive exceeds %d bytes", maxTokenizerArchive)
		}
		buf.Write(c.GetData())
		if c.GetSha256() != "" {
			sum = c.GetSha256()
		}
	}
	if buf.Len() == 0 {
		return nil, errors.New("engine sent an empty tokenizer archive")
	}
	if sum != "" {
		got := sha256.Sum256(buf.Bytes())
		if !strings.EqualFold(hex.EncodeToString(got[:]), sum) {
			return nil, fmt.Errorf("tokenizer archive checksum mismatch: engine says %s, received %x", sum, got)
		}
	}
	return buf.Bytes(), nil
}
