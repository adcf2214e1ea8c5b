package sim

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
)

// Protocols the simulated engine can speak.
const (
	ProtocolSGLang = "sglang"
	ProtocolVLLM   = "vllm"
	ProtocolTRTLLM = "trtllm"
)

// Roles an engine can play in prefill/decode disaggregation (see pd.go).
const (
	RoleRegular = "regular"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// KVBytesPerToken is the KV cache size of one token of the simulated 8B model
// (2 x 32 layers x 8 KV heads x 128 dims x 2 bytes); KV transfers move this
// much per prompt token.
const KVBytesPerToken = 128 << 10

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("sim: invalid config")

// Config describes one simulated engine. Start from DefaultConfig: New does
// not fill in zero fields, because zero is meaningful for several of them
// (TimeScale, EOSTokenID, RequestOverhead), VocabSize aside.
//
// The defaults approximate Llama-3.1-8B in bf16 on one 80 GB H100:
//
//   - KV cache: 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB
//     per token. 80 GB minus ~16 GB of weights and ~10 GB of activations and
//     CUDA graphs leaves ~52 GB, i.e. ~400,000 tokens.
//   - Prefill: ~16 GFLOP per token; at ~40% of the H100's ~990 TFLOPS dense
//     bf16 that is ~25,000 tokens/s, rounded down to 20,000 for attention cost
//     on long prompts.
//   - Decode: one step reads all 16 GB of weights; at 3.35 TB/s that is ~5 ms,
//     ~8 ms with kernel launch and sampling overhead at small batch. Each extra
//     running request adds KV reads and batch work, modelled as 0.05 ms/step.
//
// Every figure the simulator produces inherits these assumptions.
type Config struct {
	// Protocol is the worker protocol served: "sglang", "vllm" or "trtllm".
	Protocol string
	// Model is the served model name (also reported as the model path).
	Model string
	// TokenizerDir holds the tokenizer the engine serves through GetTokenizer
	// (tokenizer.json, tokenizer_config.json, chat templates). Empty: the
	// built-in tokenizer (a small byte-level BPE with ChatML special tokens
	// and template, see scripts/simtokenizer). "none": no tokenizer;
	// GetTokenizer answers UNIMPLEMENTED.
	TokenizerDir string
	// VocabSize bounds input and output token ids. 0: the served tokenizer's
	// vocabulary, with its eos_token as EOSTokenID. It may not exceed the
	// tokenizer's vocabulary, or generated ids would not decode.
	VocabSize int
	// MaxContextLength bounds prompt + generated tokens (Llama-3.1: 131072).
	MaxContextLength int
	// EOSTokenID is the end-of-sequence token when VocabSize is set.
	EOSTokenID uint32
	// PageSize is the KV cache page (block) size in tokens.
	PageSize int
	// KVCapacityTokens is the KV cache size in tokens.
	KVCapacityTokens int
	// AutoTruncate serves SGLang as started with --allow-auto-truncate: a
	// prompt longer than max_req_input_len is cut to it, and max new
	// tokens to what the context leaves, instead of being refused; the
	// engine says so in GetServerInfo's server_args.
	AutoTruncate bool
	// PrefillTokensPerSec is the prefill throughput of the whole engine.
	PrefillTokensPerSec float64
	// RequestOverhead is a fixed per-request delay before the first token
	// (scheduling, tokenizer-free input handling, first sampling step).
	RequestOverhead time.Duration
	// DecodeMsPerToken is the base duration of one decode step.
	DecodeMsPerToken float64
	// DecodeMsPerRunning is added to each decode step per running request.
	DecodeMsPerRunning float64
	// StepsBeforeFirstToken is how many decode steps, each as long as a
	// step of the batch the request joins (DecodeMsPerToken plus
	// DecodeMsPerRunning for each running request, this one included),
	// a request's first token comes after its prefill: 0 (the default) is
	// an engine that prefills in a lane of its own; about 1.5 an engine
	// whose scheduler runs prefill inside the decode batch (vLLM's), where
	// the prefill waits for the running step to end and then shares a
	// step with every running request, so its first token comes later
	// the more requests the engine runs.
	StepsBeforeFirstToken float64
	// MaxRunning caps concurrently running requests; the rest wait (FIFO).
	MaxRunning int
	// TimeScale multiplies every delay. 0 means no delays at all (tests);
	// queueing and ordering still hold.
	TimeScale float64
	// Seed is mixed into every request's sampling seed.
	Seed int64
	// Role is the engine's part in prefill/decode disaggregation: "regular"
	// (or empty: serves whole requests and ignores PD parameters), "prefill"
	// or "decode". See pd.go for the protocol.
	Role string
	// BootstrapPort is the port of a prefill engine's bootstrap endpoint,
	// where decode engines fetch rooms; 0 picks a free port (see
	// Engine.BootstrapPort). Other roles ignore it.
	BootstrapPort int
	// BootstrapTimeout is how long a decode engine waits for its room before
	// failing the request with UNAVAILABLE. A prefill engine forgets rooms
	// nobody fetched after twice this long.
	BootstrapTimeout time.Duration
	// KVTransferGBps is the prefill-to-decode KV transfer speed in GB/s
	// (25: RDMA-class). A decode engine spends prompt tokens x
	// KVBytesPerToken / speed (times TimeScale) on each transfer.
	KVTransferGBps float64
	// KVEvents makes SubscribeKvEvents stream the cache's changes (see
	// events.go). Off, it answers UNIMPLEMENTED on both protocols, as an
	// engine started without KV events does, so a router's fallback to
	// approximating the cache can be tested.
	KVEvents bool
	// KVEventHistory is how many of the latest KV event batches are kept
	// for subscribers that resume with a start_sequence_number. 0 keeps
	// none: resuming then works only from the next batch.
	KVEventHistory int
	// HybridSlidingWindow > 0 publishes KV events as a hybrid model's
	// engine does (see hybridEvents): the cache is group 0, full attention,
	// and a second group of sliding-window layers with this window (in
	// tokens) stores and frees the same blocks under the same hashes.
	HybridSlidingWindow int
	// SpecDraftTokens > 0 reports speculative decoding with this many draft
	// tokens per decode step (see speculative).
	SpecDraftTokens int
	// DPSize is the number of data-parallel ranks, each a replica with
	// its own scheduler, KV cache and KV events, with every capacity and
	// throughput figure above (see dp.go). 0 or 1: one rank.
	DPSize int
	// EmbeddingDim is the length of the vectors Embed returns (see
	// Embedding); 0: the engine serves no embeddings and Embed answers
	// UNIMPLEMENTED, as a generation-only engine does.
	EmbeddingDim int
	// Scripts are answers the engine gives instead of sampling, for tests
	// of what clients receive (see Script); the first that matches a
	// prompt wins, and a prompt none matches is sampled as usual.
	Scripts []Script
	// Reply is how a prompt no script matches is answered (reply.go):
	// ReplyRandom (or empty) samples token ids, ReplyEcho repeats the
	// prompt's last user message.
	Reply string
	// GRPCHealth makes Start also serve the standard grpc.health.v1
	// Health service, as some engines' gRPC servers do (rpcfaults.go).
	GRPCHealth bool
	// Faults are the initial injected faults (see Engine.SetFaults).
	Faults Faults
	// TLS, when set, makes Start serve gRPC over TLS with this server
	// configuration (its certificates, and ClientAuth for mutual TLS), as
	// engines behind grpcs:// worker URLs do. Not settable by flag.
	TLS *tls.Config
	// Logger receives debug logs; nil means slog.Default().
	Logger *slog.Logger
	// Calls, when set, is told the full method name and the incoming
	// metadata of every RPC the engine receives, so that tests can see
	// what a router sends beside the messages (trace context). An
	// interface, not a func, so that Config stays comparable. Not settable
	// by flag.
	Calls CallObserver
}

// CallObserver sees the metadata of each RPC an engine receives.
type CallObserver interface {
	ObserveCall(method string, md metadata.MD)
}

// Faults are failures the engine injects, to test the router's error paths.
type Faults struct {
	// DropAfterTokens > 0 ends each Generate stream with UNAVAILABLE after
	// that many tokens, as when an engine process dies mid-stream.
	DropAfterTokens int
	// Unavailable makes Generate fail at once with UNAVAILABLE.
	Unavailable bool
	// UnimplementedGenerate makes Generate answer UNIMPLEMENTED, as an
	// engine serving only embeddings does.
	UnimplementedGenerate bool
	// StallAfterTokens > 0 stops each stream after that many tokens and holds
	// it (and its KV pages) until the client goes away or aborts.
	StallAfterTokens int
	// Unhealthy makes HealthCheck answer healthy=false.
	Unhealthy bool
	// NeverPublish makes a prefill engine complete its leg without publishing
	// the bootstrap room, so the decode side never gets the KV cache.
	NeverPublish bool
	// UnreportedBootstrapPort (SGLang protocol) leaves
	// disaggregation_bootstrap_port out of GetServerInfo, as for an engine
	// whose bootstrap port the router is told instead (--worker-urls
	// URL@PORT).
	UnreportedBootstrapPort bool
	// StallBeforeFirstToken accepts each Generate and then sends nothing:
	// the request is admitted and prefilled (it holds its KV pages), and the
	// stream stays open until the client goes away or aborts, as an engine
	// hung in its first step.
	StallBeforeFirstToken bool
	// AbortOvertakesRequest holds each Generate before the engine knows it
	// until an Abort naming it has come and gone: the Abort finds nothing
	// and is answered as one for a finished request, as SGLang and vLLM
	// answer an Abort that overtakes the request it names (a client that
	// leaves as its request is sent). The request then runs as usual.
	AbortOvertakesRequest bool
	// GarbageStream makes each stream invalid in two ways a router must
	// catch: every stream chunk reports the token at output position i as
	// VocabSize+i (out of the vocabulary), and the completion's output_ids
	// are the tokens actually sampled, which contradict the chunks. A
	// non-streaming request, which has no chunks, gets out-of-vocabulary
	// output_ids (VocabSize+i) in its completion instead.
	GarbageStream bool
	// CompletionRepeatsLastChunk (vLLM protocol) ends a streamed Generate
	// as SMG's vLLM servicer does, with vLLM's delta output: the completion
	// repeats the last chunk's token ids, their count and log-probabilities
	// instead of listing the whole output, and leaves the sum to the client.
	CompletionRepeatsLastChunk bool
	// KVEventDropEvery > 0 loses every N-th KV event batch of the engine
	// process (sequence numbers N-1, 2N-1, ...): it is numbered but neither
	// delivered nor kept for replay, so subscribers see a gap, as after
	// events lost in transit.
	KVEventDropEvery int
	// KVEventDuplicateEvery > 0 delivers every N-th KV event batch
	// (sequence numbers N-1, 2N-1, ...) twice in a row, with the same
	// sequence number, live and on replay.
	KVEventDuplicateEvery int
	// KVEventDelay > 0 holds every KV event batch this long after it is
	// published before subscribers get it, in order, as a congested
	// transport would. Each subscriber waits on its own; the engine never
	// does, so batches pile up in the subscriber's buffer meanwhile, and one
	// that overflows it is dropped like any slow subscriber. It is a fault,
	// not part of the latency model: TimeScale does not scale it.
	KVEventDelay time.Duration
	// KVEventFloodBlocks > 0 makes the engine hostile to its subscribers'
	// memory: every batch it publishes also stores this many blocks, each
	// under a parent hash it never stored nor will (so a mirror can never
	// attach them) and never removes, as an engine flooding a router would.
	KVEventFloodBlocks int
	// KVEventFloodRanks > 1 publishes the flood also as batches of
	// data-parallel ranks 1 to KVEventFloodRanks-1, numbered per rank from
	// 0, which an engine without ranks of its own (DPSize 0 or 1) does not
	// have. They are sent to live subscribers only, never kept for replay.
	KVEventFloodRanks int
	// RPC are partial implementations of the engine's RPCs (rpcfaults.go).
	RPC RPCFaults

	// The faults below are answers real engines give that contradict what
	// they did (see misreport.go).

	// UsageZero reports completion_tokens 0 on every message and, when
	// streaming, a completion without output_ids, as engines that count
	// nothing in their last message do.
	UsageZero bool
	// ModelInfoMinimal answers GetModelInfo without vocab_size, context
	// length or end-of-sequence ids.
	ModelInfoMinimal bool
	// ReportsNonsense (SGLang protocol) fills what the engine says of
	// itself with figures no engine can mean: in GetModelInfo a negative
	// vocab_size and context length; in GetServerInfo a page_size and
	// max_running_requests of 1e300 and a negative max_total_num_tokens;
	// in GetLoads negative counts, a NaN token usage and a cache hit rate
	// of 7. It serves requests as usual.
	ReportsNonsense bool
	// EmitOOV replaces the output token at position EmitOOVAfter (0: the
	// first) with VocabSize, an id outside the vocabulary.
	EmitOOV      bool
	EmitOOVAfter int
	// IgnoreAbort makes Abort answer success and do nothing, and a request
	// whose stream the client cancelled run to its natural end: it keeps
	// its KV pages and counts as running until then.
	IgnoreAbort bool
	// IgnoreMaxTokens generates twice the request's max new tokens plus 8
	// (within the context length), past its stop token ids and EOS, as an
	// engine that drops the request's limits.
	IgnoreMaxTokens bool
	// RefuseSeed (vLLM protocol) fails a Generate that carries a sampling
	// seed with INTERNAL, as vLLM's CPU build does (its engine then dies:
	// torch's CPU random generator has no offset for it to rewind when a
	// seeded prompt's prefill is split).
	RefuseSeed bool
	// KVEventLoadEcho follows each batch of a SubscribeKvEvents stream with
	// a load-only batch (load.load_only) repeating its sequence number, as
	// SMG's vLLM servicer sends its load heartbeats.
	KVEventLoadEcho bool
}

// DefaultConfig returns an SGLang engine serving "kvgate-sim-8b" in real time,
// with constants approximating an 8B model on one H100 (see Config).
func DefaultConfig() Config {
	return Config{
		Protocol:            ProtocolSGLang,
		Model:               "kvgate-sim-8b",
		MaxContextLength:    131072,
		PageSize:            16,
		KVCapacityTokens:    400000,
		PrefillTokensPerSec: 20000,
		RequestOverhead:     5 * time.Millisecond,
		DecodeMsPerToken:    8,
		DecodeMsPerRunning:  0.05,
		MaxRunning:          256,
		TimeScale:           1,
		Role:                RoleRegular,
		BootstrapTimeout:    30 * time.Second,
		KVTransferGBps:      25,
		KVEvents:            true,
		KVEventHistory:      1024,
		EmbeddingDim:        4096, // the 8B model's hidden size
		Reply:               ReplyRandom,
	}
}

// RegisterFlags binds the config's fields to flags on fs, using the current
// values as defaults (call it on DefaultConfig()).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	const h100 = " (default approximates an 8B model on one H100)"
	fs.StringVar(&c.Protocol, "protocol", c.Protocol, `worker protocol to serve: "sglang", "vllm" or "trtllm" (TensorRT-LLM)`)
	fs.StringVar(&c.Model, "model", c.Model, "served model name")
	fs.StringVar(&c.TokenizerDir, "tokenizer-path", c.TokenizerDir, `directory with the tokenizer to serve through GetTokenizer (empty: the built-in ChatML tokenizer; "none": no tokenizer)`)
	fs.IntVar(&c.VocabSize, "vocab-size", c.VocabSize, "vocabulary size; token ids must be below it (0: the tokenizer's, with its eos_token)")
	fs.IntVar(&c.MaxContextLength, "max-context-length", c.MaxContextLength, "maximum prompt + generated tokens")
	fs.Var((*uint32Value)(&c.EOSTokenID), "eos-token-id", "end-of-sequence token id, when --vocab-size is set")
	fs.IntVar(&c.PageSize, "page-size", c.PageSize, "KV cache page size in tokens")
	fs.IntVar(&c.HybridSlidingWindow, "hybrid-sliding-window", c.HybridSlidingWindow,
		"publish KV events as a hybrid model: a second cache group of sliding-window layers with this window in tokens (0: one full-attention group)")
	fs.IntVar(&c.SpecDraftTokens, "spec-draft-tokens", c.SpecDraftTokens,
		"report speculative decoding with this many draft tokens per decode step, half of them accepted (0: none)")
	fs.IntVar(&c.KVCapacityTokens, "kv-capacity-tokens", c.KVCapacityTokens, "KV cache capacity in tokens"+h100)
	fs.BoolVar(&c.AutoTruncate, "auto-truncate", c.AutoTruncate,
		"SGLang: cut a prompt longer than max_req_input_len to it, and max new tokens to the context left, instead of refusing it (SGLang's --allow-auto-truncate)")
	fs.Float64Var(&c.PrefillTokensPerSec, "prefill-tokens-per-sec", c.PrefillTokensPerSec, "prefill throughput, shared by all requests"+h100)
	fs.DurationVar(&c.RequestOverhead, "request-overhead", c.RequestOverhead, "fixed per-request delay before the first token"+h100)
	fs.Float64Var(&c.DecodeMsPerToken, "decode-ms-per-token", c.DecodeMsPerToken, "base decode step in milliseconds"+h100)
	fs.Float64Var(&c.DecodeMsPerRunning, "decode-ms-per-running", c.DecodeMsPerRunning, "extra milliseconds per decode step for each running request"+h100)
	fs.Float64Var(&c.StepsBeforeFirstToken, "steps-before-first-token", c.StepsBeforeFirstToken,
		"decode steps of the batch a request joins that its first token waits for after its prefill (0: prefill in a lane of its own; about 1.5: prefill inside the decode batch, as vLLM schedules it)")
	fs.IntVar(&c.MaxRunning, "max-running", c.MaxRunning, "maximum running requests; the rest wait in a FIFO queue")
	fs.Float64Var(&c.TimeScale, "time-scale", c.TimeScale, "multiplies every delay; 0 runs as fast as possible")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed mixed into every request's sampling")
	fs.StringVar(&c.Role, "role", c.Role, `disaggregation role: "regular", "prefill" or "decode"`)
	fs.IntVar(&c.BootstrapPort, "bootstrap-port", c.BootstrapPort, "prefill role: port of the bootstrap endpoint decode engines fetch rooms from (0: a free port)")
	fs.DurationVar(&c.BootstrapTimeout, "bootstrap-timeout", c.BootstrapTimeout, "decode role: how long to wait for a bootstrap room before failing the request")
	fs.Float64Var(&c.KVTransferGBps, "kv-transfer-gbps", c.KVTransferGBps, "decode role: KV transfer speed from the prefill engine in GB/s (25 is RDMA-class)")
	fs.Var((*OnOff)(&c.KVEvents), "kv-events", `publish KV cache events on SubscribeKvEvents: "on" or "off" (off: SubscribeKvEvents answers UNIMPLEMENTED)`)
	fs.IntVar(&c.DPSize, "dp-size", c.DPSize, "data-parallel ranks behind the address, each with its own scheduler, KV cache, loads and KV events (0 or 1: one)")
	fs.IntVar(&c.KVEventHistory, "kv-event-history", c.KVEventHistory, "KV event batches kept for subscribers resuming from a sequence number")
	fs.Var(&scriptsFlag{scripts: &c.Scripts}, "script", `JSON file of answers to give instead of sampling: [{"when": text the prompt contains, "text": the answer (or "ids": token ids)}]; the first match wins`)
	fs.Var(replyFlag{&c.Reply}, "reply", `how prompts no --script matches are answered: "random" (sampled token ids, what benchmarks use) or "echo" (the last user message, deterministic)`)
	fs.IntVar(&c.EmbeddingDim, "embedding-dim", c.EmbeddingDim, "length of the vectors Embed returns (0: Embed answers UNIMPLEMENTED)")
	fs.IntVar(&c.Faults.DropAfterTokens, "fail-after", c.Faults.DropAfterTokens, "fault: end each stream with UNAVAILABLE after this many tokens (0: never)")
	fs.BoolVar(&c.Faults.Unavailable, "fail-unavailable", c.Faults.Unavailable, "fault: answer every Generate with UNAVAILABLE")
	fs.BoolVar(&c.Faults.UnimplementedGenerate, "fail-unimplemented", c.Faults.UnimplementedGenerate, "fault: answer every Generate with UNIMPLEMENTED, as an engine serving only embeddings")
	fs.IntVar(&c.Faults.StallAfterTokens, "stall-after", c.Faults.StallAfterTokens, "fault: stop sending after this many tokens and hold the stream (0: never)")
	fs.BoolVar(&c.Faults.Unhealthy, "unhealthy", c.Faults.Unhealthy, "fault: HealthCheck answers healthy=false")
	fs.BoolVar(&c.Faults.StallBeforeFirstToken, "stall-before-first-token", c.Faults.StallBeforeFirstToken, "fault: accept each Generate, send nothing and hold the stream")
	fs.BoolVar(&c.Faults.AbortOvertakesRequest, "abort-overtakes-request", c.Faults.AbortOvertakesRequest, "fault: hold each Generate until an Abort naming it has arrived and found nothing, then run it, as an engine that an Abort overtook")
	fs.BoolVar(&c.Faults.GarbageStream, "garbage-stream", c.Faults.GarbageStream, "fault: stream out-of-vocabulary token ids and a completion that contradicts them")
	fs.BoolVar(&c.Faults.CompletionRepeatsLastChunk, "completion-repeats-last-chunk", c.Faults.CompletionRepeatsLastChunk, "fault (vllm protocol): end a streamed Generate with a completion that repeats the last chunk's ids instead of listing the whole output, as SMG's vLLM servicer does")
	fs.BoolVar(&c.Faults.NeverPublish, "never-publish", c.Faults.NeverPublish, "fault (prefill role): complete prefill legs without publishing their bootstrap rooms")
	fs.IntVar(&c.Faults.KVEventDropEvery, "kv-event-drop-every", c.Faults.KVEventDropEvery, "fault: number every N-th KV event batch but never deliver nor keep it, a gap for subscribers (0: never)")
	fs.IntVar(&c.Faults.KVEventDuplicateEvery, "kv-event-duplicate-every", c.Faults.KVEventDuplicateEvery, "fault: deliver every N-th KV event batch twice in a row (0: never)")
	fs.DurationVar(&c.Faults.KVEventDelay, "kv-event-delay", c.Faults.KVEventDelay, "fault: deliver each KV event batch this long after it is published, not scaled by --time-scale (0: at once)")
	fs.IntVar(&c.Faults.KVEventFloodBlocks, "kv-event-flood-blocks", c.Faults.KVEventFloodBlocks, "fault: every KV event batch also stores this many blocks under parents never stored, never removed (0: none)")
	c.registerRPCFlags(fs)
	fs.BoolVar(&c.Faults.UsageZero, "usage-zero", c.Faults.UsageZero, "fault: report completion_tokens 0, and no output_ids in a streamed completion")
	fs.BoolVar(&c.Faults.ModelInfoMinimal, "model-info-minimal", c.Faults.ModelInfoMinimal, "fault: GetModelInfo reports no vocab_size, context length or end-of-sequence ids")
	fs.Var(&oovFlag{&c.Faults}, "emit-oov-after", "fault: emit an id beyond the vocabulary as the output token after this many (0: the first token)")
	fs.BoolVar(&c.Faults.IgnoreAbort, "ignore-abort", c.Faults.IgnoreAbort, "fault: Abort and stream cancellation do nothing; requests run to their end")
	fs.BoolVar(&c.Faults.IgnoreMaxTokens, "ignore-max-tokens", c.Faults.IgnoreMaxTokens, "fault: generate twice max_new_tokens plus 8 tokens, ignoring the limit, stop_token_ids and EOS")
	fs.BoolVar(&c.Faults.KVEventLoadEcho, "kv-event-load-echo", c.Faults.KVEventLoadEcho, "fault: follow each KV event batch of a SubscribeKvEvents stream with a load-only batch repeating its sequence number, as SMG's vLLM servicer's heartbeats do")
	fs.BoolVar(&c.Faults.RefuseSeed, "refuse-seed", c.Faults.RefuseSeed, "fault (vllm protocol): fail a Generate that carries a sampling seed with INTERNAL, as vLLM's CPU build does")
	fs.IntVar(&c.Faults.KVEventFloodRanks, "kv-event-flood-ranks", c.Faults.KVEventFloodRanks, "fault: with --kv-event-flood-blocks, also publish the flood on dp ranks 1 to N-1, which the engine does not have (0 or 1: rank 0 only)")
}

