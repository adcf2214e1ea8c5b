package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// Config is one `kvgate bench` invocation.
type Config struct {
	// Policies are run one after the other, each against a fresh fleet.
	// Labels are policy names with variants (see ParsePolicy), or Pooled
	// for the pooled reference: one engine as large as the fleet.
	Policies []string
	// Workers is the number of simulated engines per fleet.
	Workers int
	// Routers are the replica counts each policy runs with: for each, a fresh
	// fleet of Workers engines with that many routers in front, and every
	// request sent to one of them chosen uniformly at random. Empty means
	// {1}: one router, as `kvgate serve` runs.
	Routers []int
	// Sim configures each simulated engine (see SimConfig).
	Sim sim.Config
	// Router, when set, adjusts each in-process router's configuration
	// last: kvgate bench's admission and late-binding flags, named as
	// serve's, so that a setting is measured as it would ship.
	Router func(*router.Config)
	// Target, when set, is a running router (host:port) to measure instead of
	// in-process fleets: one run, labelled "target" or TargetLabel.
	Target string
	// TargetFront is the API Target serves: "" for kvgate's gRPC Router
	// service, PeerSMG for SMG's HTTP /generate with token ids, so that a
	// peer already running (in front of real engines, say) is measured as
	// `--peers` measures the one it starts.
	TargetFront string
	// TargetModel is the model a PeerSMG target is asked for (SMG's
	// /generate refuses a request that names no model it serves).
	TargetModel string
	// TargetLabel labels the target's run ("" is "target").
	TargetLabel string
	// Concurrency caps requests in flight (0: unlimited, which needs timed
	// arrivals: a --qps or a trace).
	Concurrency int
	// Seed is the sampling seed sent with every request, so outputs, and with
	// them multiturn histories, are the same under every policy. It also
	// seeds the choice of replica, so a run can be repeated request for
	// request.
	Seed int32
	// Unseeded sends no sampling seed: outputs then differ from run to run,
	// but an engine that cannot take a seed serves (vLLM's CPU build dies on
	// a seeded request whose prefill is split).
	Unseeded bool
	// Progress, when not nil, receives a line as each run ends.
	Progress io.Writer
	// Live, when not nil, is a terminal: while a run lasts, one status line
	// (requests done of the workload's, errors, elapsed, rate) is rewritten
	// on it every LiveEvery (0: a second), and erased when the run ends.
	// Leave it nil when the output is a file or a pipe.
	Live      io.Writer
	LiveEvery time.Duration
}

// outcome is what one request measured.
type outcome struct {
	ttft, e2e  time.Duration
	itl        []time.Duration
	prompt     int
	cached     int
	oracle     int // tokens the oracle had cached
	completion int
	worker     string
	err        error
	// sent and end are when the request was sent and when it ended.
	sent, end time.Time
	// head is a hash of the prompt's first headTokens tokens: requests
	// that begin alike (a shared-prefix group, a conversation's system
	// prompt) share it, so a request log shows where each prefix went.
	head uint64
}

// Run runs wl once per policy and replica count (or once against
// cfg.Target) and reports, the runs in that order: each policy with each of
// cfg.Routers.
func Run(ctx context.Context, cfg Config, wl *Workload) (*Report, error) {
	routers := cfg.Routers
	if len(routers) == 0 {
		routers = []int{1}
	}
	for _, n := range routers {
		if n < 1 {
			return nil, fmt.Errorf("--routers has %d; every count must be at least 1", n)
		}
	}
	rep := &Report{Workload: wl.Name}
	if cfg.Target != "" {
		if !slices.Equal(routers, []int{1}) {
			return nil, fmt.Errorf("--routers %v: a --target is one router; replicas need in-process fleets", routers)
		}
		fr, err := targetFront(ctx, cfg)
		if err != nil {
			return nil, err
		}
		label := cfg.TargetLabel
		if label == "" {
			label = "target"
		}
		r, err := runOnce(ctx, cfg, wl, label, fr, nil)
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, r)
		return rep, nil
	}
	for _, label := range cfg.Policies {
		for _, n := range routers {
			r, err := runFleet(ctx, cfg, wl, label, n)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", runLabel(label, n, cfg.replicated()), err)
			}
			rep.Runs = append(rep.Runs, r)
		}
	}
	return rep, nil
}

