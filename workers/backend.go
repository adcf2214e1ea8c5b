// Package workers holds what kvgate knows about the engines it routes to: a
// worker's address, protocol, role, health and live load, the registry that
// hands policies a consistent snapshot of them, and one adapter per engine
// protocol. Adapters translate kvgate's neutral request and stream types to the
// engines' gRPC messages and back; protocol differences stay inside them.
package workers

import (
	"context"
	"errors"
)

// Sampling holds decoding parameters. A nil pointer means "unset": the adapter
// sends what the engine treats as its default (SGLang needs temperature 1.0,
// top_p 1.0 and top_k -1 spelled out, because proto3 zero values are not its
// defaults).
type Sampling struct {
	Temperature       *float32
	TopP              *float32
	TopK              *int32 // -1 or 0 disables top-k
	MinP              *float32
	FrequencyPenalty  *float32
	PresencePenalty   *float32
	RepetitionPenalty *float32
	MaxNewTokens      *uint32
	MinNewTokens      uint32
	StopTokenIDs      []uint32
	IgnoreEOS         bool
	Seed              *int32
	// Constraint restricts the output to a language (structured output);
	// the zero value leaves it free.
	Constraint Constraint
}

// ConstraintKind names the language a structured-output constraint holds
// the output to.
type ConstraintKind int

// Constraint kinds. Both engine protocols carry each of them in the oneof
// constraint of their SamplingParams.
const (
	// NoConstraint leaves the output free.
	NoConstraint ConstraintKind = iota
	// JSONSchema: the output is a JSON document valid against Value, a
	// JSON schema as JSON text.
	JSONSchema
	// Regex: the output matches Value, a regular expression.
	Regex
	// EBNF: the output is a sentence of Value, an EBNF grammar whose start
	// symbol is root (the xgrammar/GBNF dialect both engines accept).
	EBNF
	// StructuralTag: Value is a structural tag as JSON text (SGLang's
	// format): free text, with each trigger's structure constrained.
	StructuralTag
)

// Constraint is one structured-output constraint. The router validates
// Value before dispatch; adapters pass it to the engine's field verbatim.
type Constraint struct {
	Kind  ConstraintKind
	Value string
}

// LogprobRequest asks the engine for log-probabilities.
type LogprobRequest struct {
	// Output asks for the log-probability of every generated token.
	Output bool
	// Prompt asks for the log-probability of every prompt token (the
	// first has none).
	Prompt bool
	// TopK is how many most likely alternatives to report per token,
	// 0 for none; it applies to output and prompt tokens alike.
	TopK int
}

// Logprob is one token's log-probability and its most likely alternatives.
type Logprob struct {
	TokenID uint32
	Value   float32
	// Missing is set for the first prompt token, which has no
	// log-probability (Value is then 0).
	Missing bool
	// Top are the TopK most likely tokens at this position, most likely
	// first.
	Top []TopLogprob
}

// TopLogprob is one alternative at a position.
type TopLogprob struct {
	TokenID uint32
	Value   float32
}

// GenerateRequest is one generation, in the router's protocol-neutral terms.
type GenerateRequest struct {
	RequestID string
	InputIDs  []uint32
	Sampling  Sampling

	// PD disaggregation (see pd.go); all zero for a regular request.

	// Disaggregated, when set, is the bootstrap handoff SGLang's prefill and
	// decode legs both carry (disaggregated_params). vLLM ignores it.
	Disaggregated *Handoff
	// KVTransferParamsJSON is vLLM's kv_transfer_params_json, passed to the
	// engine verbatim when not empty. SGLang ignores it.
	KVTransferParamsJSON string
	// NoStream asks the engine for the completion only (stream=false), as
	// vLLM's prefill leg does.
	NoStream bool
	// DPRank, when set, names the engine's data-parallel rank that must
	// serve the request (data_parallel_rank); nil lets the engine choose.
	// A rank target's backend sets it (see dprank.go).
	DPRank *int
	// Logprobs, when set, asks for log-probabilities.
	Logprobs *LogprobRequest
}

// Chunk is one message of an engine's generation stream: either incremental
// tokens (Final == nil) or the completion (Final != nil, TokenIDs empty).
type Chunk struct {
	// TokenIDs are the tokens produced since the previous chunk.
	TokenIDs []uint32
	// Counters as reported by the engine; they are running totals.
	PromptTokens     uint32
	CompletionTokens uint32
	CachedTokens     uint32
	// Logprobs are the log-probabilities of TokenIDs, one per token, when
	// they were asked for.
	Logprobs []Logprob
	// PromptLogprobs are the prompt's, when asked for, on the message that
	// first carries them.
	PromptLogprobs []Logprob
	// Final is set on the last message of the stream.
	Final *Completion
}

