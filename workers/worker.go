package workers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Protocol is the gRPC protocol an engine speaks.
type Protocol int

const (
	ProtocolUnknown Protocol = iota
	ProtocolSGLang
	ProtocolVLLM
	// ProtocolTRTLLM is TensorRT-LLM's trtllm.TrtllmService.
	ProtocolTRTLLM
)

func (p Protocol) String() string {
	switch p {
	case ProtocolSGLang:
		return "sglang"
	case ProtocolVLLM:
		return "vllm"
	case ProtocolTRTLLM:
		return "trtllm"
	}
	return "unknown"
}

// ParseProtocol reads a protocol name as given on the command line. The empty
// string and "auto" mean "detect by asking the engine".
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return ProtocolUnknown, nil
	case "sglang":
		return ProtocolSGLang, nil
	case "vllm":
		return ProtocolVLLM, nil
	case "trtllm":
		return ProtocolTRTLLM, nil
	}
	return ProtocolUnknown, fmt.Errorf("unknown worker protocol %q (want sglang, vllm, trtllm or auto)", s)
}

// Role is the part a worker plays in serving.
type Role int

const (
	RoleRegular Role = iota
	RolePrefill
	RoleDecode
)

func (r Role) String() string {
	switch r {
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "regular"
}

// Address is a parsed worker address.
type Address struct {
	// URL is the canonical form: grpc://host:port (plaintext) or
	// grpcs://host:port (TLS). It identifies the worker in the registry.
	URL string
	// Target is what gRPC dials: host:port.
	Target string
	// TLS reports that the engine is reached over TLS (grpcs://).
	TLS bool
}

// ParseWorkerAddress reads a worker address: grpc://host:port or a bare
// host:port (plaintext), or grpcs://host:port (TLS). http:// is read as
// grpc:// and https:// as grpcs://, so that SMG's documented examples, written for
// HTTP workers, run unchanged. A missing host means 127.0.0.1.
func ParseWorkerAddress(s string) (Address, error) {
	s = strings.TrimSpace(s)
	scheme, rest, found := strings.Cut(s, "://")
	if !found {
		scheme, rest = "grpc", s
	}
	var secure bool
	switch strings.ToLower(scheme) {
	case "grpc", "http":
	case "grpcs", "https":
		secure = true
	default:
		return Address{}, fmt.Errorf("worker address %q: want grpc://, grpcs:// (TLS) or host:port", s)
	}
	rest = strings.TrimSuffix(rest, "/")
	host, port, err := net.SplitHostPort(rest)
	if err != nil || port == "" {
		return Address{}, fmt.Errorf("worker address %q: want grpc://host:port, grpcs://host:port or host:port", s)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	a := Address{Target: net.JoinHostPort(host, port), TLS: secure}
	a.URL = "grpc://" + a.Target
	if secure {
		a.URL = "grpcs://" + a.Target
	}
	return a, nil
}

// ParseAddress is ParseWorkerAddress for callers that need only the
// canonical URL and the dial target; the URL's scheme says whether the
// worker wants TLS.
func ParseAddress(s string) (url, target string, err error) {
	a, err := ParseWorkerAddress(s)
	if err != nil {
		return "", "", err
	}
	return a.URL, a.Target, nil
}

// Worker is one engine as the router sees it. Its identity (URL, protocol,
// role, model) is fixed when it is registered; health and load change and are
// safe to read from any goroutine.
type Worker struct {
	url      string
	protocol Protocol
	role     Role
	// info is what the engine reported when it was connected; only its
	// limits change later (refreshLimits), when an engine coming back
	// healthy reports others.
	info    atomic.Pointer[ModelInfo]
	backend Backend
	closer  func() error

	breaker   *Breaker
	connected bool // false for Join's placeholder
	// reconnects counts the connection's returns to READY (shared by the
	// ranks of one engine); nil without a connection of the worker's own.
	reconnects *reconnects
	// caps are the optional RPCs the engine showed it lacks.
	caps capabilities

	// A data-parallel rank target (see dprank.go): the engine's URL, the
	// rank (-1 for a whole engine) and what the engine's ranks share (nil
	// for a whole engine).
	endpoint string
	rank     int
	group    *dpGroup

	healthy  atomic.Bool
	draining atomic.Bool
	inFlight atomic.Int64
	// acquired counts every Acquire ever made, so that a load poll can
	// tell how many of our requests started while it was on the wire.
	acquired atomic.Int64
	// released counts every release, and queue what the engine last
	// reported waiting with released then (see EngineQueued).
	released atomic.Int64
	queue    polledQueue
	// prefill is the prompt tokens this router has sent the engine and
	// expects it to compute (not found in its cache) whose first token has
	// not come back yet: the engine's prefill queue, as far as we know it.
	prefill atomic.Int64

	// idleMu orders the 0 <-> 1 transitions of inFlight with idle, which
	// is closed whenever nothing is in flight, so that WaitIdle needs no
	// polling.
	idleMu sync.Mutex
	idle   chan struct{}
	// starts holds, under idleMu, when each request in flight acquired the
	// worker, oldest first, as offsets from born (see InFlightAge).
	starts []time.Duration
	born   time.Time

	mu sync.Mutex
	// engineLoad is the last poll's answer (nil before the first), read
	// without the lock: the wait and cost modes read every candidate's on
	// every request, and the mutex round trips were about an eighth of a
	// CPU profile of selections among 1,000 workers. A poll stores a new
	// one.
	engineLoad atomic.Pointer[Load]
	// external is how many of the requests the engine reported at the last
	// poll were not ours (its count less our in-flight count then), at
	// least 0: other clients' requests. It is kept apart from engineLoad
	// because policies read Load for every worker on every request, and
	// one atomic read per worker costs a fraction of a mutex round trip
	// (at 4,000 workers the mutexes were a fifth of a selection).
	external atomic.Int64

	// learned is the engine's speed as this router's requests measure it.
	learned learned
}

// NewWorker assembles a worker from an already connected backend. It starts
// healthy, with a breaker of DefaultBreakerConfig (see Breaker().Reconfigure).
// closer, when not nil, is called by Close (it closes the connection).
func NewWorker(url string, protocol Protocol, role Role, info ModelInfo, b Backend, closer func() error) *Worker {
	br, err := NewBreaker(url, DefaultBreakerConfig())
	if err != nil {
		panic(err) // the defaults validate
	}
	w := &Worker{url: url, protocol: protocol, role: role, backend: b, closer: closer,
		breaker: br, connected: true, endpoint: url, rank: -1, idle: make(chan struct{}), born: time.Now()}
	info = info.sane()
	w.info.Store(&info)
	close(w.idle)
	w.healthy.Store(true)
	return w
}

func (w *Worker) URL() string        { return w.url }
func (w *Worker) Protocol() Protocol { return w.protocol }
func (w *Worker) Role() Role         { return w.role }
func (w *Worker) Info() ModelInfo    { return *w.info.Load() }
func (w *Worker) Backend() Backend   { return w.backend }
func (w *Worker) Healthy() bool      { return w.healthy.Load() }
func (w *Worker) SetHealthy(h bool)  { w.healthy.Store(h) }
func (w *Worker) InFlight() int      { return int(w.inFlight.Load()) }
func (w *Worker) String() string     { return w.url }

// PromptLimits are the figures of Info a prompt is checked against:
// requests read them for every worker, and copying the whole information
// each time doubled what that costs (BenchmarkFit in pipeline, BENCHMARKS.md).
func (w *Worker) PromptLimits() (vocab, maxContext, maxInput int, truncates bool) {
	i := w.info.Load()
	return i.VocabSize, i.MaxContextLength, i.MaxInputTokens, i.TruncatesPrompts
}

// Breaker is the worker's circuit breaker.
func (w *Worker) Breaker() *Breaker { return w.breaker }

// Connected is false for the placeholder Join registers while the engine is
// unreachable; its Backend answers UNAVAILABLE to everything.
func (w *Worker) Connected() bool { return w.connected }

// SetDraining marks the worker as leaving (or, with false, staying after
// all): a draining worker gets no new requests but finishes those it has.
func (w *Worker) SetDraining(d bool) { w.draining.Store(d) }

// Draining reports whether the worker is draining.
func (w *Worker) Draining() bool { return w.draining.Load() }

// Available reports whether a policy may pick the worker for a new request:
// healthy, not draining, and its breaker allows it.
func (w *Worker) Available() bool {
	return w.Healthy() && !w.Draining() && w.breaker.Allow()
}

// Acquire counts one request in flight on the worker until release is called.
// release is idempotent.
func (w *Worker) Acquire() (release func()) {
	w.idleMu.Lock()
	start := time.Now()
	at := start.Sub(w.born)
	w.starts = append(w.starts, at)
	w.acquired.Add(1)
	if w.inFlight.Add(1) == 1 {
		w.idle = make(chan struct{})
	}
	w.idleMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.learned.observeRun(time.Since(start))
			w.idleMu.Lock()
			// Requests mostly end in the order they started: the
			// search is short.
			if i := slices.Index(w.starts, at); i >= 0 {
				w.starts = slices.Delete(w.starts, i, i+1)
			}
			w.released.Add(1)
			if w.inFlight.Add(-1) == 0 {
				close(w.idle)
			}
			w.idleMu.Unlock()
		})
	}
}

