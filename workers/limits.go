package workers

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// refreshLimits reads the engine's model information again and takes the
// limits requests and policies are judged by: its context, longest input
// and truncation, and, for a whole engine, its KV capacity and running
// limit. An engine restarted at the same address with another context or
// KV cache would otherwise be held to the limits it had before: prompts it
// now accepts refused, a cache it no longer has counted on. A data-parallel
// rank's capacity and running limit are its own rank's, read from the
// engine's loads at connection, and stay. What names the worker (its model,
// vocabulary, page size) stays too; a change there is logged, since only
// registering the worker again takes it. An engine that does not answer
// keeps its limits.
func refreshLimits(ctx context.Context, w *Worker, timeout time.Duration, log *slog.Logger) {
	if !w.connected || w.backend == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	next, err := w.backend.Info(ctx)
	if err != nil {
		log.Debug("model information not read again after recovery; limits kept", "worker", w.URL(), "err", err)
		return
	}
	cur := w.Info()
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
	if next.Model != cur.Model || next.VocabSize != cur.VocabSize || next.PageSize != cur.PageSize ||
		!slices.Equal(next.EOSTokenIDs, cur.EOSTokenIDs) {
		log.Warn("worker reports another model, vocabulary or page size than when it joined; "+
			"kvgate keeps routing by the old ones until the worker is registered again",
			"worker", w.URL(), "model", next.Model, "was", cur.Model, "vocab_size", next.VocabSize, "page_size", next.PageSize)
	}
}
