package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/answer"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/waitq"
)

// AdmissionConfig bounds the work kvgate accepts. Beyond the limits a
// request is refused at once with RESOURCE_EXHAUSTED naming the limit: a
// router that accepts everything only moves the queue into goroutines and
// memory, and every client's time to first token grows with it.
type AdmissionConfig struct {
	// MaxConcurrentRequests is how many Router requests (Generate, Chat,
	// Embed) may be bound to engines at once, from their placement to
	// their last chunk or their answer; -1: no limit.
	MaxConcurrentRequests int
	// QueueSize is how many more may wait in the router, for a place
	// under MaxConcurrentRequests or for an engine with room (late
	// binding); 0: none wait.
	QueueSize int
	// QueueTimeout is how long a request may wait in the router.
	QueueTimeout time.Duration
	// AvoidFullEngines places a request, once bound, only on engines
	// below their running-request limit; false lets the policy choose
	// among all, full ones included. Off by default: on the Mooncake
	// conversation trace with engines of 8 slots, avoiding full engines
	// cost most of cache_aware's hit rate (0.053 against 0.140) and
	// doubled TTFT p50, since a cached engine's queue is cheaper than a
	// cold prefill elsewhere.
	AvoidFullEngines bool
	// MatchWindow, when > 0, binds requests that waited in the router by
	// matching: a free engine place goes to the request, among the first
	// MatchWindow waiting of the head's class, that loses least of its
	// cached prefix by running on an engine with room, and it is placed only
	// on such an engine (see pipeline/bindmatch.go); 0: the head is bound,
	// and the policy chooses among all engines.
	MatchWindow int
	// MaxPasses bounds how many times matching passes one waiting request
	// over for one behind it.
	MaxPasses int
	// EngineQueueFull also counts as full, for late binding, an engine
	// whose last load poll reported requests in its own queue (see
	// waitq.Saturation.EngineQueue).
	EngineQueueFull bool
	// RequestReadTimeout is how long a streaming call may take to send its
	// request message after it started; 0: no limit. A call holds no
	// admission place until its request has arrived, so a client that opens
	// calls and sends nothing costs the others no places, and this bounds
	// how long it holds a goroutine and a stream instead.
	RequestReadTimeout time.Duration
	// StreamSendTimeout is how long one message of a Generate or Chat
	// stream may wait for the client to take it (its flow-control window
	// to open); past it the call ends with DEADLINE_EXCEEDED, which aborts
	// the engine's request and frees its admission place. 0: no limit.
	// It bounds each message, not the answer: a client that keeps reading
	// is cut only if one message takes it longer than this to read (see
	// sendBound).
	StreamSendTimeout time.Duration
	// RateLimitPerKey, when > 0, allows each client key (the routing key,
	// else the authorization metadata, else the peer address) this many
	// requests per second, with bursts of as many.
	RateLimitPerKey float64
	// RateLimitKeys bounds how many keys the rate limiter remembers; the
	// least recently seen are forgotten first.
	RateLimitKeys int
	// MaxChatMessages and MaxTools bound a Chat request's conversation.
	MaxChatMessages int
	MaxTools        int
	// MaxEmbedInputs bounds an Embed request's batch, and MaxEmbedTokens
	// its inputs' tokens together.
	MaxEmbedInputs int
	MaxEmbedTokens int
	// MaxLogprobBytes bounds the log-probability bytes that the engines'
	// answers to requests in flight may carry together (see answer.Budget);
	// -1: no limit.
	MaxLogprobBytes int64
}

// Late binding's matching (see AdmissionConfig.MatchWindow) is off by
// default. It won under overload on both Mooncake traces (TTFT p50 3-7%
// lower at --speed 6, 29-34% in two of three pairs at 4), but on 4
// engines of 8 slots under 128 conversations it raised TTFT p90 and p99
// 13-19% over round_robin's with any bound on passes tried (2, 4, 16), where
// binding the head keeps them level (BENCHMARKS.md, "Late binding by
// matching"). MatchedWindow is the window those runs used, about 2.5 s of
// arrivals on the overloaded conversation trace; 16 passes bound a waiting
// request's extra wait to 16 other bindings.
const (
	DefaultMatchWindow = 0
	MatchedWindow      = 32
	DefaultMaxPasses   = 16
)

// DefaultAdmissionConfig admits 1,024 concurrent generations with 1,024
// more waiting up to 30 s, each of whose request must arrive within 10 s of
// its call (a request of 8 MiB, the default limit, takes under a second on
// a 100 Mbit/s link): far beyond what a fleet of a few engines serves
// well (an engine runs a few hundred requests at once), and low enough that
// a flood is refused before it costs the router its memory. No per-key
// rate limit. An Embed batch holds up to 128 inputs (so that 128 vectors of
// an 8B embedding model, 4,096 floats each, stay within 2 MiB, half of a
// gRPC client's default receive limit) of 262,144 tokens together (a
// batch of 2,048-token document chunks).
func DefaultAdmissionConfig() AdmissionConfig {
	return AdmissionConfig{
		MaxConcurrentRequests: 1024,
		QueueSize:             1024,
		QueueTimeout:          30 * time.Second,
		MatchWindow:           DefaultMatchWindow,
		MaxPasses:             DefaultMaxPasses,
		RequestReadTimeout:    10 * time.Second,
		StreamSendTimeout:     DefaultStreamSendTimeout,
		RateLimitKeys:         100_000,
		MaxChatMessages:       10_000,
		MaxTools:              1_024,
		MaxEmbedInputs:        128,
		MaxEmbedTokens:        262_144,
		MaxLogprobBytes:       answer.DefaultMaxLogprobBytes,
	}
}