// uint32Value is a flag.Value for a uint32 field.
type uint32Value uint32

func (v *uint32Value) String() string { return strconv.FormatUint(uint64(*v), 10) }
func (v *uint32Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return err
	}
	*v = uint32Value(n)
	return nil
}

// OnOff is a flag.Value for a switch written as a state: "on" or "off"
// ("true" and "false" too, any case). It takes a value, so "--kv-events off"
// reads as it does on an engine's command line.
type OnOff bool

func (v *OnOff) String() string {
	if v != nil && *v {
		return "on"
	}
	return "off"
}

func (v *OnOff) Set(s string) error {
	switch strings.ToLower(s) {
	case "on", "true":
		*v = true
	case "off", "false":
		*v = false
	default:
		return fmt.Errorf("want on or off, got %q", s)
	}
	return nil
}

// validate reports the first bad field.
func (c *Config) validate() error {
	bad := func(field string, format string, args ...any) error {
		return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Protocol != ProtocolSGLang && c.Protocol != ProtocolVLLM && c.Protocol != ProtocolTRTLLM:
		return bad("Protocol", "must be %q, %q or %q, got %q", ProtocolSGLang, ProtocolVLLM, ProtocolTRTLLM, c.Protocol)
	case c.Protocol == ProtocolTRTLLM && c.Role != "" && c.Role != RoleRegular:
		return bad("Role", "must be %q for protocol %q: TensorRT-LLM's disaggregation is not simulated, got %q", RoleRegular, ProtocolTRTLLM, c.Role)
	case c.Protocol == ProtocolTRTLLM && c.DPSize > 1:
		return bad("DPSize", "must be 0 or 1 for protocol %q: its requests cannot name a data-parallel rank, got %d", ProtocolTRTLLM, c.DPSize)
	case c.Reply != "" && c.Reply != ReplyRandom && c.Reply != ReplyEcho:
		return bad("Reply", "must be %q or %q, got %q", ReplyRandom, ReplyEcho, c.Reply)
	case c.Model == "":
		return bad("Model", "must not be empty")
	case c.VocabSize <= 0:
		return bad("VocabSize", "must be > 0, got %d", c.VocabSize)
	case int64(c.EOSTokenID) >= int64(c.VocabSize):
		return bad("EOSTokenID", "must be < VocabSize (%d), got %d", c.VocabSize, c.EOSTokenID)
	case c.MaxContextLength <= 0:
		return bad("MaxContextLength", "must be > 0, got %d", c.MaxContextLength)
	case c.PageSize <= 0:
		return bad("PageSize", "must be > 0, got %d", c.PageSize)
	case c.KVCapacityTokens < c.PageSize:
		return bad("KVCapacityTokens", "must hold at least one page (%d tokens), got %d", c.PageSize, c.KVCapacityTokens)
	case !(c.PrefillTokensPerSec > 0):
		return bad("PrefillTokensPerSec", "must be > 0, got %v", c.PrefillTokensPerSec)
	case c.RequestOverhead < 0:
		return bad("RequestOverhead", "must be >= 0, got %v", c.RequestOverhead)
	case !(c.DecodeMsPerToken >= 0):
		return bad("DecodeMsPerToken", "must be >= 0, got %v", c.DecodeMsPerToken)
	case !(c.DecodeMsPerRunning >= 0):
		return bad("DecodeMsPerRunning", "must be >= 0, got %v", c.DecodeMsPerRunning)
	case !(c.StepsBeforeFirstToken >= 0) || math.IsInf(c.StepsBeforeFirstToken, 1):
		return bad("StepsBeforeFirstToken", "must be >= 0 and finite, got %v", c.StepsBeforeFirstToken)
	case c.MaxRunning <= 0:
		return bad("MaxRunning", "must be > 0, got %d", c.MaxRunning)
	case !(c.TimeScale >= 0):
		return bad("TimeScale", "must be >= 0, got %v", c.TimeScale)
	case c.Role != "" && c.Role != RoleRegular && c.Role != RolePrefill && c.Role != RoleDecode:
		return bad("Role", "must be %q, %q or %q, got %q", RoleRegular, RolePrefill, RoleDecode, c.Role)
	case c.BootstrapPort < 0 || c.BootstrapPort > 65535:
		return bad("BootstrapPort", "must be in 0..65535, got %d", c.BootstrapPort)
	case c.Role == RolePrefill && c.BootstrapTimeout < 0:
		return bad("BootstrapTimeout", "must be >= 0 (0: keep unfetched rooms for a minute), got %v", c.BootstrapTimeout)
	case c.Role == RoleDecode && c.BootstrapTimeout <= 0:
		return bad("BootstrapTimeout", "must be > 0 for a decode engine, got %v", c.BootstrapTimeout)
	case c.Role == RoleDecode && !(c.KVTransferGBps > 0):
		return bad("KVTransferGBps", "must be > 0 for a decode engine, got %v", c.KVTransferGBps)
	case c.Faults.DropAfterTokens < 0:
		return bad("Faults.DropAfterTokens", "must be >= 0, got %d", c.Faults.DropAfterTokens)
	case c.Faults.EmitOOVAfter < 0:
		return bad("Faults.EmitOOVAfter", "must be >= 0, got %d", c.Faults.EmitOOVAfter)
	case c.Faults.StallAfterTokens < 0:
		return bad("Faults.StallAfterTokens", "must be >= 0, got %d", c.Faults.StallAfterTokens)
	case c.DPSize < 0 || c.DPSize > maxDPSize:
		return bad("DPSize", "must be in 0..%d, got %d", maxDPSize, c.DPSize)
	case c.DPSize > 1 && c.Role != "" && c.Role != RoleRegular:
		return bad("DPSize", "%d needs the regular role: data-parallel ranks are not modelled with disaggregation (role %q)", c.DPSize, c.Role)
	case c.EmbeddingDim < 0:
		return bad("EmbeddingDim", "must be >= 0 (0: no embeddings), got %d", c.EmbeddingDim)
	case c.KVEventHistory < 0:
		return bad("KVEventHistory", "must be >= 0, got %d", c.KVEventHistory)
	case c.Faults.KVEventDropEvery < 0:
		return bad("Faults.KVEventDropEvery", "must be >= 0, got %d", c.Faults.KVEventDropEvery)
	case c.Faults.KVEventDuplicateEvery < 0:
		return bad("Faults.KVEventDuplicateEvery", "must be >= 0, got %d", c.Faults.KVEventDuplicateEvery)
	case c.Faults.KVEventDelay < 0:
		return bad("Faults.KVEventDelay", "must be >= 0, got %v", c.Faults.KVEventDelay)
	case c.Faults.KVEventFloodBlocks < 0 || c.Faults.KVEventFloodBlocks > maxFloodBlocks:
		return bad("Faults.KVEventFloodBlocks", "must be in [0, %d], got %d", maxFloodBlocks, c.Faults.KVEventFloodBlocks)
	case c.Faults.KVEventFloodRanks < 0 || c.Faults.KVEventFloodRanks > maxFloodRanks:
		return bad("Faults.KVEventFloodRanks", "must be in [0, %d], got %d", maxFloodRanks, c.Faults.KVEventFloodRanks)
	}
	return nil
}