// Completion is the end of a generation as the engine reported it.
type Completion struct {
	OutputIDs []uint32
	// FinishReason is "stop", "length" or "abort".
	FinishReason       string
	MatchedStopTokenID *uint32
	PromptTokens       uint32
	CompletionTokens   uint32
	CachedTokens       uint32
	// SpecAcceptedTokens and SpecDraftTokens are the engine's speculative
	// decoding counts: draft tokens accepted and proposed (0 without).
	SpecAcceptedTokens uint32
	SpecDraftTokens    uint32
	// KVTransferParamsJSON is the kv_transfer_params_json a vLLM prefill
	// engine returns for the decode leg; empty otherwise.
	KVTransferParamsJSON string
	// Logprobs are the log-probabilities of the output tokens the engine
	// reports with its completion (with stream=false, all of them; when
	// streaming, engines may repeat them or send none).
	Logprobs []Logprob
	// PromptLogprobs are the prompt's, when asked for and not sent on a
	// chunk before.
	PromptLogprobs []Logprob
}

// Stream yields an engine's generation messages in order. Recv returns the
// completion as a Chunk with Final set, then io.EOF. Errors from the engine are
// gRPC status errors.
type Stream interface {
	Recv() (Chunk, error)
}

// Load is an engine's own view of its load: summed over its data-parallel
// ranks for a whole engine, one rank's for a rank target.
type Load struct {
	Running        int
	Waiting        int
	UsedTokens     int
	MaxTotalTokens int
	// MaxRunning is the engine's running-request limit (all ranks); 0
	// when not reported.
	MaxRunning int
	// TokenUsage is the fraction of KV cache in use, in [0, 1].
	TokenUsage float64
	// CacheHitRate is the engine's prefix cache hit rate, in [0, 1].
	CacheHitRate float64
}

// ModelInfo is what an engine says about the model it serves and its cache.
type ModelInfo struct {
	Model            string
	VocabSize        int
	MaxContextLength int
	// MaxInputTokens is the longest prompt the engine accepts, in tokens;
	// 0 when not reported (max_req_input_len). SGLang reports the smaller
	// of its context and its KV cache's token capacity, less one: an
	// engine whose cache is smaller than its context refuses a prompt
	// that fits the context.
	MaxInputTokens int
	// TruncatesPrompts: the engine cuts a prompt beyond its limits
	// instead of refusing it (SGLang's allow_auto_truncate), so no
	// prompt is too long for it.
	TruncatesPrompts bool
	EOSTokenIDs      []uint32
	// PageSize is the KV cache page size in tokens; 0 when not reported.
	PageSize int
	// KVCapacityTokens is the KV cache size in tokens; 0 when not reported.
	KVCapacityTokens int
	// MaxRunningRequests is how many requests the engine runs at once
	// (the rest wait in its queue); 0 when not reported.
	MaxRunningRequests int
	// BootstrapPort is the port of the engine's PD bootstrap server (SGLang
	// server_args disaggregation_bootstrap_port); 0 when not reported.
	BootstrapPort int
}

// Backend is one engine protocol's client: the adapter between kvgate's neutral
// types and the engine's gRPC service.
type Backend interface {
	Generate(ctx context.Context, req *GenerateRequest) (Stream, error)
	// Embed computes the embedding of one input. A vector the engine
	// mangled (empty, not its stated dimension, not finite) is an error.
	Embed(ctx context.Context, req *EmbedRequest) (*EmbedResult, error)
	Abort(ctx context.Context, requestID string) error
	Health(ctx context.Context) error
	Loads(ctx context.Context) (Load, error)
	Info(ctx context.Context) (ModelInfo, error)
	// Tokenizer downloads the engine's tokenizer files as a zip archive
	// (tokenizer.json, tokenizer_config.json, chat templates), checked
	// against the SHA-256 the engine sends with it.
	Tokenizer(ctx context.Context) ([]byte, error)
}

// ErrUnhealthy is returned by Backend.Health when the engine answers but says it
// is not healthy.
var ErrUnhealthy = errors.New("engine reports unhealthy")