// Validate reports the first setting out of range, by its flag name.
func (c AdmissionConfig) Validate() error {
	switch {
	case c.MaxConcurrentRequests == 0 || c.MaxConcurrentRequests < -1:
		return fmt.Errorf("--max-concurrent-requests is %d; it must be >= 1, or -1 for no limit", c.MaxConcurrentRequests)
	case c.QueueSize < 0:
		return fmt.Errorf("--queue-size is %d; it must be >= 0", c.QueueSize)
	case c.QueueTimeout < 0:
		return fmt.Errorf("--queue-timeout-secs is %v; it must be >= 0", c.QueueTimeout)
	case c.RequestReadTimeout < 0:
		return fmt.Errorf("--request-read-timeout is %v; it must be >= 0 (0: no limit)", c.RequestReadTimeout)
	case c.StreamSendTimeout < 0:
		return fmt.Errorf("--stream-send-timeout is %v; it must be >= 0 (0: no limit)", c.StreamSendTimeout)
	case !(c.RateLimitPerKey >= 0):
		return fmt.Errorf("--rate-limit-per-key is %v; it must be >= 0 (0: no limit)", c.RateLimitPerKey)
	case c.RateLimitPerKey > 0 && c.RateLimitKeys < 1:
		return fmt.Errorf("rate limit keys is %d; it must be >= 1", c.RateLimitKeys)
	case c.MaxChatMessages < 1:
		return fmt.Errorf("max chat messages is %d; it must be >= 1", c.MaxChatMessages)
	case c.MaxTools < 0:
		return fmt.Errorf("max tools is %d; it must be >= 0", c.MaxTools)
	case c.MaxEmbedInputs < 1:
		return fmt.Errorf("max embed inputs is %d; it must be >= 1", c.MaxEmbedInputs)
	case c.MaxEmbedTokens < 1:
		return fmt.Errorf("max embed tokens is %d; it must be >= 1", c.MaxEmbedTokens)
	case c.MaxLogprobBytes == 0 || c.MaxLogprobBytes < -1:
		return fmt.Errorf("--max-logprob-bytes is %d; it must be >= 1, or -1 for no limit", c.MaxLogprobBytes)
	}
	return nil
}

// admission bounds what the router holds. The concurrency limit and its
// wait queue are the pipeline's late binding (pipeline.Binding, built by
// binding): a request takes its
// place under --max-concurrent-requests when it is bound to an engine, and
// waits for it in the router's one queue, where it also waits for an
// engine with room. Here, at the transport, only the sum is bounded: a
// request beyond --max-concurrent-requests + --queue-size held at once is
// refused before it is tokenized, so the router's memory stays bounded
// whatever the engines do.
type admission struct {
	cfg AdmissionConfig
	// held counts the Router requests admitted and not yet ended, waiting
	// or bound; bound is its limit (-1: none).
	held  atomic.Int64
	bound int64
	// awaiting counts streaming calls opened whose request has not arrived.
	awaiting atomic.Int64
	limiter  *rateLimiter // nil: no rate limit
	logprobs *answer.Budget
	m        *Metrics
}

func newAdmission(cfg AdmissionConfig, m *Metrics) *admission {
	a := &admission{cfg: cfg, m: m, logprobs: answer.NewBudget(cfg.MaxLogprobBytes, func() { m.admissionRejected.WithLabelValues("logprob_bytes").Inc() }),
		bound: -1}
	if cfg.MaxConcurrentRequests > 0 {
		a.bound = int64(cfg.MaxConcurrentRequests) + int64(cfg.QueueSize)
	}
	if cfg.RateLimitPerKey > 0 {
		a.limiter = newRateLimiter(cfg.RateLimitPerKey, cfg.RateLimitKeys, time.Now)
	}
	return a
}

// binding is the late binding the pipeline applies under these limits: it
// counts its refusals in admission's series and puts each wait on the
// call's log line.
func (a *admission) binding() pipeline.Binding {
	return pipeline.Binding{
		MaxBound:     a.cfg.MaxConcurrentRequests,
		QueueSize:    a.cfg.QueueSize,
		QueueTimeout: a.cfg.QueueTimeout,
		AvoidFull:    a.cfg.AvoidFullEngines,
		MatchWindow:  a.cfg.MatchWindow,
		MaxPasses:    a.cfg.MaxPasses,
		Saturation:   waitq.Saturation{EngineQueue: a.cfg.EngineQueueFull},
		Rejected: func(reason string) {
			if a.m != nil {
				a.m.admissionRejected.WithLabelValues(reason).Inc()
			}
		},
		Waited: func(ctx context.Context, reason string, d time.Duration) { labelOf(ctx).waited(reason, d) },
	}
}

