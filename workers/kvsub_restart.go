package workers

// Resuming a broken stream, and telling a restarted engine from the one the
// stream broke away from when the numbers alone cannot.
//
// The protocol names no engine process: a restart shows only as numbers
// going backwards, and that needs the new process to have published fewer
// batches than the old one when the subscription comes back. A short-lived
// process in a crash loop while the backoff has grown, or a busy one behind
// a slow reconnection, passes the old position first; resuming at the next
// expected number would then read the new process's batches from there on
// as the old one's continuation, never apply its first ones, and keep the
// old process's pages in the mirror for good.
//
// So a single-rank stream resumes one batch early, at the number of the
// last batch applied, and the subscription keeps a digest of that batch
// (kvMark). The first batch of the resumed stream under that number is
// compared with it: the same batch is skipped (it was applied once), a
// different one is another process's, which is a restart. Its batches
// before the one in hand were not received, so the mirror is reset and the
// subscription starts again at 0 at once: a source that replays from the
// process's first batch (ZMQ's replay socket) brings them all back, and one
// for which 0 means "from now on" (a SubscribeKvEvents RPC) cannot, which
// the first batch of the next stream shows by its number and is counted as
// a gap. The restart costs no backoff, whose wait would lose more of the new
// process's batches where they cannot be replayed, and cannot repeat without
// one: the stream that follows has nothing applied to resume from.
//
// What the comparison cannot see: a resumed stream whose first batch is
// already the next expected one (the engine sends only live batches, or no
// longer keeps the one asked for and says nothing) is the old process's
// continuation as before; a new process that numbered exactly that many
// batches while away still reads as it. An engine that no longer keeps the
// batch and says so (OUT_OF_RANGE, DATA_LOSS) is resynchronized as any
// other.

import "math/bits"

// kvMark is one applied batch as a resumed stream must show it again.
type kvMark struct {
	rank int
	seq  uint64
	sum  uint64 // kvDigest of the batch
	ok   bool
}

// kvDigest sums up what tells one process's batch from another's under the
// same number: its timestamp, its number of events, and the kind, parent
// and first and last block hashes of its first and last events. Block
// hashes alone would do for engines that name blocks afresh in every
// process (vLLM draws a random start for its chain of hashes in each), but
// not for one that names them by their content alone (vLLM set up for names
// reproducible across processes): the same first requests after a restart
// would make the same batches. The timestamp tells those apart; the engines
// that replay (the simulated one, vLLM's ZMQ replay socket) send a kept
// batch as it was, stamp included. An empty batch without a stamp reads as
// any other such batch: the resume then goes on as it did before the
// comparison existed.
//
// It is computed for every batch applied, before the cache group filter
// changes it, so it reads a fixed handful of fields whatever the batch's
// size: going over every event and block cost about 4 ns an event (half
// again the subscription's own work on a full engine's batch,
// BenchmarkKVSubscriptionBatch), and tells two processes' batches apart no
// better, their names and stamps differing throughout.
func kvDigest(b *KVEventBatch) uint64 {
	var ts uint64
	if !b.Timestamp.IsZero() {
		ts = uint64(b.Timestamp.UnixNano())
	}
	h := kvMix(uint64(len(b.Events)), ts)
	if n := len(b.Events); n > 0 {
		h = kvMix(kvMix(h, kvEventName(&b.Events[0])), kvEventName(&b.Events[n-1]))
	}
	return h
}

// kvEventName is e's kind, parent, and first and last block hashes, mixed.
func kvEventName(e *KVEvent) uint64 {
	h := uint64(e.Kind)
	if e.HasParent {
		h = kvMix(h|1<<8, uint64(e.Parent))
	}
	if n := len(e.Blocks); n > 0 {
		h = kvMix(kvMix(h, uint64(e.Blocks[0].Hash)), uint64(e.Blocks[n-1].Hash))
	}
	if n := len(e.Hashes); n > 0 {
		h = kvMix(kvMix(h, uint64(e.Hashes[0])), uint64(e.Hashes[n-1]))
	}
	return h
}

