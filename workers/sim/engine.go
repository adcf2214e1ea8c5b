// Package sim is a simulated LLM inference engine that speaks the SGLang and
// vLLM worker gRPC protocols. Tests and kvgate's embedded default run the
// router against it instead of GPUs: it behaves like a real engine in
// everything a router can observe — streaming token ids, a paged prefix cache
// whose hits show up in cached_tokens, queueing and latency under load, load
// reports, KV cache events, aborts, and injected faults.
//
// Its latency and capacity constants approximate an 8B model on one H100 (see
// Config); every measurement taken against it inherits that assumption.
//
// The model of the engine:
//
//   - Admission: requests wait in one FIFO queue until fewer than MaxRunning
//     are running and the prompt's whole pages fit in the KV cache (after
//     evicting unpinned pages). The head of the queue blocks those behind it.
//   - Prefill: one lane, in admission order: a request's uncached prompt
//     tokens take uncached/PrefillTokensPerSec after the previous prefill
//     ends. RequestOverhead is added before the first token, and
//     StepsBeforeFirstToken decode steps of the batch it joins (none by
//     default; an engine that runs prefill inside the decode batch).
//   - Decode: one token per step per request; a step lasts DecodeMsPerToken
//     plus DecodeMsPerRunning for each running request.
//   - KV cache: see pageCache. A running request pins its prompt's whole
//     pages. When it finishes (stop or length) the whole pages of prompt +
//     output (minus the last token, which has no KV yet) are cached, as
//     SGLang's radix cache does; aborted and failed requests cache nothing new.
//     Tokens a request generates, and its prompt's partial last page, are
//     private and not limited by capacity (no preemption is modelled), but
//     they count as used in load reports.
//   - KV events: every change to the cache is published on SubscribeKvEvents,
//     one stored event per page, numbered per process from 0, with a bounded
//     replay history and injectable losses, duplicates and delays. See
//     events.go.
//   - Disaggregation (Config.Role): a prefill engine completes legs after
//     prefill and publishes their KV under a bootstrap room; a decode engine
//     fetches the room, charges the transfer, and decodes with no prefill.
//     See pd.go and bootstrap.go.
//   - Log-probabilities, when asked for, are a deterministic function of
//     position and token (logprobs.go); a decode leg reports no prompt's.
//   - Structured output: a json_schema constraint is answered with the
//     schema's minimal instance (structured.go, jsonschema.go); other
//     constraint kinds are accepted and ignored.
package sim

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/tokenize"
)

// Engine is one simulated engine. Its methods are safe for concurrent use.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	start   time.Time
	faults  atomic.Pointer[Faults]
	closed  chan struct{}
	closing sync.Once
	calls   rpcCalls // per method name, for tests (rpcfaults.go)

	mu    sync.Mutex
	cache *pageCache
	// evictions dates recent evictions, for debug lines (see evictionClock).
	evictions evictionClock
	reqs      map[string]*request // waiting or running, by id
	// overtaken are the ids an Abort named before their request was known
	// (Faults.AbortOvertakesRequest): closed when that Abort has come.
	overtaken     map[string]chan struct{}
	queue         []*request // waiting, FIFO
	running       int
	prefillFreeAt time.Time
	nextAnonID    uint64
	counters      counters
	tput          throughput
	events        eventHub
	tok           *servedTokenizer // nil: GetTokenizer is UNIMPLEMENTED
	scripts       *scripts         // nil: every answer is sampled
	// encoder tokenizes structured answers (structured.go); nil without
	// a tokenizer.
	encoder func() (*tokenize.Tokenizer, error)

	// Data parallelism (see dp.go): the ranks of a front engine, nil with
	// a single rank; and a rank's number (0 for a single-rank engine).
	ranks []*Engine
	rank  int32

	boot     *bootstrapServer // prefill role only
	bootHost string           // the host decode engines reach boot on
	hc       *http.Client     // decode role only: fetches rooms
}

// throughput measures output tokens per second over windows of at least a
// second, closed when loads are polled (like an engine's periodic log line).
type throughput struct {
	since  time.Time
	tokens uint64
	rate   float64
}