// InFlightAge is how long, at now, the k-th oldest (from 1) of this
// router's requests in flight on the worker has held it, or the youngest
// when fewer than k are in flight; rank says which (0: none is). On a full
// engine whose requests take about the same time, the k-th oldest is the
// k-th to free a running slot: an expected-wait policy reads from it when a
// slot frees, where a count alone says only how many are ahead.
func (w *Worker) InFlightAge(now time.Time, k int) (age time.Duration, rank int) {
	w.idleMu.Lock()
	defer w.idleMu.Unlock()
	rank = min(k, len(w.starts))
	if rank <= 0 {
		return 0, 0
	}
	return max(now.Sub(w.born)-w.starts[rank-1], 0), rank
}

// Prefilling counts n prompt tokens the worker has yet to prefill for a
// request sent to it, until the returned Prefill ends: Prefilled at the
// request's first token (a prefill leg's end, with disaggregation), End when
// the request ends without one. A cost-aware policy reads the sum
// (PendingPrefill) as the work queued ahead of a new request; the engine's
// polled load says how many requests wait, not how long their prompts are.
func (w *Worker) Prefilling(n int) Prefill {
	if n <= 0 {
		return Prefill{}
	}
	// A prefill that finds the queue empty and a running slot free times
	// the engine's prefill rate (see learned).
	limit := w.info.Load().MaxRunningRequests
	clean := w.prefill.Add(int64(n)) == int64(n) && (limit <= 0 || w.Load() <= limit)
	return Prefill{w: w, n: n, start: time.Now(), clean: clean, ended: new(atomic.Bool)}
}

