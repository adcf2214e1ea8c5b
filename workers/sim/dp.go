package sim

// Data parallelism (Config.DPSize > 1). An engine started with --dp-size N
// (SGLang) or --data-parallel-size N (vLLM) runs N replicas of the model
// behind one address, each with its own scheduler and KV cache. The
// simulator models each rank as an Engine of its own (queue, running
// requests, paged cache, KV events, counters) behind one front Engine that
// owns the gRPC service:
//
//   - Generate goes to the rank the request names (data_parallel_rank). A
//     request that names none goes to the rank with the fewest requests
//     waiting and running, lowest rank first on a tie, as vLLM's engine
//     client balances unpinned requests. Both protocols' field is optional
//     in Generate, and absent means "none" (SGLang's Embed has a plain
//     int32, where 0 is rank 0). A rank outside [0, N) is INVALID_ARGUMENT.
//   - GetLoads reports one SchedulerLoad per rank (dp_rank, dp_rank_count
//     N); a request for one rank (dp_rank) gets that rank's alone.
//   - GetServerInfo reports N: SGLang in server_args.dp_size, vLLM in
//     data_parallel_size.
//   - SubscribeKvEvents is one stream carrying every rank's batches, each
//     with its dp_rank and numbered per rank from 0 (each rank publishes on
//     its own, as the engines' per-rank publishers do). A start sequence
//     number is applied to every rank's numbering.
//   - Abort and FlushCache reach every rank; faults set on the front engine
//     apply to every rank.
//
// Disaggregation roles are not modelled with ranks: DPSize > 1 needs the
// regular role.

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// maxDPSize bounds Config.DPSize.
const maxDPSize = 64

// newRanks creates the ranks of a data-parallel front engine.
func (e *Engine) newRanks(host string) error {
	for i := range e.cfg.DPSize {
		c := e.cfg
		c.DPSize = 0
		r, err := newEngine(c, host)
		if err != nil {
			e.closeRanks()
			return err
		}
		r.rank = int32(i)
		r.log = r.log.With("dp_rank", i)
		e.ranks = append(e.ranks, r)
	}
	return nil
}

func (e *Engine) closeRanks() {
	for _, r := range e.ranks {
		r.Close()
	}
}

// DPSize is the number of data-parallel ranks: Config.DPSize, or 1.
func (e *Engine) DPSize() int { return max(len(e.ranks), 1) }

// Rank returns data-parallel rank i's engine, for its stats and cache; the
// engine itself when it has a single rank. It panics for a rank outside
// [0, DPSize).
func (e *Engine) Rank(i int) *Engine {
	if e.ranks == nil && i == 0 {
		return e
	}
	return e.ranks[i]
}

// forRank picks the rank that serves a request naming rank (when named).
func (e *Engine) forRank(rank int32, named bool) (*Engine, error) {
	if e.ranks == nil {
		return e, nil
	}
	if named {
		if rank < 0 || int(rank) >= len(e.ranks) {
			return nil, e.invalid("data_parallel_rank %d outside [0, %d)", rank, len(e.ranks))
		}
		return e.ranks[rank], nil
	}
	best, bestLoad := e.ranks[0], -1
	for _, r := range e.ranks {
		r.mu.Lock()
		n := r.running + len(r.queue)
		r.mu.Unlock()
		if bestLoad < 0 || n < bestLoad {
			best, bestLoad = r, n
		}
	}
	return best, nil
}

// rankLoads is each rank's load, in rank order; the engine's own for a
// single rank.
func (e *Engine) rankLoads() []load {
	if e.ranks == nil {
		return []load{e.load()}
	}
	out := make([]load, len(e.ranks))
	for i, r := range e.ranks {
		out[i] = r.load()
	}
	return out
}

// subscribeRanks merges every rank's KV event stream into one, as a
// data-parallel engine's SubscribeKvEvents does; it ends with the first
// rank's stream to end.
func (e *Engine) subscribeRanks(ctx context.Context, start uint64, send func(*smgcommon.KvEventBatch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		sendMu sync.Mutex // a gRPC stream's Send is not safe for concurrent use
		wg     sync.WaitGroup
		once   sync.Once
		first  error
	)
	for _, r := range e.ranks {
		wg.Go(func() {
			err := r.subscribeKvEvents(ctx, start, func(b *smgcommon.KvEventBatch) error {
				sendMu.Lock()
				defer sendMu.Unlock()
				return send(b)
			})
			once.Do(func() { first = err })
			cancel()
		})
	}
	wg.Wait()
	return first
}

// dpRankField is the dp_rank a batch of this engine carries.
func (e *Engine) dpRankField() *int32 { return proto.Int32(e.rank) }

// addRank adds a rank's figures to a front engine's, so that Stats of a
// data-parallel engine describes the whole engine. KVNextSequence stays the
// front's (0): each rank numbers its own batches.
func (st *Stats) addRank(r Stats) {
	st.Running += r.Running
	st.Waiting += r.Waiting
	st.UsedTokens += r.UsedTokens
	st.CachedPages += r.CachedPages
	st.PinnedPages += r.PinnedPages
	st.CapacityTokens += r.CapacityTokens
	st.Requests += r.Requests
	st.Completed += r.Completed
	st.Aborted += r.Aborted
	st.Cancelled += r.Cancelled
	st.Failed += r.Failed
	st.Rejected += r.Rejected
	st.QueuedFull += r.QueuedFull
	st.PromptTokens += r.PromptTokens
	st.CachedPromptTokens += r.CachedPromptTokens
	st.GeneratedTokens += r.GeneratedTokens
	st.QueueShrunk += r.QueueShrunk
	st.QueueGrown += r.QueueGrown
	st.KVSubscribers += r.KVSubscribers
}

// sglangAggregate is GetLoads' aggregate over the ranks: totals of the
// counts, averages of the fractions and rates.
func sglangAggregate(loads []load) *sglang.AggregateMetrics {
	a := &sglang.AggregateMetrics{}
	for _, l := range loads {
		a.TotalRunningReqs += int32(l.running)
		a.TotalWaitingReqs += int32(l.waiting)
		a.TotalReqs += int32(l.total)
		a.AvgTokenUsage += l.tokenUsage
		a.AvgUtilization += l.utilization
		a.AvgThroughput += l.genTput
	}
	n := float64(len(loads))
	a.AvgTokenUsage /= n
	a.AvgUtilization /= n
	a.AvgThroughput /= n
	return a
}