// Stats is a snapshot of the engine's state and lifetime counters, for tests.
type Stats struct {
	Running int
	Waiting int
	// UsedTokens is the KV held by running requests: their pinned prompt
	// pages (shared pages once) plus their private tokens (the prompt's
	// partial last page and everything generated so far). Cached pages that
	// nothing pins are free to evict and are not counted. This is what the
	// engine reports as num_used_tokens, like SGLang.
	UsedTokens int
	// CachedPages is the number of pages in the prefix cache, pinned or not.
	CachedPages int
	// PinnedPages is the number of cached pages running requests hold.
	PinnedPages    int
	CapacityTokens int

	Requests   uint64 // Generate calls accepted into the queue
	Completed  uint64 // finished with "stop" or "length"
	Aborted    uint64 // requests ended by an Abort RPC
	AbortCalls uint64 // Abort RPCs received, whether or not the id was known
	Cancelled  uint64 // requests ended because the client's context ended
	Failed     uint64 // streams ended by an injected fault (DropAfterTokens)
	Rejected   uint64 // refused: invalid argument, duplicate id, Unavailable fault
	// QueuedFull counts requests that arrived while MaxRunning were
	// running: they waited in this engine's queue (a router that binds
	// late sends none while another engine has room).
	QueuedFull uint64

	PromptTokens       uint64 // prompt tokens of admitted requests
	CachedPromptTokens uint64 // of those, served from the prefix cache
	GeneratedTokens    uint64 // output tokens produced
	// QueueShrunk counts requests admitted with fewer cached prompt tokens
	// than the cache held for them when they were queued: while they
	// waited for room, the requests admitted before them evicted part of
	// their prefix. A router that predicted the cache at their arrival
	// cannot have known. QueueGrown counts the opposite (a request ahead
	// in the queue stored their prefix).
	QueueShrunk, QueueGrown uint64
	Embeds                  uint64 // Embed calls answered with a vector
	EmbedTokens             uint64 // input tokens of those
	KVSubscribers           int    // open SubscribeKvEvents streams
	// KVNextSequence is the sequence number the next KV event batch will
	// carry: the number of batches this engine published so far, those lost
	// to Faults.KVEventDropEvery included.
	KVNextSequence uint64

	// Prefill role: rooms published on the bootstrap endpoint, fetched by
	// decode engines, expired unfetched, and held now.
	RoomsPublished, RoomsFetched, RoomsExpired uint64
	RoomsHeld                                  int
	// Decode role: legs that waited for a room (all of them), those that
	// gave up after BootstrapTimeout, prompt tokens whose KV was transferred,
	// and legs waiting for their room or transfer now.
	RoomWaits, RoomTimeouts, TransferTokens uint64
	Transferring                            int
}

type counters struct {
	requests, completed, aborted, abortCalls, cancelled, failed, rejected uint64
	promptTokens, cachedPromptTokens, generatedTokens                     uint64
	roomWaits, roomTimeouts, transferTokens                               uint64
	queueShrunk, queueGrown                                               uint64
	embeds, embedTokens                                                   uint64
	queuedFull                                                            uint64
}

// New returns an engine for cfg, or an error wrapping ErrInvalidConfig that
// names the bad field. A prefill engine's bootstrap endpoint listens on
// 127.0.0.1 (Start uses the gRPC listener's host); Close stops it.
func New(cfg Config) (*Engine, error) { return newEngine(cfg, "127.0.0.1") }