// kvMix folds x into h so that every bit of x moves every bit of the
// result (the multipliers are SplitMix64's).
func kvMix(h, x uint64) uint64 {
	h ^= x * 0x9e3779b97f4a7c15
	return bits.RotateLeft64(h, 27) * 0xbf58476d1ce4e5b9
}

// resumeAt returns where a stream broken after applying rank's batches up
// to next-1 resumes, and arms the comparison of its first batch: one early,
// when the last batch applied is that one, else at next.
func (k *kvSub) resumeAt(rank int, next uint64) uint64 {
	if k.last.ok && k.last.rank == rank && k.last.seq+1 == next {
		k.probe = k.last
		return next - 1
	}
	k.probe = kvMark{}
	return next
}

// sameAsApplied reports whether b, the first batch of its rank on a resumed
// stream, is the batch last applied under its number. ok is false when the
// comparison does not apply to b (not armed for its rank, or another
// number); either way the comparison is disarmed for its rank: only the
// first batch on the stream stands for the engine the stream reached.
func (k *kvSub) sameAsApplied(b *KVEventBatch) (same, ok bool) {
	if !k.probe.ok || k.probe.rank != b.DPRank {
		return false, false
	}
	k.probe.ok = false
	if b.Seq != k.probe.seq {
		return false, false
	}
	return kvDigest(b) == k.probe.sum, true
}

// restartedPast handles a resumed stream whose first batch is another than
// the one applied under its number: the engine restarted and has numbered
// past the old position. The mirror is reset; a batch numbered 0 is the new
// baseline (nothing of the new process was missed), any other makes the
// subscription start again from 0 at once (see the file comment). It
// reports whether the stream goes on.
func (k *kvSub) restartedPast(b *KVEventBatch) bool {
	k.log.Info("engine restarted (a different KV event batch under the number last applied); resetting the worker's cache mirror",
		"rank", b.DPRank, "received", b.Seq)
	k.update(func(s *KVEventStatus) { s.Resets++ })
	if k.cfg.Metrics.Reset != nil {
		k.cfg.Metrics.Reset(k.url)
	}
	k.forget()
	if b.Seq == 0 {
		k.apply(b)
		return true
	}
	k.afresh = kvAfresh{rank: b.DPRank, on: true}
	return false
}

// lostAcrossRestart handles a stream that saw its engine restart and lost
// the new process's first batches (see KVEventsLostError): a reset and a
// gap, and a fresh start from 0 after the backoff.
func (k *kvSub) lostAcrossRestart(e *KVEventsLostError) {
	k.log.Info("engine restarted (KV event numbers went backwards); resetting the worker's cache mirror",
		"rank", e.Rank, "received", e.To)
	k.update(func(s *KVEventStatus) { s.Resets++ })
	if k.cfg.Metrics.Reset != nil {
		k.cfg.Metrics.Reset(k.url)
	}
	k.warn.Warn(k.log, "KV events lost: the restarted engine's first batches were not received; subscribing afresh after the backoff",
		"rank", e.Rank, "err", e, "backoff", k.backoff)
	k.update(func(s *KVEventStatus) { s.Gaps++ })
	if k.cfg.Metrics.Gap != nil {
		k.cfg.Metrics.Gap(k.url)
	}
	k.forget()
}

// kvAfresh marks a rank whose restart was seen past the old position: the
// next stream's first batch of it should be the new process's first.
type kvAfresh struct {
	rank int
	on   bool
}

// startedAfresh checks the first batch of its rank on the stream that
// followed restartedPast: numbered above 0, the new process's batches before
// it were lost, which is counted as a gap (the mirror was reset already;
// nothing better can be had).
func (k *kvSub) startedAfresh(b *KVEventBatch) {
	if !k.afresh.on || k.afresh.rank != b.DPRank {
		return
	}
	k.afresh.on = false
	if b.Seq == 0 {
		return
	}
	k.warn.Warn(k.log, "KV events lost: the restarted engine's first batches could not be replayed; its mirror starts at a later batch",
		"rank", b.DPRank, "received", b.Seq)
	k.update(func(s *KVEventStatus) { s.Gaps++ })
	if k.cfg.Metrics.Gap != nil {
		k.cfg.Metrics.Gap(k.url)
	}
}
