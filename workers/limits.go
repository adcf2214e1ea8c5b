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
	cur := w.Info()
	if other := identityChange(cur, next); other != "" {
		return other, true
	}
	info := cur
	info.MaxContextLength, info.MaxInputTokens, info.TruncatesPrompts = next.MaxContextLength, next.MaxInputTokens, next.TruncatesPrompts
	if w.rank < 0 {
		info.KVCapacityTokens, info.MaxRunningRequests = next.KVCapacityTokens, next.MaxRunningRequests
	}
	if info.MaxContextLength != cur.MaxContextLength || info.MaxInputTokens != cur.MaxInputTokens || info.TruncatesPrompts != cur.TruncatesPrompts ||
		info.KVCapacityTokens != cur.KVCapacityTokens || info.MaxRunningRequests != cur.MaxRunningRequests {
		log.Info("worker's limits changed", "worker", w.URL(),
			"max_context_length", info.MaxContextLength, "max_req_input_len", info.MaxInputTokens, "truncates", info.TruncatesPrompts,
			"kv_capacity_tokens", info.KVCapacityTokens, "max_running_requests", info.MaxRunningRequests,
			"before", cur)
		w.info.Store(&info)
	}
	return "", true
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
