package policy

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// MissCause says why a cache_aware or vllm_cache_aware prediction differed from the cached
// tokens the engine reported. Telling the causes apart is what lets each be
// fixed where it arises: in the router's speculation, in its page
// arithmetic, or (for evictions the router cannot see coming) in where
// requests wait.
type MissCause int

const (
	// MissSpeculation: the engine reported fewer tokens than predicted but
	// at least as many as the KV events had confirmed at the decision; the
	// pages the router was missing were its own speculative inserts, which
	// the engine had evicted or never stored.
	MissSpeculation MissCause = iota
	// MissEvicted: the engine reported fewer tokens than its events had
	// confirmed at the decision. It evicted them before the decision
	// (events that would have said so had not reached the router: event
	// lag) or after it (while the request waited in the engine's queue
	// for KV room, others evicted its prefix); the simulated engine's
	// Stats.QueueShrunk counts the second kind.
	MissEvicted
	// MissUnseen: the engine reported more than predicted: it held pages
	// the router did not know of (stored events not applied yet, a
	// speculative entry expired before its events came, another router's
	// traffic), or pages it was expected to evict while the request waited
	// in its queue survived (see inFlight.predict).
	MissUnseen
	// MissBoundary: the difference is a matter of pages: the report is not
	// a whole number of the router's pages (an engine block size other
	// than the router's page size), or it misses exactly the prompt's last
	// page, which some engines never report as cached.
	MissBoundary
	// MissOverReport: the engine reported more cached tokens than the
	// prompt has.
	MissOverReport
	// MissQueued: the engine reported fewer tokens than predicted, and the
	// decision had placed the request on an engine already running its
	// limit of requests (the policy preferred it to one with room): the
	// request waited in the engine's queue, where the requests admitted
	// before it evicted its prefix. No view of the cache at the decision
	// could have foreseen that; holding the request in the router until
	// an engine has room (late binding, avoiding full engines) does.
	MissQueued
	missCauses
)

// String is the cause as the metric's label and the debug log name it.
func (c MissCause) String() string {
	return [missCauses]string{"speculation", "evicted", "unseen", "boundary", "over_report", "queued"}[c]
}

// MissCauses lists every cause, in the order of their values.
func MissCauses() []MissCause {
	out := make([]MissCause, missCauses)
	for i := range out {
		out[i] = MissCause(i)
	}
	return out
}

// classifyMiss says why predicted (of which confirmed were tokens the
// engine's events had confirmed at the decision) differs from reported, for
// a prompt of promptLen tokens and the router's pageSize; queued says the
// decision placed the request on an engine at its running-request limit.
// It is called only when they differ.
func classifyMiss(promptLen, pageSize, predicted, confirmed, reported int, queued bool) MissCause {
	switch {
	case reported > promptLen:
		return MissOverReport
	case reported%pageSize != 0:
		return MissBoundary
	case reported == promptLen && predicted == reusable(promptLen, pageSize):
		// A prompt that ends on a page boundary, reported cached whole by
		// an engine that reuses its last page, where the router expects
		// that page computed again (see reusable).
		return MissBoundary
	case reported > predicted:
		return MissUnseen
	case queued:
		return MissQueued
	case reported >= confirmed:
		return MissSpeculation
	default:
		return MissEvicted
	}
}

// missCounters counts a policy's misses by cause.
type missCounters [missCauses]atomic.Uint64

// byCause returns how many predictions missed, by cause.
func (m *missCounters) byCause() map[string]uint64 {
	out := make(map[string]uint64, missCauses)
	for i := range m {
		out[MissCause(i).String()] = m[i].Load()
	}
	return out
}

// missed is one prediction that missed, as a policy knew it at the
// decision and the engine reported it.
type missed struct {
	req       *Request
	d         Decision
	pageSize  int
	confirmed int // the part of the prediction the KV events had confirmed
	reported  int
	// load is the chosen worker's load at the decision (this request not
	// counted), limit its engine's running-request limit (0: unknown).
	load, limit int
	events      bool // the worker's KV events keep the policy's view exact
}

// note classifies m, counts it, and logs it at debug level.
func (c *missCounters) note(log *slog.Logger, m missed) {
	queued := m.limit > 0 && m.load >= m.limit
	cause := classifyMiss(len(m.req.InputIDs), m.pageSize, m.d.PredictedCachedTokens, m.confirmed, m.reported, queued)
	c[cause].Add(1)
	if log.Enabled(context.Background(), slog.LevelDebug) {
		url, e := m.d.Worker.URL(), m.d.engine
		log.Debug("cache prediction missed", "cause", cause.String(), "request_id", m.req.RequestID,
			"worker", url, "kv_events", m.events, "branch", m.d.Branch, "prompt_tokens", len(m.req.InputIDs),
			"matched", m.d.Matched.Of(url), "predicted", m.d.PredictedCachedTokens, "confirmed", m.confirmed, "reported", m.reported,
			"load_at_decision", m.load, "running_limit", m.limit,
			"engine_running", e.Running, "engine_waiting", e.Waiting, "engine_free_tokens", e.MaxTotalTokens-e.UsedTokens)
	}
}

// PredictionMisses returns how many predictions missed, by cause.
func (c *CacheAware) PredictionMisses() map[string]uint64 { return c.misses.byCause() }

// miss counts and logs (at debug) one prediction that missed.
func (c *CacheAware) miss(req *Request, d Decision, reported int, events bool) {
	confirmed := d.PredictedCachedTokens
	if events {
		confirmed = d.Confirmed.Of(d.Worker.URL())
	}
	load, limit := placedLoad(d)
	c.misses.note(c.log, missed{req: req, d: d, pageSize: c.pageSize, confirmed: confirmed, reported: reported,
		load: load, limit: limit, events: events})
}

// placedLoad is the chosen worker's load when d was decided (the requests
// this router had in flight on it, this one not counted) and its engine's
// running-request limit (0: not reported, or d was not decided by cache_aware's
// selection).
func placedLoad(d Decision) (load, limit int) {
	s, ok := d.why.(*snapshot)
	if !ok || s.chosen < 0 || s.chosen >= len(s.ws) {
		return 0, 0
	}
	return s.chosenLoad, s.ws[s.chosen].MaxRunningRequests()
}
