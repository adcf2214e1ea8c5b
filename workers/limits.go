package workers

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// refreshLimits reads the engine's model information again and takes the
// limits requests and policies are judged by: its context, longest input
// and truncation, and, for a whole engine, its KV capacity and running
// limit. An engine restarted at the same address with another context or
// KV cache would otherwise be held to the limits it had before: prompts it
// now accepts refused, a cache it no longer has counted on. A data-parallel
// rank's capacity and running limit are its own rank's, read from the
// engine's loads at connection, and stay. An engine that does not answer
// keeps its limits, and read is false.
//
// What names the worker (its model, vocabulary, end-of-sequence tokens,
// page size) is not taken: the requests routed to it, their tokens and
// its cache mirror's pages are the old ones'. When the engine reports
// others, refreshLimits returns how they differ, and the caller keeps the
// worker out of routing until it serves the old ones again or is
// registered again.
func refreshLimits(ctx context.Context, w *Worker, timeout time.Duration, log *slog.Logger) (other string, read bool) {
	if !w.connected || w.backend == nil {
		return "", true // nothing to read
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	next, err := w.backend.Info(ctx)
	if err != nil {
		log.Debug("model information not read again; limits kept", "worker", w.URL(), "err", err)
		return "", false
	}
	next = next.sane()
	cur := w.Info()
	if other := identityChange(cur, next); other != "" {
		return other, true
	}
	was, now := limitsOf(cur), limitsOf(next)
	if w.rank >= 0 {
		// A data-parallel rank's share of the engine's KV and running
		// requests was set when it joined (see dprank.go), not read here.
		now.kvCapacity, now.maxRunning = was.kvCapacity, was.maxRunning
	}
	if now == was {
		return "", true
	}
	info := cur
	now.apply(&info)
	log.Info("worker's limits changed", "worker", w.URL(),
		"max_context_length", now.context, "max_req_input_len", now.input, "truncates", now.truncates,
		"kv_capacity_tokens", now.kvCapacity, "max_running_requests", now.maxRunning,
		"before", cur)
	w.info.Store(&info)
	return "", true
}

// engineLimits are the figures of ModelInfo an engine may change across a
// restart while serving the same model, gathered so that they are
// compared and copied as one.
type engineLimits struct {
	context, input, kvCapacity, maxRunning int
	truncates                              bool
}

func limitsOf(i ModelInfo) engineLimits {
	return engineLimits{context: i.MaxContextLength, input: i.MaxInputTokens, kvCapacity: i.KVCapacityTokens,
		maxRunning: i.MaxRunningRequests, truncates: i.TruncatesPrompts}
}

func (l engineLimits) apply(i *ModelInfo) {
	i.MaxContextLength, i.MaxInputTokens, i.KVCapacityTokens = l.context, l.input, l.kvCapacity
	i.MaxRunningRequests, i.TruncatesPrompts = l.maxRunning, l.truncates
}

// identityChange says how next differs from cur in what names a worker
// ("" when it does not). A figure either side leaves unreported (empty, 0)
// is no difference: an engine that reports its page size only once its
// cache is ready is the same engine. The end-of-sequence tokens are
// compared as a set.
func identityChange(cur, next ModelInfo) string {
	var diffs []string
	if next.Model != cur.Model && next.Model != "" && cur.Model != "" {
		diffs = append(diffs, fmt.Sprintf("model %q (joined with %q)", next.Model, cur.Model))
	}
	if next.VocabSize != cur.VocabSize && next.VocabSize > 0 && cur.VocabSize > 0 {
		diffs = append(diffs, fmt.Sprintf("vocab_size %d (joined with %d)", next.VocabSize, cur.VocabSize))
	}
	if a, b := sorted(next.EOSTokenIDs), sorted(cur.EOSTokenIDs); !slices.Equal(a, b) && len(a) > 0 && len(b) > 0 {
		diffs = append(diffs, fmt.Sprintf("end-of-sequence tokens %v (joined with %v)", a, b))
	}
	if next.PageSize != cur.PageSize && next.PageSize > 0 && cur.PageSize > 0 {
		diffs = append(diffs, fmt.Sprintf("page size %d (joined with %d)", next.PageSize, cur.PageSize))
	}
	return strings.Join(diffs, ", ")
}

func sorted(ids []uint32) []uint32 {
	return slices.Sorted(slices.Values(ids))
}
