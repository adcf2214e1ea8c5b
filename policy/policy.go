// Package policy chooses the worker for each request. Every policy is a small
// type with one Select method over a snapshot of candidate workers. A policy
// sees each candidate as a workers.View (address, health, load, KV state),
// which cannot dial, close or mark its worker: policies choose, the server
// acts on the choice.
package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/kvgate/kvgate/workers"
)

// Request is what a policy may look at to place a request.
type Request struct {
	RequestID string
	// InputIDs is the prompt as token ids. A policy may keep the slice
	// beyond the call (cache_aware's speculations do, until they expire):
	// the caller never modifies it once it has been passed.
	InputIDs []uint32
	// RoutingKey is the client's x-routing-key (or x-smg-routing-key) metadata.
	RoutingKey string
	// TargetWorker is the client's x-target-worker (or x-smg-target-worker)
	// metadata, unparsed: consistent_hashing reads it as a 0-based worker index.
	TargetWorker string
	// ImplicitKey is the first of the authorization, x-forwarded-for and cookie
	// metadata present: a session key for clients that send no routing key.
	ImplicitKey string
	// DryRun asks for the decision without its effects: no tree insertion, no
	// round-robin step, no sticky assignment. Admin.Explain sets it.
	DryRun bool
	// Exclude lists worker URLs this request must not go to: the workers an
	// earlier attempt of it failed on, when the server retries. Every policy
	// treats them as unavailable for this request only, as it treats an
	// unhealthy worker; rings, bands and x-target-worker indices are
	// unchanged. When every healthy candidate is excluded, Select returns
	// ErrNoHealthyWorker.
	Exclude []string
	// Acquires promises that the caller calls the Decision's Acquired once
	// the chosen worker's load counts the request (Worker.Acquire) and its
	// prefill counts the prompt less PredictedCachedTokens
	// (Worker.Prefilling), or once it knows it never will (the attempt was
	// abandoned). Until then cache_aware counts the decision in its
	// worker's load, and its prompt in the cost and wait modes' queue,
	// itself, so a selection in between sees it (see pendingPick). A
	// caller that does not promise it gets no such count.
	Acquires bool
	// ComputesPrompt says the engine will compute the whole prompt, cached
	// or not: the request asks for the prompt's log-probabilities, which
	// vLLM computes only from a prompt it does not read from its prefix
	// cache (SamplingParams.skip_reading_prefix_cache defaults to true
	// with prompt_logprobs) and SGLang only from positions past its match
	// (its match stops at logprob_start_len, 0 here). A cache-aware
	// policy then predicts nothing cached and charges the whole prompt's
	// prefill, and its wait and cost modes estimate the request as if no
	// worker held its prefix. The threshold rule still routes it by the
	// match, since the engine stores the prompt's pages there as it does
	// any other's.
	ComputesPrompt bool
}

