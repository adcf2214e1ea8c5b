package workers

// Data-parallel ranks. An engine started with data parallelism (SGLang
// --dp-size, vLLM --data-parallel-size) runs N independent schedulers behind
// one gRPC address, each with its own KV cache. Left alone, the engine's own
// balancer places each request on a rank, and a conversation's second turn
// may land on a rank that never saw its first: the prefix cache the router
// aimed for is on another GPU. With DP awareness the router treats each rank
// as a routing target of its own, named url@rank, and names the rank in
// every request it sends (SGLang's and vLLM's data_parallel_rank), so the
// cache-aware policies see N caches, N loads and N event streams.
//
// The ranks of one engine share what is the engine's: its connection (closed
// when the last rank is closed), its health (checked once per connection and
// applied to every rank), its load report (polled once, one figure per rank)
// and its KV event stream (one subscription, each batch applied to the rank
// its dp_rank names). Everything else is per rank: in-flight count, breaker,
// draining, the policies' trees and counters.
//
// url@rank is an output name: it is what ListWorkers, metrics and the
// policies show, and Registry.Get, Admin.RemoveWorker and x-target-worker
// accept it. It is never parsed from --worker-urls, where url@PORT means a
// prefill engine's bootstrap port with PD disaggregation.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxDPSize bounds the ranks one engine may report, and so the targets it
// becomes. Real deployments have tens of ranks per engine.
const maxDPSize = 1024

// RankName is the routing target name of an engine's rank.
func RankName(url string, rank int) string { return url + "@" + strconv.Itoa(rank) }

// SplitRankName splits a rank target's name (grpc://host:port@3) into the
// engine's address and the rank. ok is false for a name without a rank.
func SplitRankName(name string) (addr string, rank int, ok bool) {
	i := strings.LastIndexByte(name, '@')
	if i < 0 {
		return "", 0, false
	}
	r, err := strconv.Atoi(name[i+1:])
	if err != nil || r < 0 || r >= maxDPSize || strconv.Itoa(r) != name[i+1:] {
		return "", 0, false
	}
	return name[:i], r, true
}

// CanonicalName is the registry's name for a worker address or a rank
// target's name (grpc://host:port, host:port, either followed by @rank), as
// Registry.Get accepts them.
func CanonicalName(addr string) (string, error) {
	if base, rank, ok := SplitRankName(strings.TrimSpace(addr)); ok {
		url, _, err := ParseAddress(base)
		if err != nil {
			return "", err
		}
		return RankName(url, rank), nil
	}
	url, _, err := ParseAddress(addr)
	return url, err
}

// dpGroup is what the ranks of one engine share.
type dpGroup struct {
	endpoint string
	backend  Backend // the engine's adapter, without a rank
	members  []*Worker

	closeConn func() error
	open      atomic.Int32 // ranks not closed yet
	closeOnce sync.Once
	closeErr  error
}

// release is one rank's Close: the connection closes with the last rank.
func (g *dpGroup) release() error {
	if g.open.Add(-1) > 0 {
		return nil
	}
	g.closeOnce.Do(func() {
		if g.closeConn != nil {
			g.closeErr = g.closeConn()
		}
	})
	return g.closeErr
}

// RankLoader is implemented by the adapters whose engines report load per
// data-parallel rank (both do, in GetLoads).
type RankLoader interface {
	// RankLoads returns each rank's load, by rank.
	RankLoads(ctx context.Context) (map[int]Load, error)
}

// DPSizer is implemented by the adapters whose engines report their
// data-parallel size.
type DPSizer interface {
	// DPSize is the number of data-parallel ranks behind the engine's
	// address; 1 without data parallelism.
	DPSize(ctx context.Context) (int, error)
}

// poll reads the engine's per-rank loads once and records each rank's.
func (g *dpGroup) poll(ctx context.Context) error {
	rl, ok := g.backend.(RankLoader)
	if !ok {
		return fmt.Errorf("worker %s: its adapter reports no per-rank loads", g.endpoint)
	}
	polls := make([]LoadPoll, len(g.members))
	for i, w := range g.members {
		polls[i] = w.BeginLoadPoll()
	}
	loads, err := rl.RankLoads(ctx)
	if err != nil {
		return err
	}
	for i, w := range g.members {
		if l, ok := loads[w.rank]; ok {
			polls[i].Record(l)
		}
	}
	return nil
}

// rankBackend is one rank's view of the engine's adapter: every generation
// names the rank; the rest is the engine's.
type rankBackend struct {
	Backend
	rank int
}

