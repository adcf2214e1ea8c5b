package policy

import "time"

// Accuracy compares cache_aware's predictions (Decision.PredictedCachedTokens)
// with the cached_tokens the engines reported. SMG's documentation claims "100% accurate
// prefix match"; these counters measure ours (kvgate_cache_prediction_*).
type Accuracy struct {
	// Observations counts outcomes with a cached_tokens report.
	Observations uint64
	// ExactMatches counts reports equal to the prediction.
	ExactMatches uint64
	// AbsErrorTokens sums |predicted - reported| over all observations.
	AbsErrorTokens uint64
	// Overpredicted counts reports below the prediction (the engine had
	// evicted what the tree still held); Underpredicted reports above it (the
	// engine held more than the tree knew, e.g. generated tokens of an
	// earlier turn, or another router's requests).
	Overpredicted, Underpredicted uint64
}

// Accuracy returns the prediction counters so far.
func (c *CacheAware) Accuracy() Accuracy {
	return Accuracy{
		Observations:   c.acc.observations.Load(),
		ExactMatches:   c.acc.exact.Load(),
		AbsErrorTokens: c.acc.absErr.Load(),
		Overpredicted:  c.acc.over.Load(),
		Underpredicted: c.acc.under.Load(),
	}
}

// Observe corrects the tree with what the engine reported for a request this
// policy placed, and counts the prediction's accuracy.
//
// Reported < predicted (successful request): the engine had evicted pages
// the tree still held for it. Engines evict leaves first, so everything the
// worker held below the first missing page is gone too: the worker's path for
// the prompt is trimmed back to the reported length, which drops those
// deeper branches, and the prompt is inserted again, because serving it has
// put it back in the engine's cache (SGLang, vLLM and the simulator all keep a
// finished request's prompt pages). The next prediction, for this prompt or
// one branching from it, is then right.
//
// Reported > predicted needs nothing: Select has already inserted the whole
// prompt.
//
// Failed requests (o.Err != nil) with no cached_tokens report (0) are taken as
// never having run: Select's insertion was speculative, so the worker's path
// is trimmed back to what it held before (the prediction). A concurrent,
// successful request for the same prompt on the same worker may lose its
// pages in the tree this way; its next request re-inserts them. A failed
// request that did report cached tokens had been admitted, and the engine
// keeps the pages it allocated, so it is handled as a successful one.
//
// A completed request's output joins its prompt in the tree (o.OutputIDs,
// but the last token, whose KV the engine has not computed): engines keep
// both in their prefix cache, so the next turn of a conversation, which
// repeats the reply, is predicted exactly instead of underpredicted. The
// tree continues below where Select's insert of the prompt ended
// (tree.Extend with the decision's tick), so the prompt is neither copied
// nor descended again; if that part of the tree changed meanwhile, Extend
// inserts both from the root.
//
// Workers with KV events need no correction: the events say what the
// engine stored and evicted, prompt and output alike. Their outcome counts
// towards accuracy; a completed reply is inserted speculatively (its stored
// events can reach the router after the client's next turn does), and the
// insert is set to expire (see speculations): whatever the engine confirmed
// has become confirmed by then, and the rest it never stored.
//
// A success the engine reported no cached tokens for (o.Unreported, an
// embedding) is not counted and corrects nothing: the prompt's speculative
// insert stands, and for workers with KV events expires unless confirmed,
// as a generation's does.
//
// DryRun decisions and decisions without a worker are ignored. A draining
// worker's outcome is not observed: it takes no new requests, and it is
// being removed, so an insert arriving after the router has forgotten it
// would bring it back into the tree as a tenant nobody removes.
func (c *CacheAware) Observe(req *Request, d Decision, o Outcome) {
	cached := cachedReply(o.OutputIDs)
	if s, ok := d.why.(*snapshot); ok && d.Worker != nil && (req == nil || !req.DryRun) {
		c.flight.done(d.Worker.URL(), s, o.Err == nil || o.CachedTokens > 0, cached)
	}
	if d.Worker != nil && d.Worker.Draining() {
		return
	}
	if req != nil && !req.DryRun && d.Worker != nil && c.isExact(d.Worker.URL()) {
		url := d.Worker.URL()
		if (o.Err == nil && !o.Unreported) || o.CachedTokens > 0 {
			c.count(d.PredictedCachedTokens, max(o.CachedTokens, 0))
			if reported := max(o.CachedTokens, 0); reported != d.PredictedCachedTokens {
				c.miss(req, d, reported, true)
			}
		}
		var reply []uint32
		if o.Err == nil {
			reply = cached
		}
		tick := d.tick
		if len(reply) > 0 {
			// The engine stores the reply's pages as the request ends,
			// and their events may reach the router after the client's
			// next turn does: expect them now, like the prompt's. The
			// insert touches the prompt's path too, so its expiry covers
			// both; the queue keeps the two slices, not a copy of them
			// joined. Pages the events removed since the decision are
			// not expected again (see removals): the expectation stops
			// at the first of them.
			if s, ok := d.why.(*snapshot); ok {
				if cut := c.removed.cut(url, s.removals, req.InputIDs, reply); cut <= len(req.InputIDs) {
					reply = nil
				} else {
					reply = reply[:cut-len(req.InputIDs)]
				}
			}
			if len(reply) > 0 {
				tick = c.tree.Extend(d.tick, req.InputIDs, reply, url)
			}
		}
		c.spec.add(req.InputIDs, reply, url, tick, time.Now())
		return
	}
	c.observe(req, d, o)
	if req != nil && !req.DryRun && d.Worker != nil && o.Err == nil && len(cached) > 0 {
		c.tree.Extend(d.tick, req.InputIDs, cached, d.Worker.URL())
	}
}

func (c *CacheAware) observe(req *Request, d Decision, o Outcome) {
	if req == nil || req.DryRun || d.Worker == nil {
		return
	}
	url := d.Worker.URL()
	if o.Err == nil && o.Unreported {
		return
	}
	if o.Err != nil && o.CachedTokens <= 0 {
		// Back to the match the tree held at the decision.
		if d.held < len(req.InputIDs)/c.pageSize*c.pageSize {
			c.tree.Trim(req.InputIDs, url, d.held)
		}
		return
	}

	predicted, reported := d.PredictedCachedTokens, max(o.CachedTokens, 0)
	c.count(predicted, reported)
	if reported != predicted {
		c.miss(req, d, reported, false)
	}
	if reported < predicted {
		c.tree.Trim(req.InputIDs, url, reported/c.pageSize*c.pageSize)
		c.tree.Insert(req.InputIDs, url)
	}
}

// count adds one prediction to the accuracy counters.
func (c *CacheAware) count(predicted, reported int) {
	c.acc.observations.Add(1)
	switch {
	case reported == predicted:
		c.acc.exact.Add(1)
	case reported < predicted:
		c.acc.over.Add(1)
		c.acc.absErr.Add(uint64(predicted - reported))
	default:
		c.acc.under.Add(1)
		c.acc.absErr.Add(uint64(reported - predicted))
	}
}

// abandoned ends the in-flight count of a decision whose request was never
// sent (Decision.Abandoned): no outcome will end it, and until the sweep it
// would count as holding its prefix on an engine that never saw it.
func (c *CacheAware) abandoned(d Decision) {
	if s, ok := d.why.(*snapshot); ok && d.Worker != nil {
		c.flight.abandon(d.Worker.URL(), s)
	}
}