// awaitingGauge exports how many calls wait for their request message.
func (a *admission) awaitingGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvgate_requests_awaiting_message",
		Help: "Generate and Chat calls opened whose request message has not arrived (they hold no admission place; --request-read-timeout ends them).",
	}, func() float64 { return float64(a.awaiting.Load()) })
}

// acquire counts one more request held by the router, or refuses it at once
// when the router holds as many as it may run and queue; release ends it.
func (a *admission) acquire() (release func(), err error) {
	if a.held.Add(1) > a.bound && a.bound >= 0 {
		a.held.Add(-1)
		a.m.admissionRejected.WithLabelValues("queue_full").Inc()
		return nil, fault.Newf(fault.Busy,
			"kvgate holds %d requests, its limit of %d running (--max-concurrent-requests) and %d waiting (--queue-size); retry later",
			a.bound, a.cfg.MaxConcurrentRequests, a.cfg.QueueSize)
	}
	return func() { a.held.Add(-1) }, nil
}

// admitted reports whether a method is a generation that admission governs.
func admitted(method string) bool {
	return strings.HasPrefix(method, "/kvgate.v1.Router/")
}

// admissionStream applies the rate limit and the concurrency limit to the
// Router's streaming RPCs once their request has arrived, not when the call
// opens: a place held for a call that has sent nothing would let a client
// that opens calls and never writes keep everyone else waiting. The request
// must arrive within RequestReadTimeout. A refusal is logged once, by the
// logging interceptor's line for the call.
func (s *Server) admissionStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !admitted(info.FullMethod) {
		return handler(srv, ss)
	}
	as := &admittedStream{ServerStream: ss, s: s}
	as.send.d = s.admission.cfg.StreamSendTimeout
	defer as.done()
	err := handler(srv, as)
	var late readTimeout
	switch {
	case err != nil && as.send.expired:
		// The stream's end cancelled the call, and the pipeline answered
		// with the context's error; the call's log line and metrics are
		// owed the reason.
		s.metrics.clientTimeouts.WithLabelValues("stream_send").Inc()
		return sendTimeout(as.send.d)
	case errors.As(err, &late):
		s.metrics.clientTimeouts.WithLabelValues("request_read").Inc()
	}
	return err
}

// admittedStream is a Router call's stream whose first RecvMsg, the
// request, is read within the read timeout and then takes the call's
// admission place.
type admittedStream struct {
	grpc.ServerStream
	s       *Server
	read    bool   // the first message was asked for
	release func() // gives the place back; nil: no place held
	send    sendBound
}

func (as *admittedStream) RecvMsg(m any) error {
	if as.read {
		return as.ServerStream.RecvMsg(m)
	}
	as.read = true
	as.s.admission.awaiting.Add(1)
	err := readWithin(as.ServerStream, m, as.s.admission.cfg.RequestReadTimeout)
	as.s.admission.awaiting.Add(-1)
	if err != nil {
		return err
	}
	release, err := as.s.admit(as.Context())
	if err != nil {
		return err
	}
	as.release = release
	return nil
}

// SendMsg sends one message of the answer within the stream send timeout.
func (as *admittedStream) SendMsg(m any) error { return as.send.within(as.ServerStream, m) }

// done gives back the place the call held, if it got one.
func (as *admittedStream) done() {
	as.send.stop()
	if as.release != nil {
		as.release()
	}
}

// admissionUnary is admissionStream for the Router's unary RPCs (Embed).
// grpc-go reads and decodes a unary request before any interceptor runs,
// so here too the place is taken only once the request has arrived.
func (s *Server) admissionUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !admitted(info.FullMethod) {
		return handler(ctx, req)
	}
	release, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return handler(ctx, req)
}

// admit applies the rate limit, then takes a place under the concurrency
// limit, which release gives back.
func (s *Server) admit(ctx context.Context) (release func(), err error) {
	if l := s.admission.limiter; l != nil {
		if !l.allow(clientKey(ctx)) {
			s.metrics.admissionRejected.WithLabelValues("rate_limit").Inc()
			return nil, fault.Newf(fault.Busy,
				"this client key is over its rate limit of %g requests per second (--rate-limit-per-key); retry later", l.rate)
		}
	}
	return s.admission.acquire()
}

// Waiting is how many requests wait in the router for an engine with room
// or a place under --max-concurrent-requests: the load poller polls more
// often while any do.
func (s *Server) Waiting() int { return s.pipe.Waiting() }

// LoadsRefreshed tells the requests waiting in the router that the engines'
// loads were polled: an engine may have room that the router's own
// accounting did not show (another client's requests ended).
func (s *Server) LoadsRefreshed() { s.pipe.LoadsRefreshed() }

// HealthChanged wakes the requests waiting in the router: a worker that
// turned healthy may have room.
func (s *Server) HealthChanged() { s.pipe.HealthChanged() }

// WaitStarted receives when requests start waiting in the router: the load
// poller's Wake.
func (s *Server) WaitStarted() <-chan struct{} { return s.pipe.WaitStarted() }