// Prefill is one request's prompt counted as queued prefill on a worker
// (Worker.Prefilling). Its first end, Prefilled or End, takes the tokens
// off the count; the later ones do nothing, so the request path may end it
// at the first token and again at the request's end. The zero Prefill
// counts nothing.
type Prefill struct {
	w     *Worker
	n     int
	start time.Time
	clean bool
	ended *atomic.Bool
}

// Prefilled ends the count at the request's first token. A prefill that
// found nothing queued ahead teaches the engine's prefill rate.
func (p Prefill) Prefilled() { p.end(true) }

// End ends the count of a request that produced no first token (it failed,
// or its client left): its time says nothing of the engine's rate, and
// teaching it made a fast failure read as a fast engine.
func (p Prefill) End() { p.end(false) }

func (p Prefill) end(prefilled bool) {
	if p.w == nil || !p.ended.CompareAndSwap(false, true) {
		return
	}
	p.w.prefill.Add(-int64(p.n))
	if prefilled && p.clean {
		p.w.learned.observePrefill(p.n, time.Since(p.start))
	}
}

// Decoding starts timing a request's decode at its first token; the
// Decode's Done, at its end, with how many tokens it produced after the
// first, teaches the engine's decode step against its batch (Step). The
// batch is the requests running there, this one included, averaged over
// the first token and the end: Load, at most the engine's running limit
// (the rest wait and do not decode). A value, so the request path keeps
// it without an allocation.
func (w *Worker) Decoding() Decode {
	return Decode{w: w, start: time.Now(), batch: w.running()}
}