// Decision is a policy's answer: the worker, and why it was chosen.
type Decision struct {
	// Worker is the chosen candidate (View.Worker), for the caller to act
	// on; a policy calls nothing on it.
	Worker *workers.Worker
	// PredictedCachedTokens is how many prompt tokens the policy expects the
	// worker to find in its KV cache; 0 for cache-blind policies.
	PredictedCachedTokens int
	// Branch names the rule that decided, in one word for metrics and
	// Explain: "cache_hit", "cache_miss", "imbalance", "sticky", "ring",
	// "target", "random", "round_robin", "power_of_two", "bucket", ...
	Branch string
	// Reason says in a few words why this worker won, for logs and responses.
	// A policy may leave it empty outside DryRun and build it only when
	// asked (cache_aware does: formatting it was a third of its selection's
	// allocations, for a text only Explain and logs read); read it with Why.
	Reason string
	// Matched is, for cache-aware policies, the prompt tokens each candidate
	// (by URL) holds according to the policy's tree; nil otherwise.
	Matched *Matches
	// Confirmed is the part of Matched the workers' engines confirmed
	// through their KV events (the rest is speculative: expected from the
	// router's own recent decisions); 0 for workers with none.
	Confirmed *Matches

	// tick is the logical time of the policy's speculative insert, so the
	// insert can be expired once the request is over.
	tick uint64
	// why builds the reason on demand when Reason is empty (see Why).
	why reasoner
	// pending is the count the policy keeps of the decision until its
	// worker's load does (see Request.Acquires); nil for none.
	pending acquirer
	// cut is how many tokens of the match the policy routed by were left
	// out of PredictedCachedTokens: the page holding the prompt's last
	// token when the whole prompt matched (see reusable), and what an
	// engine that queues is expected to evict (see inFlight.predict).
	// PrefillTokens adds them back. A prompt the engine computes whole
	// (Request.ComputesPrompt) has none: its prefill is the whole prompt.
	cut int
	// held is the match the policy routed by: what the tree held of the
	// prompt for the worker at the decision, which a failed request's
	// outcome trims the tree back to (see CacheAware.Observe).
	held int
	// engine is the chosen engine's last load poll as the prediction read
	// it (zero where events do not keep the policy's view exact, since no
	// queue rule reads it there), for the debug log of a prediction that
	// missed.
	engine workers.Load
	// keeper holds something of the decision for the policy until its
	// outcome (Observe), to be let go if the request is never sent; nil
	// for none (see Abandoned).
	keeper abandoner
}

// PrefillTokens is what the caller charges the chosen worker's prefill
// backlog for a prompt of promptLen tokens (Worker.Prefilling): the prompt
// less the cache the policy routed by. That is PredictedCachedTokens, but
// on an engine whose queue the prediction expects to evict part of the
// match, where it is the match: later decisions read the backlog
// (cache_aware's rule that keeps a request with its cache, the cost and
// wait modes), and the prediction is meant to say what the engine will
// hold without moving them. (Charged from the prediction, the shared-prefix
// runs at 40 requests/s queued more requests in the engines.)
func (d Decision) PrefillTokens(promptLen int) int {
	return promptLen - d.PredictedCachedTokens - d.cut
}

// reusable is the most of a promptLen-token prompt an engine takes from its
// prefix cache, in whole pages: all but the last token, which it computes
// again to sample the first output token from even when the whole prompt
// is cached. vLLM caps a hit at the prompt's length less one token
// (vllm/v1/core/kv_cache_manager.py, get_computed_blocks), SGLang its match
// likewise (Req._compute_max_prefix_len): a prompt that ends on a page
// boundary has its last page computed again, and reported uncached.
func reusable(promptLen, pageSize int) int {
	return max(promptLen-1, 0) / pageSize * pageSize
}

// reusedBy is what of a match the engine is expected to reuse for req (see
// reusable and Request.ComputesPrompt), and what of the match the prefill
// charge still leaves out (Decision.cut): a page-aligned prompt's last page
// is charged as matched, a prompt computed whole is charged whole.
func reusedBy(req *Request, match, pageSize int) (reused, cut int) {
	if req.ComputesPrompt {
		return 0, 0
	}
	reused = min(match, reusable(len(req.InputIDs), pageSize))
	return reused, match - reused
}

// acquirer is what a policy counts of a decision until its worker's load
// counts it.
type acquirer interface{ acquired() }

// abandoner is a policy that keeps something of a decision until its
// outcome, and lets it go when the request is never sent.
type abandoner interface{ abandoned(Decision) }

// Acquired tells the policy that the chosen worker's load now counts the
// request, or that it never will: see Request.Acquires. Calls after the
// first, and calls on a decision the policy keeps no count of (a dry run,
// a request without Acquires, a policy that counts none), do nothing.
func (d Decision) Acquired() {
	if d.pending != nil {
		d.pending.acquired()
	}
}

// Abandoned tells the policy that the request will never be sent to the
// chosen worker (its circuit breaker refused it, and the caller chooses
// again or gives up): Acquired, and no outcome will come to Observe, so
// whatever the policy keeps of the decision until then goes now. Calls on
// the zero Decision do nothing.
func (d Decision) Abandoned() {
	d.Acquired()
	if d.keeper != nil {
		d.keeper.abandoned(d)
	}
}

