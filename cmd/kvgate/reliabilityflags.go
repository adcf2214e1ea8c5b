package main

import (
	"flag"
	"time"

	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers"
)

// reliabilityFlags are how the router treats failing workers: SMG's retry
// flags (milliseconds, as SMG spells them) and kvgate's timeouts.
type reliabilityFlags struct {
	cbFailures        int
	cbSuccesses       int
	cbTimeoutSecs     float64
	maxRetries        int
	initialBackoffMs  int
	maxBackoffMs      int
	multiplier        float64
	jitter            float64
	budgetPercent     float64
	budgetPerWorker   int
	firstTokenTimeout time.Duration
	streamIdleTimeout time.Duration
	abortConfirm      time.Duration
}

func (r *reliabilityFlags) register(fs *flag.FlagSet) {
	cb := workers.DefaultBreakerConfig()
	fs.IntVar(&r.cbFailures, "cb-failure-threshold", cb.FailureThreshold, "consecutive failed requests that open a worker's circuit breaker: it gets no requests until the breaker's timeout (0: no circuit breaker)")
	fs.IntVar(&r.cbSuccesses, "cb-success-threshold", cb.SuccessThreshold, "consecutive successful probe requests that close a half-open breaker (probes go one at a time)")
	fs.Float64Var(&r.cbTimeoutSecs, "cb-timeout-duration-secs", cb.Timeout.Seconds(), "how long an open breaker refuses requests before it lets a probe through")
	d := server.DefaultReliability()
	fs.IntVar(&r.maxRetries, "retry-max-retries", d.Retry.MaxRetries, "retries on another worker for a request whose worker failed before the first token (0: no retries)")
	fs.IntVar(&r.initialBackoffMs, "retry-initial-backoff-ms", int(d.Retry.InitialBackoff/time.Millisecond), "wait before the first retry, in milliseconds")
	fs.IntVar(&r.maxBackoffMs, "retry-max-backoff-ms", int(d.Retry.MaxBackoff/time.Millisecond), "longest wait between retries, in milliseconds")
	fs.Float64Var(&r.multiplier, "retry-backoff-multiplier", d.Retry.Multiplier, "each wait is this many times the previous one (>= 1)")
	fs.Float64Var(&r.jitter, "retry-jitter-factor", d.Retry.Jitter, "spread of each wait, as a fraction (0-1) either side")
	fs.Float64Var(&r.budgetPercent, "retry-budget-percent", d.Retry.BudgetPercent, "the retry budget's floor: retries in flight may always be this percentage of the requests in flight (and at least 3), whatever the workers' state")
	fs.IntVar(&r.budgetPerWorker, "retry-budget-per-worker", d.Retry.RetriesPerWorker, "each worker able to serve (healthy, breaker not open) adds to the retry budget its share of the requests in flight, and at least this many retries")
	fs.DurationVar(&r.firstTokenTimeout, "first-token-timeout", d.FirstTokenTimeout, "an attempt whose worker sends no token this long after it started fails and is retried elsewhere (0: no limit)")
	fs.DurationVar(&r.abortConfirm, "abort-confirm-timeout", d.AbortConfirmTimeout, "a request the router aborted stays counted in flight on its worker until the engine ends its stream, at most this long (engines may ignore Abort; 0: released at once)")
	fs.DurationVar(&r.streamIdleTimeout, "stream-idle-timeout", d.StreamIdleTimeout, "after the first token, a worker that sends nothing for this long fails the request with UNAVAILABLE; only the wait on the worker counts, not time spent handing tokens to a client slow to read them (0: no limit)")
}

func (r *reliabilityFlags) breaker() workers.BreakerConfig {
	c := workers.DefaultBreakerConfig()
	c.FailureThreshold = r.cbFailures
	c.SuccessThreshold = r.cbSuccesses
	c.Timeout = time.Duration(r.cbTimeoutSecs * float64(time.Second))
	return c
}

func (r *reliabilityFlags) config() server.Reliability {
	c := server.DefaultReliability()
	c.Retry.MaxRetries = r.maxRetries
	c.Retry.InitialBackoff = time.Duration(r.initialBackoffMs) * time.Millisecond
	c.Retry.MaxBackoff = time.Duration(r.maxBackoffMs) * time.Millisecond
	c.Retry.Multiplier = r.multiplier
	c.Retry.Jitter = r.jitter
	c.Retry.BudgetPercent = r.budgetPercent
	c.Retry.RetriesPerWorker = r.budgetPerWorker
	c.FirstTokenTimeout = r.firstTokenTimeout
	c.StreamIdleTimeout = r.streamIdleTimeout
	c.AbortConfirmTimeout = r.abortConfirm
	return c
}