// Decode is one request's decode being timed (Worker.Decoding); the zero
// Decode times nothing.
type Decode struct {
	w     *Worker
	start time.Time
	batch int
}

// Started reports whether d times a decode.
func (d Decode) Started() bool { return d.w != nil }

// Done ends d with the tokens the request produced after its first.
func (d Decode) Done(tokens int) {
	if d.w == nil {
		return
	}
	d.w.learned.observeDecode(tokens, time.Since(d.start), float64(d.batch+d.w.running())/2)
}

// running is Load, at most the engine's running limit when it reports one.
func (w *Worker) running() int {
	if l := w.info.Load().MaxRunningRequests; l > 0 {
		return min(w.Load(), l)
	}
	return w.Load()
}

// PendingPrefill is the prompt tokens counted by Prefilling and not yet done.
func (w *Worker) PendingPrefill() int { return int(w.prefill.Load()) }

// Idle returns a channel that is closed once no request is in flight on the
// worker (at once if none is now). A request acquired later does not reopen
// it; call Idle again for the next idle moment.
func (w *Worker) Idle() <-chan struct{} {
	w.idleMu.Lock()
	defer w.idleMu.Unlock()
	return w.idle
}

// WaitIdle returns nil once no request is in flight on the worker, or ctx's
// error if ctx ends first. Draining a worker is SetDraining(true), WaitIdle,
// then Close.
func (w *Worker) WaitIdle(ctx context.Context) error {
	select {
	case <-w.Idle():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker %s: waiting for %d requests in flight: %w", w.url, w.InFlight(), ctx.Err())
	}
}

// SetEngineLoad records the engine's own load figures as if polled just now:
// BeginLoadPoll followed at once by Record.
func (w *Worker) SetEngineLoad(l Load) { w.BeginLoadPoll().Record(l) }

// LoadPoll is one poll of the engine's load, begun before the request leaves
// for the engine. It remembers our own requests at that moment so that Record
// can tell the engine's count of them from other clients' requests: any
// request of ours in flight when the poll began, or started while it was on
// the wire, may be in the engine's figures, even if it has ended by the time
// the answer arrives. Counting only those in flight at the answer took a
// request that had just finished for another client's, and made an idle
// worker look busy until the next poll.
type LoadPoll struct {
	w                  *Worker
	inFlight, acquired int64
	released           int64
}

// BeginLoadPoll marks the start of a load poll; call Record with its answer.
func (w *Worker) BeginLoadPoll() LoadPoll {
	return LoadPoll{w: w, acquired: w.acquired.Load(), inFlight: w.inFlight.Load(), released: w.released.Load()}
}

// Record stores the engine's answer to the poll. The requests not ours are
// the engine's running and waiting less every request of ours it could have
// counted, at least 0: it may count a few of another client's as ours, never
// one of ours as another's.
func (p LoadPoll) Record(l Load) {
	w := p.w
	ours := p.inFlight + (w.acquired.Load() - p.acquired)
	l = l.sane()
	w.mu.Lock()
	w.engineLoad.Store(&l)
	w.external.Store(max(int64(l.Running+l.Waiting)-ours, 0))
	w.queue.record(l.Waiting, p.released)
	w.mu.Unlock()
}

// EngineLoad is the engine's load as last polled.
func (w *Worker) EngineLoad() Load {
	if l := w.engineLoad.Load(); l != nil {
		return *l
	}
	return Load{}
}

// Load is the number policies compare: requests this router has in flight on
// the worker, plus the requests the engine reported (running and waiting) that
// were not ours at the time of the poll, such as another router's. Counting our
// own live figure first keeps the number exact between polls; adding the
// engine's surplus keeps a worker shared with other clients from looking idle.
func (w *Worker) Load() int {
	return w.InFlight() + int(w.external.Load())
}

// Close releases the worker's connection.
func (w *Worker) Close() error {
	if w.closer == nil {
		return nil
	}
	return w.closer()
}