// reasoner is what a policy keeps of a decision to explain it later.
type reasoner interface{ reason() string }

// Why returns why the worker won: Reason, or, from a policy that explains
// only on demand, the reason built now from what the decision saw. Read it
// for logs rather than Reason, and only when a line is written: building it
// costs a few allocations.
func (d Decision) Why() string {
	if d.Reason == "" && d.why != nil {
		return d.why.reason()
	}
	return d.Reason
}

// Outcome is what happened to a dispatched request, as the worker reported it.
type Outcome struct {
	// CachedTokens is the engine's reported cached prompt tokens.
	CachedTokens int
	// OutputIDs are the generated tokens of a completed request. Engines
	// keep the prompt and the output (but its last token) in their prefix
	// cache, so a policy that mirrors the cache can add them. As with
	// Request.InputIDs, a policy may keep the slice, and the caller never
	// modifies it afterwards (a pooled decoder must hand over a copy).
	OutputIDs []uint32
	// Err is the request's failure, if it failed.
	Err error
	// Unreported: the engine's answer carries no cached-token count (an
	// embedding), so CachedTokens says nothing: a success is neither
	// counted towards the prediction's accuracy nor corrects anything.
	Unreported bool
}

// Observer is implemented by policies that learn from outcomes (cache_aware
// corrects its tree where the engine had evicted what it predicted).
type Observer interface {
	Observe(req *Request, d Decision, o Outcome)
}

// Runner is implemented by policies with background work (tree eviction,
// bucket boundary adjustment, idle key expiry). Run returns when ctx ends.
type Runner interface {
	Run(ctx context.Context)
}

// Forgetter is implemented by policies that keep per-worker state (a tree
// tenant, pinned keys, cached rings). The server calls Forget when a worker
// is removed from the fleet, so the policy drops what it kept about it; a
// worker that only turns unhealthy is not forgotten, since it may come back
// with its cache intact.
type Forgetter interface {
	Forget(url string)
}

// CacheForgetter is implemented by policies that mirror the workers' KV
// caches (a tree, a block index). ForgetCache drops what the policy holds
// of url's cache, after the engine flushed it; unlike Forget, the worker
// stays in the fleet with the rest of its state.
type CacheForgetter interface {
	ForgetCache(url string)
}

// Policy selects one worker among candidates.
type Policy interface {
	Name() string
	// Select returns a decision naming one of the healthy candidates, or
	// ErrNoHealthyWorker when there is none. A caller holding workers
	// passes workers.Views(ws), which copies nothing.
	Select(ctx context.Context, req *Request, candidates []workers.View) (Decision, error)
}

// ErrNoHealthyWorker is returned by Select when no candidate is healthy.
var ErrNoHealthyWorker = errors.New("no healthy worker")

// Intn returns a uniform random integer in [0, n). Policies take one so tests
// can make them deterministic.
type Intn func(n int) int

// registered is a --policy name's entry: how to build the policy, and what
// the router must wire for it before any is built.
type registered struct {
	// build validates the config it reads and returns the policy.
	build func(Options) (Policy, error)
	// kvEvents: the policy mirrors the engines' caches from their KV
	// events (it is a workers.KVEventHandler), so the router subscribes.
	kvEvents bool
}

// constructors maps each --policy name to its entry.
var constructors = map[string]registered{
	"random":             {build: func(o Options) (Policy, error) { return NewRandom(o.Intn), nil }},
	"round_robin":        {build: func(Options) (Policy, error) { return NewRoundRobin(), nil }},
	"power_of_two":       {build: func(o Options) (Policy, error) { return NewPowerOfTwo(o.Intn), nil }},
	"cache_aware":        {build: func(o Options) (Policy, error) { return NewCacheAware(o) }, kvEvents: true},
	"prefix_hash":        {build: func(o Options) (Policy, error) { return NewPrefixHash(o) }},
	"consistent_hashing": {build: func(o Options) (Policy, error) { return NewConsistentHashing(o), nil }},
	"manual":             {build: func(o Options) (Policy, error) { return NewManual(o) }},
	"bucket":             {build: func(o Options) (Policy, error) { return NewBucket(o) }},
	"vllm_cache_aware":   {build: func(o Options) (Policy, error) { return NewVllmCacheAware(o) }, kvEvents: true},
}