func newEngine(cfg Config, host string) (*Engine, error) {
	var tok *servedTokenizer
	if cfg.TokenizerDir != "none" {
		var err error
		if tok, err = loadTokenizer(cfg.TokenizerDir); err != nil {
			return nil, err
		}
		switch {
		case cfg.VocabSize == 0:
			cfg.VocabSize = tok.vocab
			if tok.hasEOS {
				cfg.EOSTokenID = tok.eos
			}
		case cfg.VocabSize > tok.vocab:
			return nil, fmt.Errorf("%w: VocabSize %d exceeds the served tokenizer's vocabulary (%d): generated ids would not decode; leave it 0 or set TokenizerDir",
				ErrInvalidConfig, cfg.VocabSize, tok.vocab)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	scripts, err := compileScripts(cfg.Scripts, tok, cfg.VocabSize)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	e := &Engine{
		cfg:    cfg,
		log:    log.With("component", "sim", "protocol", cfg.Protocol),
		start:  time.Now(),
		closed: make(chan struct{}),
		// A fresh random hash seed per engine, so block hashes are this
		// process's own names (see pageCache).
		cache:     newPageCache(cfg.PageSize, cfg.KVCapacityTokens/cfg.PageSize, rand.Int64()),
		reqs:      map[string]*request{},
		overtaken: map[string]chan struct{}{},
		events:    newEventHub(cfg.KVEventHistory),
		tok:       tok,
		scripts:   scripts,
		encoder:   newEncoder(tok),
	}
	e.tput.since = e.start
	f := cfg.Faults
	e.faults.Store(&f)
	if cfg.DPSize > 1 {
		if err := e.newRanks(host); err != nil {
			return nil, err
		}
	}
	switch e.role() {
	case RolePrefill:
		ttl := 2 * cfg.BootstrapTimeout
		if ttl == 0 {
			ttl = time.Minute
		}
		boot, err := startBootstrap(host, cfg.BootstrapPort, ttl, e.closed)
		if err != nil {
			return nil, err
		}
		e.boot, e.bootHost = boot, host
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			e.bootHost = "127.0.0.1"
		}
	case RoleDecode:
		e.hc = newBootstrapClient()
	}
	return e, nil
}

// Register adds the engine's gRPC service (SGLang's SglangScheduler, vLLM's
// VllmEngine or TensorRT-LLM's TrtllmService, per Config.Protocol) to s.
func (e *Engine) Register(s grpc.ServiceRegistrar) {
	switch e.cfg.Protocol {
	case ProtocolSGLang:
		sglang.RegisterSglangSchedulerServer(s, &sglangServer{e: e})
	case ProtocolVLLM:
		vllm.RegisterVllmEngineServer(s, &vllmServer{e: e})
	case ProtocolTRTLLM:
		registerTRTLLM(s, e)
	}
}

// Config returns the engine's configuration (Faults as at creation).
func (e *Engine) Config() Config { return e.cfg }

// SetFaults switches injected faults at runtime. Running streams see the new
// faults at their next token.
func (e *Engine) SetFaults(f Faults) {
	e.faults.Store(&f)
	for _, r := range e.ranks {
		r.SetFaults(f)
	}
}

// Faults returns the faults currently injected.
func (e *Engine) Faults() Faults { return *e.faults.Load() }

// Close ends every open stream (Generate with UNAVAILABLE, SubscribeKvEvents
// likewise) and refuses new work. It is idempotent.
func (e *Engine) Close() {
	e.closing.Do(func() {
		close(e.closed)
		e.closeRanks()
		if e.boot != nil {
			e.boot.close()
		}
		if e.hc != nil {
			e.hc.CloseIdleConnections()
		}
	})
}

// Stats returns a snapshot of the engine.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.counters
	st := Stats{
		Running:            e.running,
		Waiting:            len(e.queue),
		UsedTokens:         e.usedTokensLocked(),
		CachedPages:        e.cache.usedPages(),
		PinnedPages:        e.cache.pinnedPages(),
		CapacityTokens:     e.capacityTokens(),
		Requests:           c.requests,
		Completed:          c.completed,
		Aborted:            c.aborted,
		AbortCalls:         c.abortCalls,
		Cancelled:          c.cancelled,
		Failed:             c.failed,
		Rejected:           c.rejected,
		QueuedFull:         c.queuedFull,
		PromptTokens:       c.promptTokens,
		CachedPromptTokens: c.cachedPromptTokens,
		GeneratedTokens:    c.generatedTokens,
		QueueShrunk:        c.queueShrunk,
		QueueGrown:         c.queueGrown,
		Embeds:             c.embeds,
		EmbedTokens:        c.embedTokens,
		KVSubscribers:      len(e.events.subs),
		KVNextSequence:     e.events.next,
		RoomWaits:          c.roomWaits,
		RoomTimeouts:       c.roomTimeouts,
		TransferTokens:     c.transferTokens,
		Transferring:       e.transferringLocked(),
	}
	if e.ranks != nil {
		st.CapacityTokens = 0 // the front engine's own cache is never used
	}
	for _, r := range e.ranks {
		st.addRank(r.Stats())
	}
	if e.boot != nil {
		bs := e.boot.snapshot()
		st.RoomsPublished, st.RoomsFetched, st.RoomsExpired = bs.published, bs.fetched, bs.expired
		st.RoomsHeld = bs.held
	}
	return st
}

// CachedPages returns every page in the prefix cache as its full token path
// from the root (its ancestors' tokens, then its own), sorted, so that a
// test in any package can compare a copy of the cache rebuilt from KV events
// with the engine's own, page for page. The slices belong to the caller.
// The result grows with the number of pages times their depth: it is meant
// for tests' small caches, not for a production-sized one. A data-parallel
// engine's caches are its ranks' (Rank(i).CachedPages()); its own is empty.
func (e *Engine) CachedPages() [][]uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cache.paths()
}