func (b rankBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	r := *req
	rank := b.rank
	r.DPRank = &rank
	return b.Backend.Generate(ctx, &r)
}

func (b rankBackend) Embed(ctx context.Context, req *EmbedRequest) (*EmbedResult, error) {
	r := *req
	rank := b.rank
	r.DPRank = &rank
	return b.Backend.Embed(ctx, &r)
}

// Loads is the rank's own load (RunLoadPolls reads every rank's at once
// instead; this serves callers that ask one worker).
func (b rankBackend) Loads(ctx context.Context) (Load, error) {
	rl, ok := b.Backend.(RankLoader)
	if !ok {
		return b.Backend.Loads(ctx)
	}
	loads, err := rl.RankLoads(ctx)
	if err != nil {
		return Load{}, err
	}
	return loads[b.rank], nil
}

// Rank is the data-parallel rank the worker is a target for, or -1 when the
// worker is a whole engine.
func (w *Worker) Rank() int { return w.rank }

// Endpoint is the URL of the engine behind the worker: URL without the rank
// for a rank target, URL itself otherwise.
func (w *Worker) Endpoint() string { return w.endpoint }

// sameConnection is a key shared by the workers behind one connection (the
// ranks of an engine), so that what is per connection runs once.
func (w *Worker) sameConnection() any {
	if w.group != nil {
		return w.group
	}
	return w
}

// engineDPSize asks w's engine its data-parallel size; 1 when its adapter
// cannot tell.
func engineDPSize(ctx context.Context, w *Worker) (int, error) {
	s, ok := w.backend.(DPSizer)
	if !ok {
		return 1, nil
	}
	n, err := s.DPSize(ctx)
	if err != nil {
		return 0, err
	}
	if n > maxDPSize {
		return 0, fmt.Errorf("worker %s reports %d data-parallel ranks; at most %d are supported", w.url, n, maxDPSize)
	}
	return max(n, 1), nil
}

// splitRanks turns a connected worker into one target per rank sharing its
// connection. w itself is not used afterwards (nor closed: its connection
// now belongs to the ranks).
func splitRanks(w *Worker, n int, br *BreakerConfig) ([]*Worker, error) {
	g := &dpGroup{endpoint: w.url, backend: w.backend, closeConn: w.closer}
	g.open.Store(int32(n))
	ws := make([]*Worker, n)
	for r := range n {
		rw := NewWorker(RankName(w.url, r), w.protocol, w.role, w.Info(), rankBackend{Backend: w.backend, rank: r}, g.release)
		rw.endpoint, rw.rank, rw.group, rw.reconnects = w.url, r, g, w.reconnects
		if br != nil {
			if err := rw.breaker.Reconfigure(*br); err != nil {
				return nil, fmt.Errorf("worker %s: %w", rw.url, err)
			}
		}
		ws[r] = rw
	}
	g.members = ws
	return ws, nil
}

// ConnectAll connects to the engine at addr as Connect does and returns its
// routing targets: the worker itself, or, when opts.DPAware is set and the
// engine reports more than one data-parallel rank, one worker per rank
// (see RankName), sharing the connection.
func ConnectAll(ctx context.Context, addr string, opts ConnectOptions) ([]*Worker, error) {
	w, err := Connect(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	if !opts.DPAware {
		return []*Worker{w}, nil
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	n, err := engineDPSize(cctx, w)
	cancel()
	if err != nil {
		_ = w.Close()
		return nil, connectError(w.url, "reading its data-parallel size", err)
	}
	if n == 1 {
		return []*Worker{w}, nil
	}
	ws, err := splitRanks(w, n, opts.Breaker)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	rankCapacities(ctx, ws, timeout)
	return ws, nil
}

// rankCapacities gives each rank target its own rank's KV capacity, where
// the engine's model information had the whole engine's (vLLM's comes from
// the sum of its ranks' loads): the policies bound a worker's share of the
// tree by its capacity. An engine that does not answer keeps the figure.
func rankCapacities(ctx context.Context, ws []*Worker, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rl, ok := ws[0].group.backend.(RankLoader)
	if !ok {
		return
	}
	loads, err := rl.RankLoads(ctx)
	if err != nil {
		return
	}
	for _, w := range ws {
		info := w.Info()
		if c := loads[w.rank].MaxTotalTokens; c > 0 {
			info.KVCapacityTokens = c
		}
		if n := loads[w.rank].MaxRunning; n > 0 {
			info.MaxRunningRequests = n
		}
		info = info.sane()
		w.info.Store(&info)
	}
}