// The optional interfaces each policy implements, as the server finds
// them by type assertion; the compiler keeps this list true.
var (
	_ Observer               = (*CacheAware)(nil)
	_ Runner                 = (*CacheAware)(nil)
	_ Forgetter              = (*CacheAware)(nil)
	_ CacheForgetter         = (*CacheAware)(nil)
	_ workers.KVEventHandler = (*CacheAware)(nil)
	_ Observer               = (*VllmCacheAware)(nil)
	_ Runner                 = (*VllmCacheAware)(nil)
	_ Forgetter              = (*VllmCacheAware)(nil)
	_ CacheForgetter         = (*VllmCacheAware)(nil)
	_ workers.KVEventHandler = (*VllmCacheAware)(nil)
	_ Forgetter              = (*PrefixHash)(nil)
	_ Forgetter              = (*ConsistentHashing)(nil)
	_ Forgetter              = (*Manual)(nil)
	_ Runner                 = (*Manual)(nil)
	_ Runner                 = (*Bucket)(nil)
)

// MirrorsKVEvents reports whether the policy called name mirrors the
// engines' caches from their KV events, without building one: the router
// decides from it whether to subscribe to the engines' events.
func MirrorsKVEvents(name string) bool { return constructors[name].kvEvents }

// Names lists the policies New accepts, sorted.
func Names() []string {
	names := make([]string, 0, len(constructors))
	for n := range constructors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds the policy called name.
func New(name string, opts Options) (Policy, error) {
	c, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q (available: %s)", name, strings.Join(Names(), ", "))
	}
	p, err := c.build(opts)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	return p, nil
}

// healthy returns the candidates that may receive req: available (healthy,
// not draining, a circuit breaker that lets requests through) and not
// excluded by it. Policies filter even though the server passes available
// workers, because that can change between the snapshot and the selection
// and a stale verdict is cheap to re-check.
//
// When every candidate may receive req, which is nearly always, the result is
// candidates itself: a copy per request would be an allocation as large as
// the fleet (32 KB at 4,000 workers) for nothing. Callers must not modify it.
func healthy(req *Request, candidates []workers.View) []workers.View {
	for i, w := range candidates {
		if usable(req, w) {
			continue
		}
		out := make([]workers.View, i, len(candidates)-1)
		copy(out, candidates[:i])
		for _, w := range candidates[i+1:] {
			if usable(req, w) {
				out = append(out, w)
			}
		}
		return out
	}
	return candidates
}

// among reports whether a candidate is one of ws, the usable subset of
// candidates that healthy returned: a ring walked over every candidate
// (so that keys stay put while a worker is down) skips the others without
// asking each worker's health again. When ws is candidates itself, which
// is nearly always, every candidate is in it and nothing is built.
func among(ws, candidates []workers.View) func(workers.View) bool {
	if len(ws) == len(candidates) {
		return func(workers.View) bool { return true }
	}
	in := make(map[workers.View]bool, len(ws))
	for _, w := range ws {
		in[w] = true
	}
	return func(w workers.View) bool { return in[w] }
}

// usable reports whether w may receive req: the one place a policy asks
// about health, so every policy treats health and exclusion alike.
func usable(req *Request, w workers.View) bool {
	if !w.Available() {
		return false
	}
	return req == nil || len(req.Exclude) == 0 || !slices.Contains(req.Exclude, w.URL())
}

func orDefault(f Intn) Intn {
	if f == nil {
		return rand.IntN
	}
	return f
}