// admissionFlags bound what the router accepts.
type admissionFlags struct {
	maxConcurrent   int
	queueSize       int
	queueTimeoutSec float64
	readTimeout     time.Duration
	sendTimeout     time.Duration
	ratePerKey      float64
	maxRequestBytes int
	maxLogprobBytes int64
	avoidFull       bool
	engineQueue     bool
	matchWindow     int
	maxPasses       int
}

func (a *admissionFlags) register(fs *flag.FlagSet) {
	d := server.DefaultAdmissionConfig()
	fs.IntVar(&a.maxConcurrent, "max-concurrent-requests", d.MaxConcurrentRequests, "Router requests (Generate, Chat, Embed) bound to engines at once; beyond it they wait in the router's queue (-1: no limit)")
	fs.IntVar(&a.queueSize, "queue-size", d.QueueSize, "requests that may wait in the router, for a place under --max-concurrent-requests or for an engine with room; beyond it they are refused at once with RESOURCE_EXHAUSTED (0: none wait)")
	fs.Float64Var(&a.queueTimeoutSec, "queue-timeout-secs", d.QueueTimeout.Seconds(), "how long a request may wait in the router's queue before RESOURCE_EXHAUSTED")
	fs.DurationVar(&a.readTimeout, "request-read-timeout", d.RequestReadTimeout, "a Generate or Chat call must send its request this soon after it opens, else DEADLINE_EXCEEDED; no admission place is held before it arrives; on the HTTP front, a body must arrive this soon after its headers, else 408 (0: no limit)")
	fs.DurationVar(&a.sendTimeout, "stream-send-timeout", d.StreamSendTimeout, "each message of a streamed answer must be taken by the client within this long (a client that stops reading fills its flow-control window), else the call ends with DEADLINE_EXCEEDED, its engine request is aborted and its admission place freed; on the HTTP front, each write to the client is bounded alike; the bound is per message, not per answer: a client that keeps reading is cut only if one message takes it longer than this to read (0: no limit)")
	fs.Float64Var(&a.ratePerKey, "rate-limit-per-key", 0, "requests per second (and burst) each client may send, keyed by x-routing-key, else authorization, else address (0: no limit)")
	fs.BoolVar(&a.avoidFull, "late-binding-avoid-full", d.AvoidFullEngines, "a request bound after waiting for an engine with room is placed only on engines below their running-request limit, not on one the policy prefers that is full (false: the policy chooses among all, which keeps cache affinity)")
	fs.IntVar(&a.matchWindow, "late-binding-match-window", d.MatchWindow, "requests that waited in the router are bound by matching: a free engine place goes to the one, among this many first waiting of the head's priority class, that loses least of its cached prefix by running on an engine with room now, and it is placed only on an engine with room; requests cached on a full engine wait in the router for it (0, the default: the head is bound and the policy chooses among all engines; 32 is the window measured, which wins under overload on the Mooncake traces and loses TTFT p90/p99 to round_robin on engines of 8 slots under many conversations)")
	fs.IntVar(&a.maxPasses, "late-binding-max-passes", d.MaxPasses, "how many times matching (--late-binding-match-window) may pass a waiting request over for one behind it; after that nobody behind it is bound before it")
	fs.BoolVar(&a.engineQueue, "late-binding-engine-queue", d.EngineQueueFull, "late binding also counts as full an engine whose last GetLoads reported requests waiting in its own queue (less ours that ended since), whatever its running-request limit, and keeps requests in the router while every engine is full (false: only the running-request limit counts)")
	fs.Int64Var(&a.maxLogprobBytes, "max-logprob-bytes", d.MaxLogprobBytes, "log-probability bytes the engines' answers to requests in flight may carry together (prompt_logprobs and logprobs with max_new_tokens, weighted by positions × (top_logprobs+1)); a request beyond it gets RESOURCE_EXHAUSTED (-1: no limit)")
	fs.IntVar(&a.maxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes, "largest request message accepted, in bytes; larger ones get RESOURCE_EXHAUSTED")
}

func (a *admissionFlags) config() server.AdmissionConfig {
	c := server.DefaultAdmissionConfig()
	c.MaxConcurrentRequests = a.maxConcurrent
	c.QueueSize = a.queueSize
	c.QueueTimeout = time.Duration(a.queueTimeoutSec * float64(time.Second))
	c.RequestReadTimeout = a.readTimeout
	c.StreamSendTimeout = a.sendTimeout
	c.RateLimitPerKey = a.ratePerKey
	c.MaxLogprobBytes = a.maxLogprobBytes
	c.AvoidFullEngines = a.avoidFull
	c.EngineQueueFull = a.engineQueue
	c.MatchWindow, c.MaxPasses = a.matchWindow, a.maxPasses
	return c
}