func (e *Engine) transferringLocked() int {
	n := 0
	for _, r := range e.reqs {
		if r.state == stateTransfer {
			n++
		}
	}
	return n
}

func (e *Engine) capacityTokens() int { return e.cache.capacity * e.cfg.PageSize }

func (e *Engine) usedTokensLocked() int {
	used := e.cache.pinnedPages() * e.cfg.PageSize
	for _, r := range e.reqs {
		if r.state == stateRunning {
			used += len(r.prompt)%e.cfg.PageSize + r.generated
		}
	}
	return used
}

// flushCache drops the prefix cache when the engine is idle, as SGLang's
// flush_cache does; it refuses while requests are waiting or running.
func (e *Engine) flushCache() error {
	for _, r := range e.ranks {
		if err := r.flushCache(); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.reqs) > 0 {
		return fmt.Errorf("sim: cache not flushed: %d requests waiting or running", len(e.reqs))
	}
	e.cache.flush()
	e.publishLocked()
	return nil
}

// load is one scheduler's load, in the terms both protocols report.
type load struct {
	running, waiting, total  int
	usedTokens, maxTokens    int
	tokenUsage, cacheHitRate float64
	utilization, genTput     float64
	maxRunning               int
	waitingUncachedTokens    int
	transferring             int // decode legs waiting for their room or KV
}

func (e *Engine) load() load {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := load{
		running:      e.running,
		waiting:      len(e.queue),
		total:        e.running + len(e.queue),
		usedTokens:   e.usedTokensLocked(),
		maxTokens:    e.capacityTokens(),
		maxRunning:   e.cfg.MaxRunning,
		transferring: e.transferringLocked(),
	}
	l.tokenUsage = float64(l.usedTokens) / float64(l.maxTokens)
	l.utilization = float64(l.running) / float64(l.maxRunning)
	if p := e.counters.promptTokens; p > 0 {
		l.cacheHitRate = float64(e.counters.cachedPromptTokens) / float64(p)
	}
	if now := time.Now(); now.Sub(e.tput.since) >= time.Second {
		e.tput.rate = float64(e.counters.generatedTokens-e.tput.tokens) / now.Sub(e.tput.since).Seconds()
		e.tput.since, e.tput.tokens = now, e.counters.generatedTokens
	}
	l.genTput = e.tput.rate
	for _, r := range e.queue {
		l.waitingUncachedTokens += len(r.prompt) - e.reused(r, e.cache.match(r.prompt))
	}
	return l
}

// bosTokenID is the begin-of-sequence id reported by GetModelInfo: the id
// just below EOS, as in Llama-3 (128000, 128001).
func (e *Engine) bosTokenID() int32 {
	if e.cfg.EOSTokenID == 0 {
		return 0
	}
	return int32(e.cfg.EOSTokenID - 1)
}

func (e *Engine) activeRequests() int {
	n := 0
	for _, r := range e.ranks {
		n += r.activeRequests()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return n + len(e.reqs)
}

// newSampler builds a request's sampler from protocol-neutral parameters.
func (e *Engine) newSampler(prompt []uint32, reqSeed uint64, greedy bool, minNew int, ignoreEOS bool, stopIDs []uint32) sampler {
	script := e.scripts.answer(prompt)
	cycle := false
	if script == nil && e.cfg.Reply == ReplyEcho {
		script, cycle = e.echoAnswer(prompt), true
	}
	return sampler{
		script:    script,
		cycle:     cycle,
		seed:      samplingSeed(e.cfg.Seed, reqSeed, greedy, prompt),
		vocab:     uint64(e.cfg.VocabSize),
		eos:       e.cfg.EOSTokenID,
		minNew:    minNew,
		ignoreEOS: ignoreEOS,
		stopIDs:   stopIDs,
	}
}

// getTokenizer serves the tokenizer archive, for either protocol.
func (e *Engine) getTokenizer(stream grpc.ServerStreamingServer[smgcommon.GetTokenizerChunk]) error {
	if e.tok == nil {
		return status.Error(codes.Unimplemented, "this simulated engine serves no tokenizer (TokenizerDir \"none\")")
	}
	return e.tok.serve(stream)
}