// replicated tells whether some run has several routers, and so every run's
// label names its replica count.
func (c Config) replicated() bool {
	return slices.ContainsFunc(c.Routers, func(n int) bool { return n > 1 })
}

// runFleet runs wl against a fresh fleet of cfg.Workers engines with
// routers replicas in front.
func runFleet(ctx context.Context, cfg Config, wl *Workload, label string, routers int) (PolicyRun, error) {
	n, sc := cfg.Workers, cfg.Sim
	if label == Pooled {
		n, sc = 1, PooledSim(sc, cfg.Workers)
	}
	f, err := StartReplicatedTestbed(ctx, label, n, routers, sc, cfg.Router)
	if err != nil {
		return PolicyRun{}, err
	}
	defer f.Close()
	fr, err := dialRouters(f.Addrs)
	if err != nil {
		return PolicyRun{}, err
	}
	return runOnce(ctx, cfg, wl, label, fr, f)
}

// targetFront is the client of cfg.Target through the front it serves.
func targetFront(ctx context.Context, cfg Config) (front, error) {
	switch cfg.TargetFront {
	case "":
		if err := probeVocabulary(ctx, cfg.Target); err != nil {
			return nil, err
		}
		return dialRouters([]string{cfg.Target})
	case PeerSMG:
		if cfg.TargetModel == "" {
			return nil, fmt.Errorf("--target-front %s: --target-model must name the model SMG serves (its /generate refuses a request without one)", PeerSMG)
		}
		return newSMGFront("http://"+cfg.Target, cfg.TargetModel), nil
	}
	return nil, fmt.Errorf("--target-front %q: want empty (kvgate's gRPC Router service) or %s (SMG's HTTP /generate)", cfg.TargetFront, PeerSMG)
}

// runLabel names a run: the policy, and when some run of the report has
// several routers, its replica count ("cache_aware ×4").
func runLabel(policy string, routers int, replicated bool) string {
	if !replicated {
		return policy
	}
	return fmt.Sprintf("%s ×%d", policy, routers)
}

// runOnce drives wl through fr, and closes it, and summarizes the run; f,
// when not nil, is the fleet behind it.
func runOnce(ctx context.Context, cfg Config, wl *Workload, label string, fr front, f *Testbed) (PolicyRun, error) {
	defer fr.close()
	workers := 0
	if f != nil {
		workers = f.Workers
	}
	r, err := drive(ctx, cfg, wl, label, fr, workers, nil)
	if err != nil {
		return PolicyRun{}, err
	}
	r.PredictionExact = nullable(math.NaN())
	if f != nil {
		r.PredictionExact = nullable(f.PredictionExact())
		r.Misses = f.predictionMisses()
	}
	return r, reportRun(cfg, r)
}

// drive sends wl through fr and summarizes what came back (workers is the
// fleet's size, for the load CoV; 0: the workers seen). after, when not nil,
// runs as soon as the last request has ended, before anything else is read
// (a peer's CPU time, say).
func drive(ctx context.Context, cfg Config, wl *Workload, label string, fr front, workers int, after func()) (PolicyRun, error) {
	d := &driver{
		front:     fr,
		seed:      requestSeed(cfg),
		routeSeed: uint64(uint32(cfg.Seed)),
	}
	if cfg.Concurrency > 0 {
		d.sem = make(chan struct{}, cfg.Concurrency)
	}
	start := time.Now()
	stopLive := d.live(cfg, label, wl.Size(), start)
	if wl.Conversations != nil {
		d.conversations(ctx, start, wl)
	} else {
		d.open(ctx, start, wl.Requests)
	}
	stopLive()
	if after != nil {
		after()
	}
	if err := ctx.Err(); err != nil {
		return PolicyRun{}, err
	}
	r := summarize(label, start, d.outcomes, workers)
	r.Routers = fr.replicas()
	if n := d.followUps.Load(); n > 0 {
		r.SameWorkerRate = nullable(float64(d.sameWorker.Load()) / float64(n))
	}
	r.outcomes = d.outcomes
	return r, nil
}

// noSeed is genRequest.seed for a request that carries no seed.
const noSeed = -1

// requestSeed is the sampling seed cfg sends with each request, noSeed when
// it is Unseeded.
func requestSeed(cfg Config) int32 {
	if cfg.Unseeded {
		return noSeed
	}
	return cfg.Seed
}

// reportRun prints a run's progress line and fails a run whose every
// request failed.
func reportRun(cfg Config, r PolicyRun) error {
	if cfg.Progress != nil {
		name := runLabel(r.Policy, r.Routers, cfg.replicated())
		fmt.Fprintf(cfg.Progress, "%s: %d requests, %d errors, ttft p50 %.1f ms, cache hit %.3f (oracle %.3f)\n",
			name, r.Requests, r.Errors, r.TTFT.P50, r.CacheHitRate, r.OracleHitRate)
		if r.Errors > 0 {
			fmt.Fprintf(cfg.Progress, "%s: first error: %v\n", name, firstErr(r.outcomes))
		}
	}
	if r.Requests == r.Errors && r.Requests > 0 {
		return fmt.Errorf("every request failed; the first: %w", firstErr(r.outcomes))
	}
	return nil
}

func firstErr(os []outcome) error {
	for _, o := range os {
		if o.err != nil {
			return o.err
		}
	}
	return nil
}

// driver sends a workload's requests and collects their outcomes.
type driver struct {
	// front sends each request to one of the router replicas.
	front     front
	seed      int32
	routeSeed uint64
	sem       chan struct{}

	// followUps counts the conversation turns after the first that
	// succeeded after a successful turn; sameWorker those that went to the
	// worker of the turn before.
	followUps, sameWorker atomic.Int64

	mu       sync.Mutex
	outcomes []outcome
	failed   int // outcomes with an error
	oracle   Oracle
}

// live rewrites a status line on cfg.Live every cfg.LiveEvery until the
// returned stop is called, which erases the line and returns once nothing
// more will be written. total is the requests the run will send.
func (d *driver) live(cfg Config, label string, total int, start time.Time) (stop func()) {
	if cfg.Live == nil {
		return func() {}
	}
	every := cfg.LiveEvery
	if every <= 0 {
		every = time.Second
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprint(cfg.Live, "\r\x1b[K")
				return
			case now := <-t.C:
				d.mu.Lock()
				n, failed := len(d.outcomes), d.failed
				d.mu.Unlock()
				fmt.Fprint(cfg.Live, "\r\x1b[K"+liveLine(label, n, total, failed, now.Sub(start)))
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// liveLine is the status line of a run n of whose total requests have ended,
// failed of them in error, elapsed after its start.
func liveLine(label string, n, total, failed int, elapsed time.Duration) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	return fmt.Sprintf("%s: %d/%d requests, %d errors, %s, %.1f req/s", label, n, total, failed, elapsed.Truncate(time.Second), rate)
}

// replica returns the replica for the i-th request of stream (0: an open
// workload's requests; c+1: conversation c's turns).
func (d *driver) replica(stream, i int) int {
	return replicaIndex(d.routeSeed, stream, i, d.front.replicas())
}

// replicaIndex picks one of n replicas uniformly at random for the i-th
// request of stream. The choice is a function of seed, stream and i alone,
// not of the order in which goroutines happen to ask, so a seed sends every
// request to the same replica in every run.
func replicaIndex(seed uint64, stream, i, n int) int {
	if n == 1 {
		return 0
	}
	return rand.New(rand.NewPCG(seed, uint64(stream)<<32|uint64(uint32(i)))).IntN(n)
}

func (d *driver) acquire(ctx context.Context) bool {
	if d.sem == nil {
		return ctx.Err() == nil
	}
	select {
	case d.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (d *driver) release() {
	if d.sem != nil {
		<-d.sem
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	dt := time.Until(t)
	if dt <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(dt)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// open sends requests at their arrival times, each on its own goroutine.
func (d *driver) open(ctx context.Context, start time.Time, reqs []Arrival) {
	var wg sync.WaitGroup
	for i, r := range reqs {
		if !sleepUntil(ctx, start.Add(r.At)) || !d.acquire(ctx) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer d.release()
			d.send(ctx, d.replica(0, i), r.Prompt, r.Output)
		}()
	}
	wg.Wait()
}

// conversations runs each user's turns in order, the next after the answer.
// Each turn picks its replica afresh, as a client behind a load balancer
// would, so a conversation hops between routers; whether its turns still
// reach one worker is counted in followUps and sameWorker.
func (d *driver) conversations(ctx context.Context, start time.Time, wl *Workload) {
	var budget atomic.Int64
	budget.Store(int64(wl.Size()))
	var wg sync.WaitGroup
	for ci, c := range wl.Conversations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepUntil(ctx, start.Add(c.At)) {
				return
			}
			var prompt []uint32
			var prevWorker string
			for r, q := range c.Questions {
				if budget.Add(-1) < 0 || !d.acquire(ctx) {
					return
				}
				if r == 0 {
					prompt = append(slices.Clone(c.System), q...)
				} else {
					prompt = append(prompt, q...)
				}
				out, worker := d.send(ctx, d.replica(ci+1, r), prompt, c.Output)
				d.release()
				if out == nil { // failed: the conversation ends
					return
				}
				// A front that names no worker (a peer's HTTP API) leaves
				// the same-worker rate unknown.
				if r > 0 && worker != "" {
					d.followUps.Add(1)
					if worker == prevWorker {
						d.sameWorker.Add(1)
					}
				}
				prevWorker = worker
				prompt = append(slices.Clip(prompt), out...)
			}
		}()
	}
	wg.Wait()
}

// send runs one streamed generation through replica and records its
// outcome; it returns the output ids and the worker that served them, or nil
// when the request failed.
func (d *driver) send(ctx context.Context, replica int, prompt []uint32, output int) ([]uint32, string) {
	d.mu.Lock()
	oracle := d.oracle.Match(prompt)
	d.oracle.Insert(prompt)
	d.mu.Unlock()

	t0 := time.Now()
	o := outcome{prompt: len(prompt), oracle: oracle, sent: t0, head: headHash(prompt)}
	last := t0
	res, err := d.front.generate(ctx, replica, genRequest{prompt: prompt, maxNew: uint32(output), seed: d.seed}, func() {
		now := time.Now()
		if o.ttft == 0 {
			o.ttft = now.Sub(t0)
		} else {
			o.itl = append(o.itl, now.Sub(last))
		}
		last = now
	})
	if err == nil {
		o.e2e = time.Since(t0)
		if o.ttft == 0 {
			o.ttft = o.e2e
		}
		o.prompt, o.cached, o.completion, o.worker = res.prompt, res.cached, res.completion, res.worker
	}
	ids := res.outputIDs
	o.err = err
	o.end = time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil && len(ids) > 1 {
		seq := make([]uint32, 0, len(prompt)+len(ids)-1)
		d.oracle.Insert(append(append(seq, prompt...), ids[:len(ids)-1]...))
	}
	d.outcomes = append(d.outcomes, o)
	if err != nil {
		d.failed++
		return nil, ""
	}
	return ids, o.worker
}

// probeVocabulary sends the target one request holding the largest token id
// the token workloads draw. A router in front of engines with a smaller
// vocabulary (the embedded default's simulated engines, say) refuses every
// such request with INVALID_ARGUMENT; saying so once, with what to do,
// beats a report of nothing but errors. Any other outcome, a refusal for
// another reason or an unreachable target included, is left to the run.
func probeVocabulary(ctx context.Context, target string) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("--target %s: %w", target, err)
	}
	defer conn.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	one := uint32(1)
	stream, err := kvgatev1.NewRouterClient(conn).Generate(pctx, &kvgatev1.GenerateRequest{
		RequestId:      "kvgate-bench-vocabulary-probe",
		InputIds:       []uint32{maxTokenID - 1},
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: &one},
	})
	for err == nil {
		_, err = stream.Recv()
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "input_ids") {
		return fmt.Errorf("--target %s refuses token id %d (%s): the token workloads draw ids below %d, Llama 3's vocabulary, "+
			"so every request would fail; put engines with that vocabulary behind the router (kvgate sim --vocab-size %d --tokenizer-path none) "+
			"or use --workload unique, which sends text", target, maxTokenID-1, st.Message(), maxTokenID, VocabSize)
	}
	return nil
}
